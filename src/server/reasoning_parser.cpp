#include "server/reasoning_parser.h"

#include <algorithm>
#include <array>
#include <utility>

#include "base/text.h"
#include "server/named_formats.h"

namespace tessera::server {
namespace {

std::string erase_all(std::string text, std::string_view what) {
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at)) text.erase(at, what.size());
    return text;
}

// The detectors' think_excluded_tokens (reasoning_parser.py): Qwen3Detector's (and its
// subclasses', DeepSeek-V3's among them), KimiK2Detector's and Glm45Detector's.
const std::vector<std::string> kQwen3Excluded = {"<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>"};
const std::vector<std::string> kKimiK2Excluded = {
    "<think>",           "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
    "<|tool_call_section_end|>", "<|tool_call_end|>", "[EOS]", "<|im_end|>", "<|end_header_id|>", "[EOT]"};
const std::vector<std::string> kGlm45Excluded = {"<tool_call>", "</tool_call>", "<eop>", "<|user|>", "<|endoftext|>"};

// reasoning_parser.py ReasoningParser.DetectorMap: several names share a detector.
const std::array<ReasoningFormat, 13> kFormats = {{
    {"deepseek-r1", "<think>", "</think>", true, "", {}},
    {"deepseek-v3", "<think>", "</think>", false, "thinking", kQwen3Excluded},
    {"deepseek-v4", "<think>", "</think>", false, "thinking", kQwen3Excluded},
    {"glm45", "<think>", "</think>", false, "enable_thinking", kGlm45Excluded},
    {"interns1", "<think>", "</think>", false, "enable_thinking", kQwen3Excluded},
    // ◁think▷ ◁/think▷
    {"kimi", "\xE2\x97\x81think\xE2\x96\xB7", "\xE2\x97\x81/think\xE2\x96\xB7", false, "", {}},
    {"kimi_k2", "<think>", "</think>", true, "", kKimiK2Excluded},  // DetectorMap: DeepSeekR1Detector's tags
    {"minimax", "<think>", "</think>", true, "", kQwen3Excluded},
    {"mistral", "[THINK]", "[/THINK]", false, "", {}},
    {"qwen3", "<think>", "</think>", false, "enable_thinking", kQwen3Excluded},
    {"qwen3-thinking", "<think>", "</think>", true, "", kQwen3Excluded},
    {"step3", "<think>", "</think>", true, "", {}},
    {"step3p5", "<think>", "</think>", true, "", {}},
}};

}  // namespace

StatusOr<ReasoningFormat> reasoning_format(std::string_view name) {
    return find_named_format(kFormats, "--reasoning-parser", name);
}

bool template_opens_reasoning(std::string_view chat_template) {
    // The template's source spells the newlines as escapes inside its string literals.
    return chat_template.find("<|im_start|>assistant\\n<think>\\n") != std::string_view::npos ||
           chat_template.find("<|im_start|>assistant\n<think>\n") != std::string_view::npos;
}

ReasoningDetector::ReasoningDetector(const ReasoningFormat& format, bool force_reasoning, bool stream_reasoning)
    : start_(format.think_start),
      end_(format.think_end),
      in_reasoning_(force_reasoning || format.always_reasoning),
      stream_reasoning_(stream_reasoning) {}

ReasoningParts ReasoningDetector::parse_all(std::string_view text) const {
    if (!in_reasoning_ && text.find(start_) == std::string_view::npos) return {"", std::string(text)};
    const std::string processed(strip_whitespace(erase_all(std::string(text), start_)));
    const std::size_t end = processed.find(end_);
    if (end == std::string::npos) return {processed, ""};  // cut off before the end tag
    return {processed.substr(0, end), std::string(strip_whitespace(std::string_view(processed).substr(end + end_.size())))};
}

ReasoningParts ReasoningDetector::parse_increment(std::string_view piece) {
    buffer_ += piece;
    std::string current = buffer_;
    // A proper prefix of either tag: wait for more.
    for (const std::string* tag : {&start_, &end_}) {
        if (tag->size() > current.size() && tag->compare(0, current.size(), current) == 0) return {};
    }
    if (!stripped_start_ && current.find(start_) != std::string::npos) {
        current = erase_all(std::move(current), start_);
        buffer_ = current;  // held reasoning no longer carries the tag
        stripped_start_ = true;
        in_reasoning_ = true;
    }
    if (in_reasoning_) {
        const std::size_t end = current.find(end_);
        if (end != std::string::npos) {
            buffer_.clear();
            in_reasoning_ = false;
            return {std::string(rstrip_whitespace(std::string_view(current).substr(0, end))),
                    current.substr(end + end_.size())};
        }
        if (!stream_reasoning_) return {};
        // Unlike SGLang, the start of an end tag at the tail waits too: the tag may come in
        // pieces of text that do not start with it (several tokens per streamed chunk).
        const std::size_t keep = marker_start_at_end(current, end_);
        buffer_ = current.substr(current.size() - keep);
        current.resize(current.size() - keep);
        return {std::move(current), ""};
    }
    buffer_.clear();
    return {"", std::move(current)};
}

ReasoningParts ReasoningDetector::finish() {
    std::string held = std::exchange(buffer_, {});
    if (in_reasoning_) return {std::move(held), ""};
    return {"", std::move(held)};
}

}  // namespace tessera::server
