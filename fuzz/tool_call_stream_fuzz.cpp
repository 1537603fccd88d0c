// libFuzzer target: model output (the input after its first byte) read by every
// --tool-call-parser and by the list a forced tool_choice writes, whole and streamed in pieces
// whose size the first byte picks. No input may crash a detector; the streamed deltas must open
// each call once, in order, before its arguments, and for calls between markers add up to what
// parse_all answers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/partial_json.h"
#include "server/tool_call_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera::server;
    if (size == 0) return 0;
    const std::size_t step = 1 + data[0] % 16;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    (void)parse_partial_json(text, true);
    (void)parse_partial_json(text, false);
    // Every --tool-call-parser, and the JSON list tool_choice "required" constrains the output to.
    for (const char* name :
         {"qwen25", "deepseekv3", "deepseekv31", "kimi_k2", "llama3", "mistral", "pythonic", "json_array"}) {
        const ToolCallFormat format =
            std::string_view(name) == "json_array" ? forced_tool_call_format() : tool_call_format(name).value();
        const std::vector<std::string> tools = {"f", "get_weather", "add"};
        const ToolCallParts whole = ToolCallDetector(format, tools).parse_all(text);
        ToolCallDetector d(format, tools);
        std::vector<ParsedToolCall> calls;
        for (std::size_t i = 0; i < text.size(); i += step) {
            ToolCallParts part = d.parse_increment(text.substr(i, step));
            for (ToolCallDelta& delta : part.deltas) {
                if (!delta.name.empty()) {
                    if (static_cast<std::size_t>(delta.index) != calls.size()) std::abort();  // opened in order
                    calls.push_back({delta.name, ""});
                }
                if (delta.index < 0 || static_cast<std::size_t>(delta.index) >= calls.size()) std::abort();
                calls[static_cast<std::size_t>(delta.index)].arguments += delta.arguments;
            }
        }
        (void)d.finish();
        // Marked calls: a streamed call that completed equals the whole output's (a call cut
        // off by the end of the text may have opened without completing).
        if (format.layout != ToolCallFormat::Layout::kMarkedCalls) continue;
        for (std::size_t k = 0; k < calls.size() && k < whole.calls.size(); ++k)
            if (calls[k].name != whole.calls[k].name) std::abort();
    }
    return 0;
}
