#include "server/tool_call_parser.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "base/logging.h"
#include "base/text.h"
#include "server/json_limits.h"
#include "server/named_formats.h"
#include "server/partial_json.h"
#include "server/python_calls.h"

namespace tessera::server {
namespace {

// Insertion order: arguments keep the model's key order, as Python's json.dumps keeps it, and
// a streamed call's settled text only grows.
using Json = nlohmann::ordered_json;

// A model's JSON (a call, its arguments), or a discarded value when it is not JSON or nests past
// kMaxJsonDepth: a model can be made to write brackets deeper than any stack.
Json read_model_json(std::string_view text) {
    auto parsed = parse_json_text(text, kMaxJsonDepth, "tool call");
    return parsed.ok() ? std::move(parsed).value() : Json(Json::value_t::discarded);
}

// DeepSeek's markers use U+FF5C (｜) and U+2581 (▁); V3 and V3.1 share them.
#define TSR_DEEPSEEK_MARKER(what) "<\xEF\xBD\x9Ctool\xE2\x96\x81" what "\xEF\xBD\x9C>"
using Layout = ToolCallFormat::Layout;
const std::array<ToolCallFormat, 7> kFormats = {{
    {"deepseekv3", TSR_DEEPSEEK_MARKER("calls\xE2\x96\x81" "begin"), TSR_DEEPSEEK_MARKER("calls\xE2\x96\x81" "end"),
     TSR_DEEPSEEK_MARKER("call\xE2\x96\x81" "begin"), TSR_DEEPSEEK_MARKER("call\xE2\x96\x81" "end")},
    {"deepseekv31", TSR_DEEPSEEK_MARKER("calls\xE2\x96\x81" "begin"), TSR_DEEPSEEK_MARKER("calls\xE2\x96\x81" "end"),
     TSR_DEEPSEEK_MARKER("call\xE2\x96\x81" "begin"), TSR_DEEPSEEK_MARKER("call\xE2\x96\x81" "end")},
    {"kimi_k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
     "<|tool_call_end|>", Layout::kMarkedCalls, false, /*numbered_call_ids=*/true},
    {"llama3", "<|python_tag|>", "", "", "", Layout::kJsonValues, /*calls_may_open_output=*/true},
    {"mistral", "[TOOL_CALLS]", "", "", "", Layout::kJsonValues},
    {"pythonic", "", "", "", "", Layout::kPythonList},
    {"qwen25", "<tool_call>", "", "<tool_call>", "</tool_call>"},
}};

// Bytes of the JSON object or array that opens `text` (brackets counted outside strings), or
// npos while it is incomplete (mistral_detector.py _extract_json_value).
std::size_t json_value_end(std::string_view text) {
    if (text.empty() || (text[0] != '{' && text[0] != '[')) return std::string_view::npos;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (escaped) {
            escaped = false;
        } else if (c == '\\') {
            escaped = in_string;
        } else if (c == '"') {
            in_string = !in_string;
        } else if (!in_string && (c == '{' || c == '[')) {
            ++depth;
        } else if (!in_string && (c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
constexpr std::string_view kDeepSeekSep = TSR_DEEPSEEK_MARKER("sep");
constexpr std::string_view kKimiArguments = "<|tool_call_argument_begin|>";
#undef TSR_DEEPSEEK_MARKER

}  // namespace

StatusOr<ToolCallFormat> tool_call_format(std::string_view name) {
    if (name == "qwen") name = "qwen25";  // function_call_parser.py maps both to Qwen25Detector
    return find_named_format(kFormats, "--tool-call-parser", name);
}

std::optional<ToolCallStructure> tool_call_structure(const ToolCallFormat& f, const std::string& tool) {
    // The JSON formats open with the call's name and leave "arguments" for the schema.
    const std::string json_head = "{\"name\":\"" + tool + "\", \"arguments\":";
    if (f.name == "qwen25") return ToolCallStructure{f.call_begin + "\n" + json_head, "}\n" + f.call_end, f.call_begin};
    if (f.name == "llama3") return ToolCallStructure{f.section_start + json_head, "}", f.section_start};
    if (f.name == "mistral") return ToolCallStructure{f.section_start + " [" + json_head, "}]", f.section_start};
    if (f.name == "deepseekv3")
        return ToolCallStructure{f.section_start + f.call_begin + "function" + std::string(kDeepSeekSep) + tool +
                                     "\n```json\n",
                                 "\n```" + f.call_end + f.section_end, f.section_start};
    if (f.name == "deepseekv31")
        return ToolCallStructure{f.call_begin + tool + std::string(kDeepSeekSep), f.call_end, f.call_begin};
    if (f.name == "kimi_k2")
        return ToolCallStructure{
            f.section_start + f.call_begin + "functions." + tool + ":0" + std::string(kKimiArguments),
            f.call_end + f.section_end, f.section_start};
    return std::nullopt;
}

ToolCallFormat forced_tool_call_format() {
    return {.name = "json_array", .section_start = "", .layout = Layout::kJsonValues};
}

ToolCallDetector::ToolCallDetector(ToolCallFormat format, std::vector<std::string> tools)
    : format_(std::move(format)), tools_(std::move(tools)) {}

bool ToolCallDetector::decode(std::string_view payload, std::vector<ParsedToolCall>& out) const {
    std::string body(strip_whitespace(payload));
    Json actions;
    if (format_.name == "kimi_k2") {
        // functions.NAME:INDEX<|tool_call_argument_begin|>ARGS, or NAME:INDEX
        // (kimik2_detector.py tool_call_id_regex).
        const std::size_t sep = body.find(kKimiArguments);
        if (sep == std::string::npos) return false;
        std::string_view id = strip_whitespace(std::string_view(body).substr(0, sep));
        if (id.starts_with("functions.")) id.remove_prefix(10);
        const std::size_t colon = id.rfind(':');
        const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
        if (colon == std::string_view::npos || colon == 0 || colon + 1 == id.size() ||
            !std::all_of(id.begin(), id.begin() + colon, word) ||
            !std::all_of(id.begin() + colon + 1, id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            TSR_LOG(WARN, "Unexpected tool_call_id format: {}", id);
            return false;
        }
        actions = Json{{"name", std::string(id.substr(0, colon))},
                       {"arguments", read_model_json(body.substr(sep + kKimiArguments.size()))}};
        if (actions["arguments"].is_discarded()) return false;
    } else if (format_.name == "deepseekv31") {
        // NAME<｜tool▁sep｜>ARGS (deepseekv31_detector.py)
        const std::size_t sep = body.find(kDeepSeekSep);
        if (sep == std::string::npos) return false;
        actions = Json{{"name", std::string(strip_whitespace(std::string_view(body).substr(0, sep)))},
                       {"arguments", read_model_json(body.substr(sep + kDeepSeekSep.size()))}};
        if (actions["arguments"].is_discarded()) return false;
    } else if (format_.name == "deepseekv3") {
        // function<｜tool▁sep｜>NAME\n```json\nARGS\n```
        const std::size_t sep = body.find(kDeepSeekSep);
        const std::size_t fence = body.find("\n```json\n");
        if (sep == std::string::npos || fence == std::string::npos || fence < sep) return false;
        const std::size_t args_end = body.rfind("\n```");
        if (args_end == std::string::npos || args_end <= fence) return false;
        const std::string name = body.substr(sep + kDeepSeekSep.size(), fence - sep - kDeepSeekSep.size());
        const std::string args = body.substr(fence + 9, args_end - fence - 9);
        actions = Json{{"name", name}, {"arguments", read_model_json(args)}};
        if (actions["arguments"].is_discarded()) return false;
    } else {
        actions = read_model_json(body);
        if (actions.is_discarded()) {
            TSR_LOG(WARN, "Failed to parse JSON part: {}", body);
            return false;
        }
    }
    return take_actions(actions, out);
}

bool ToolCallDetector::take_actions(const Json& given, std::vector<ParsedToolCall>& out) const {
    const Json actions = given.is_array() ? given : Json::array({given});
    bool any = false;
    for (const Json& action : actions) {
        if (!action.is_object() || !action.contains("name") || !action["name"].is_string()) continue;
        const std::string name = action["name"].get<std::string>();
        if (std::find(tools_.begin(), tools_.end(), name) == tools_.end()) {
            TSR_LOG(WARN, "Model attempted to call undefined function: {}", name);
            continue;
        }
        // base_format_detector.py parse_base_json: "parameters", else "arguments".
        const Json args = action.contains("parameters") ? action["parameters"] : action.value("arguments", Json::object());
        out.push_back({name, args.dump(-1, ' ', false, Json::error_handler_t::replace)});
        any = true;
    }
    return any;
}

std::size_t ToolCallDetector::take_json_calls(std::string_view text, std::vector<ParsedToolCall>& out) const {
    std::size_t read = 0;
    while (true) {
        std::size_t at = read;
        while (at < text.size() && (is_space(text[at]) || text[at] == ';' || text[at] == ',')) ++at;
        const std::string_view rest = text.substr(at);
        if (rest.empty()) return read;
        std::size_t used = json_value_end(rest);
        std::string payload;
        if (used != std::string_view::npos) {
            payload = rest.substr(0, used);
        } else if (rest[0] == '{' || rest[0] == '[' || format_.name != "mistral") {
            return read;  // an incomplete value, or text that is not a call
        } else {
            // Mistral's compact form: name[ARGS]{...}, the name one word.
            constexpr std::string_view kArgs = "[ARGS]";
            const std::size_t args = rest.find(kArgs);
            if (args == std::string_view::npos || args == 0 ||
                std::any_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(args), is_space))
                return read;
            std::size_t json_at = args + kArgs.size();
            while (json_at < rest.size() && is_space(rest[json_at])) ++json_at;
            const std::size_t len = json_value_end(rest.substr(json_at));
            if (len == std::string_view::npos) return read;
            const Json arguments = read_model_json(rest.substr(json_at, len));
            payload = Json{{"name", std::string(rest.substr(0, args))}, {"arguments", arguments}}.dump();
            used = json_at + len;
        }
        decode(payload, out);
        read = at + used;
    }
}

std::string ToolCallDetector::drop_markers(std::string text) const {
    for (const std::string* marker : {&format_.section_start, &format_.section_end, &format_.call_end}) {
        if (marker->empty()) continue;
        for (std::size_t at = text.find(*marker); at != std::string::npos; at = text.find(*marker, at))
            text.erase(at, marker->size());
    }
    return strip_whitespace(text).empty() ? std::string() : text;
}

ToolCallParts ToolCallDetector::parse_all(std::string_view text) const {
    const std::size_t start = text.find(format_.section_start);
    if (format_.layout == Layout::kPythonList) {
        // pythonic_detector.py detect_and_parse: the whole output is the list, or it is content.
        const std::string_view whole = strip_whitespace(text);
        nlohmann::json calls;
        if (!whole.starts_with('[') || !parse_python_calls(whole, calls)) return {std::string(text), {}};
        ToolCallParts parts;
        take_actions(Json::parse(calls.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), parts.calls);
        return parts;
    }
    if (format_.layout == Layout::kJsonValues) {
        // The calls after the marker (or the whole output when it opens with one); text left
        // after them joins the content (llama32_detector.py / mistral_detector.py).
        std::size_t calls_at = 0;
        std::string_view before;
        if (start != std::string_view::npos) {
            before = strip_whitespace(text.substr(0, start));
            calls_at = start + format_.section_start.size();
        } else if (!format_.calls_may_open_output || text.substr(0, 1) != "{") {
            return {std::string(text), {}};
        }
        ToolCallParts parts;
        const std::size_t read = take_json_calls(text.substr(calls_at), parts.calls);
        const std::string_view after = strip_whitespace(text.substr(calls_at + read));
        parts.normal = std::string(before) + (!before.empty() && !after.empty() ? " " : "") + std::string(after);
        return parts;
    }
    if (start == std::string_view::npos) return {std::string(text), {}};
    ToolCallParts parts{std::string(strip_whitespace(text.substr(0, start))), {}};
    for (std::size_t at = text.find(format_.call_begin, start); at != std::string_view::npos;) {
        const std::size_t body = at + format_.call_begin.size();
        const std::size_t end = text.find(format_.call_end, body);
        if (end == std::string_view::npos) break;
        decode(text.substr(body, end - body), parts.calls);
        at = text.find(format_.call_begin, end + format_.call_end.size());
    }
    return parts;
}

ToolCallParts ToolCallDetector::parse_increment(std::string_view piece) {
    buffer_ += piece;
    ToolCallParts parts = increment();
    // The layouts read whole: each call in one delta.
    for (ParsedToolCall& call : parts.calls)
        parts.deltas.push_back({calls_sent_++, std::move(call.name), std::move(call.arguments)});
    parts.calls.clear();
    return parts;
}

ToolCallParts ToolCallDetector::increment() {
    ToolCallParts parts;
    if (format_.layout == Layout::kPythonList) return python_increment();
    if (!in_calls_ && !output_started_ && !buffer_.empty()) {
        output_started_ = true;
        in_calls_ = format_.calls_may_open_output && buffer_[0] == '{';
    }
    if (!in_calls_) {
        const std::size_t start = buffer_.find(format_.section_start);
        if (start == std::string::npos) {
            const std::size_t held = marker_start_at_end(buffer_, format_.section_start);
            parts.normal = buffer_.substr(0, buffer_.size() - held);
            buffer_.erase(0, buffer_.size() - held);
            return parts;
        }
        parts.normal = buffer_.substr(0, start);
        buffer_.erase(0, format_.layout == Layout::kJsonValues ? start + format_.section_start.size() : start);
        in_calls_ = true;
    }
    if (format_.layout == Layout::kJsonValues) {
        std::vector<ParsedToolCall> complete;
        const std::size_t read = take_json_calls(buffer_, complete);
        buffer_.erase(0, read);
        if (read > 0) finish_calls(std::move(complete), parts);
        // A call object being written streams as a marked call does (llama32_detector.py and
        // mistral_detector.py stream through base_format_detector.py); Mistral's list and its
        // compact name[ARGS]{...} go out once complete.
        const std::size_t at = buffer_.find_first_not_of(" \n\t\r;,");
        if (at != std::string::npos && buffer_[at] == '{')
            stream_open_call(std::string_view(buffer_).substr(at), parts);
        return parts;
    }
    // What lies before a call is content unless only markers; an open call streams what it
    // has, and leaves the buffer when it ends.
    for (std::size_t at = buffer_.find(format_.call_begin); at != std::string::npos;
         at = buffer_.find(format_.call_begin)) {
        parts.normal += drop_markers(buffer_.substr(0, at));
        buffer_.erase(0, at);
        const std::size_t body = format_.call_begin.size();
        const std::size_t end = buffer_.find(format_.call_end, body);
        if (end == std::string::npos) {
            stream_open_call(std::string_view(buffer_).substr(body), parts);
            break;
        }
        close_call(std::string_view(buffer_).substr(body, end - body), parts);
        buffer_.erase(0, end + format_.call_end.size());
    }
    return parts;
}

// The name of the call being written once it is whole, and its arguments so far (nullopt
// until they begin), per format; false while the name is not whole.
bool ToolCallDetector::open_call(std::string_view body, std::string& name, std::optional<Json>& args) const {
    std::string_view args_text;
    if (format_.name == "kimi_k2" || format_.name == "deepseekv31" || format_.name == "deepseekv3") {
        const std::string_view sep = format_.name == "kimi_k2" ? kKimiArguments : kDeepSeekSep;
        const std::size_t at = body.find(sep);
        if (at == std::string_view::npos) return false;
        std::string_view head = strip_whitespace(body.substr(0, at));
        args_text = body.substr(at + sep.size());
        if (format_.name == "kimi_k2") {  // functions.NAME:INDEX; another id does not stream (decode drops it)
            if (head.starts_with("functions.")) head.remove_prefix(10);
            const std::size_t colon = head.rfind(':');
            if (colon == std::string_view::npos) return false;
            head = head.substr(0, colon);
        } else if (format_.name == "deepseekv3") {  // function<sep>NAME\n```json\nARGS
            const std::size_t fence = args_text.find("\n```json\n");
            if (fence == std::string_view::npos) return false;
            head = strip_whitespace(args_text.substr(0, fence));
            args_text = args_text.substr(fence + 9);
        }
        name = std::string(head);
        args_text = strip_whitespace(args_text);
        if (!args_text.empty()) args = parse_partial_json(args_text, true);
        return !name.empty();
    }
    // {"name": ..., "arguments": ...}: the name only once its string is whole.
    const std::optional<Json> whole_strings = parse_partial_json(strip_whitespace(body), false);
    if (!whole_strings || !whole_strings->is_object() || !whole_strings->contains("name") ||
        !(*whole_strings)["name"].is_string())
        return false;
    name = (*whole_strings)["name"].get<std::string>();
    const std::optional<Json> so_far = parse_partial_json(strip_whitespace(body), true);
    if (so_far && so_far->is_object()) {
        for (const char* key : {"parameters", "arguments"})
            if (so_far->contains(key)) {
                args = (*so_far)[key];
                break;
            }
    }
    return true;
}

void ToolCallDetector::stream_open_call(std::string_view body, ToolCallParts& parts) {
    if (call_skipped_) return;
    std::string name;
    std::optional<Json> args;
    if (!open_call(body, name, args)) return;
    if (!name_sent_) {
        // A function the request did not offer: nothing streams; decode() warns when it ends.
        if (std::find(tools_.begin(), tools_.end(), name) == tools_.end()) {
            call_skipped_ = true;
            return;
        }
        parts.deltas.push_back({calls_sent_, name, ""});
        name_sent_ = true;
    }
    if (!args) return;
    // What two successive readings agree on is settled; a number or a string cut short may
    // still change its end.
    std::string dump = args->dump(-1, ' ', false, Json::error_handler_t::replace);
    if (!args_dump_.empty() && dump != args_dump_) {
        const auto diverge = std::mismatch(args_dump_.begin(), args_dump_.end(), dump.begin(), dump.end());
        const std::string settled(args_dump_.begin(), diverge.first);
        if (settled.size() > args_sent_.size() && settled.starts_with(args_sent_)) {
            parts.deltas.push_back({calls_sent_, "", settled.substr(args_sent_.size())});
            args_sent_ = settled;
        }
    }
    args_dump_ = std::move(dump);
}

void ToolCallDetector::close_call(std::string_view payload, ToolCallParts& parts) {
    std::vector<ParsedToolCall> calls;
    decode(payload, calls);
    finish_calls(std::move(calls), parts);
}

void ToolCallDetector::finish_calls(std::vector<ParsedToolCall> calls, ToolCallParts& parts) {
    for (ParsedToolCall& call : calls) {
        if (name_sent_) {  // the call that streamed: the rest of its arguments
            if (call.arguments.starts_with(args_sent_)) {
                if (call.arguments.size() > args_sent_.size())
                    parts.deltas.push_back({calls_sent_, "", call.arguments.substr(args_sent_.size())});
            } else {
                TSR_LOG(WARN, "streamed arguments of {} diverged from the whole call: {} vs {}", call.name,
                        args_sent_, call.arguments);
            }
            name_sent_ = false;
        } else {
            parts.deltas.push_back({calls_sent_, std::move(call.name), std::move(call.arguments)});
        }
        ++calls_sent_;
    }
    if (name_sent_) ++calls_sent_;  // its name went out, then it did not parse: its index stays used
    name_sent_ = false;
    call_skipped_ = false;
    args_sent_.clear();
    args_dump_.clear();
}

ToolCallParts ToolCallDetector::python_increment() {
    ToolCallParts parts;
    if (!in_calls_ && !output_started_) {
        // An output that opens with '[' (after any space) may be the list; anything else is content.
        const std::string_view text = strip_whitespace(buffer_);
        if (text.empty()) return parts;
        output_started_ = true;
        in_calls_ = text.front() == '[';
    }
    if (!in_calls_) {
        parts.normal = std::exchange(buffer_, {});
        return parts;
    }
    const std::size_t open = buffer_.find('[');
    const std::size_t len = python_list_end(std::string_view(buffer_).substr(open));
    if (len == std::string_view::npos) return parts;  // the list is not closed yet
    nlohmann::json calls;
    if (parse_python_calls(std::string_view(buffer_).substr(open, len), calls)) {
        take_actions(Json::parse(calls.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), parts.calls);
        parts.normal = buffer_.substr(open + len);
    } else {
        parts.normal = buffer_;  // not a list of calls after all
    }
    buffer_.clear();
    in_calls_ = false;
    return parts;
}

std::string ToolCallDetector::finish() {
    std::string held = std::exchange(buffer_, {});
    return in_calls_ ? drop_markers(std::move(held)) : held;
}

}  // namespace tessera::server
