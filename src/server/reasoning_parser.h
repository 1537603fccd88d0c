#pragma once
// server/reasoning_parser.h — --reasoning-parser: a chat completion's reasoning (the text
// between the model's think tags) goes to `reasoning_content`, the rest to `content`, whole
// or as it streams. SGLang's reasoning_parser.py (BaseReasoningFormatDetector,
// ReasoningParser.DetectorMap) and serving_chat.py (_get_enable_thinking_from_request).
// Text only: no model, no I/O. A ReasoningDetector belongs to one choice of one response.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::server {

struct ReasoningFormat {
    std::string name;  // as given to --reasoning-parser
    std::string think_start;
    std::string think_end;
    // The model's output starts inside its reasoning whatever the request says (DeepSeek-R1's
    // template opens the think block in the prompt).
    bool always_reasoning = false;
    // The chat_template_kwargs switch that opens it from the request ("" for none):
    // enable_thinking (Qwen3, GLM-4.5), thinking (DeepSeek-V3.1).
    std::string request_switch;
    // --enable-strict-thinking: what may not come inside the reasoning (the detector's
    // think_excluded_tokens: tool-call markers and end-of-turn tokens).
    std::vector<std::string> think_excluded_tokens;
};

// SGLang's names that tessera parses; another name is refused, listing these.
StatusOr<ReasoningFormat> reasoning_format(std::string_view name);

// Whether a chat template opens the think block itself at the start of the assistant's turn
// (SGLang's TemplateManager force_reasoning: "<|im_start|>assistant\n<think>\n").
bool template_opens_reasoning(std::string_view chat_template);

struct ReasoningParts {
    std::string reasoning;
    std::string normal;
};

class ReasoningDetector {
 public:
    // `force_reasoning`: the text starts inside the reasoning (no start tag needed).
    // `stream_reasoning`: hand out reasoning as it comes, else all of it at the end tag.
    ReasoningDetector(const ReasoningFormat& format, bool force_reasoning, bool stream_reasoning);

    // A whole output (detect_and_parse).
    ReasoningParts parse_all(std::string_view text) const;
    // The next piece of a streamed output (parse_streaming_increment). A piece that may be the
    // start of a think tag is held back until the next one decides.
    ReasoningParts parse_increment(std::string_view piece);
    // The end of the stream: what is still held back (reasoning if inside it, else content).
    ReasoningParts finish();

 private:
    std::string start_, end_;
    bool in_reasoning_;
    bool stream_reasoning_;
    bool stripped_start_ = false;
    std::string buffer_;
};

}  // namespace tessera::server
