#pragma once
// server/tool_call_parser.h — --tool-call-parser: the function calls a model writes in its
// own markup become a chat completion's `tool_calls`, whole or as each call completes
// (SGLang's function_call/qwen25_detector.py, deepseekv3_detector.py, deepseekv31_detector.py,
// kimik2_detector.py, llama32_detector.py, mistral_detector.py, pythonic_detector.py and
// base_format_detector.py parse_base_json). Text only: no model, no I/O. A ToolCallDetector
// belongs to one choice of one response.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::server {

struct ToolCallFormat {
    std::string name;          // as given to --tool-call-parser
    std::string section_start; // where the calls begin: text before it is content
    std::string section_end;   // after the last call ("" when the calls stand alone)
    std::string call_begin;    // around each call
    std::string call_end;
    // How the calls are written: each between call_begin and call_end; as JSON values after
    // section_start, one after another (separated by ';' or ','): Llama 3's {"name",
    // "parameters"}, Mistral's [{"name", "arguments"}, ...] and its compact name[ARGS]{...};
    // or as a Python list of calls, the whole output: [f(a=1), g(b="x")] (pythonic).
    enum class Layout { kMarkedCalls, kJsonValues, kPythonList };
    Layout layout = Layout::kMarkedCalls;
    bool calls_may_open_output = false;  // Llama 3: an output that begins with '{' is calls
    // Kimi-K2: a call's id is "functions.NAME:N", N counting the conversation's calls (SGLang's
    // serving_chat.py _process_tool_call_id); other formats answer "call_" and 24 hex digits.
    bool numbered_call_ids = false;
};

// SGLang's names that tessera parses (qwen25: Qwen 2.5 / Qwen3; deepseekv3: DeepSeek-V3;
// deepseekv31: DeepSeek-V3.1; kimi_k2: Kimi-K2; llama3: Llama 3.x; mistral: Mistral / Mixtral;
// pythonic: Llama 3.2 / Llama 4);
// another name is refused, listing these.
StatusOr<ToolCallFormat> tool_call_format(std::string_view name);

// How a call of one tool is written, for a structural tag (SGLang's detectors' structure_info):
// the text that opens a call of that tool up to its arguments, the text after them, and the
// trigger that starts any call. nullopt for formats whose arguments are not a JSON value
// (pythonic, whose detector refuses structural tags) and for the forced format.
struct ToolCallStructure {
    std::string begin;
    std::string end;
    std::string trigger;
};
std::optional<ToolCallStructure> tool_call_structure(const ToolCallFormat& format, const std::string& tool);

// What tool_choice "required" or a named function makes the output (SGLang's JsonArrayParser):
// the whole output one JSON list of {"name": ..., "parameters": {...}}, whatever
// --tool-call-parser says.
ToolCallFormat forced_tool_call_format();

struct ParsedToolCall {
    std::string name;
    std::string arguments;  // JSON text
};

// A streamed piece of a call (SGLang's ToolCallItem): the call at `index` (counted from 0 in the
// output) begins when `name` is set; `arguments` continues its JSON text. Joined in order,
// a call's pieces give the arguments parse_all would answer.
struct ToolCallDelta {
    int index = 0;
    std::string name;
    std::string arguments;
};

struct ToolCallParts {
    std::string normal;
    std::vector<ParsedToolCall> calls;   // parse_all
    std::vector<ToolCallDelta> deltas;   // parse_increment
};

class ToolCallDetector {
 public:
    // `tools`: the request's function names; a call of another name is dropped, as SGLang
    // does by default.
    ToolCallDetector(ToolCallFormat format, std::vector<std::string> tools);

    // A whole output: the content before the first call, and every well-formed call.
    ToolCallParts parse_all(std::string_view text) const;
    // The next streamed piece: content as it comes (a possible start of the calls held
    // back), and the calls as deltas. A call between markers, or a call object after Llama 3's
    // or Mistral's marker, streams as it is written: the name once it is whole, then the
    // arguments' JSON as far as it is settled (base_format_detector.py
    // parse_streaming_increment); Mistral's list and compact form and pythonic calls go out
    // whole once complete.
    ToolCallParts parse_increment(std::string_view piece);
    // The end of the stream: held-back text that turned out to be content.
    std::string finish();

 private:
    // One call's text between call_begin and call_end; false when it is malformed or names
    // no requested function.
    bool decode(std::string_view payload, std::vector<ParsedToolCall>& out) const;
    // The offered calls of a JSON list of {"name", "arguments"} / {"name", "parameters"}.
    bool take_actions(const nlohmann::ordered_json& actions, std::vector<ParsedToolCall>& out) const;
    // The kJsonValues layout: the calls complete at the front of `text`; returns the bytes read.
    std::size_t take_json_calls(std::string_view text, std::vector<ParsedToolCall>& out) const;
    std::string drop_markers(std::string text) const;
    ToolCallParts increment();         // parse_increment, whole calls in ToolCallParts::calls
    ToolCallParts python_increment();  // parse_increment of the pythonic layout
    bool open_call(std::string_view body, std::string& name, std::optional<nlohmann::ordered_json>& args) const;
    // The call being written (marked layout): its name and the arguments so far, as deltas.
    void stream_open_call(std::string_view body, ToolCallParts& parts);
    // The call ended with `payload`: what the deltas have not sent yet.
    void close_call(std::string_view payload, ToolCallParts& parts);
    // Calls that just ended, the first of them the one streaming if a name went out: the rest of
    // its arguments, the others whole.
    void finish_calls(std::vector<ParsedToolCall> calls, ToolCallParts& parts);

    ToolCallFormat format_;
    std::vector<std::string> tools_;
    std::string buffer_;
    bool in_calls_ = false;
    bool output_started_ = false;  // some text has come (calls_may_open_output looks at the first)
    // Streaming: calls sent so far, and of the open one whether its name went out (or it
    // names no requested function), the arguments sent, and their last settled dump.
    int calls_sent_ = 0;
    bool name_sent_ = false;
    bool call_skipped_ = false;
    std::string args_sent_;
    std::string args_dump_;
};

}  // namespace tessera::server
