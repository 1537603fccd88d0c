#include "server/partial_json.h"

#include <string>
#include <vector>

#include "base/json_text.h"
#include "server/json_limits.h"

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

std::optional<Json> try_parse(const std::string& text) {
    auto j = parse_json_text(text, kMaxJsonDepth, "partial JSON");
    if (!j.ok()) return std::nullopt;
    return std::move(j).value();
}

// What closes the open containers, innermost first.
std::string closers(const std::vector<char>& stack) {
    std::string out;
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) out += *it == '{' ? '}' : ']';
    return out;
}

// `text` without a trailing escape that is not whole (a lone backslash, or \u with fewer
// than four hex digits), so that a closing quote can follow.
std::string_view without_open_escape(std::string_view text) {
    std::size_t backslashes = 0;
    for (std::size_t i = text.size(); i > 0 && text[i - 1] == '\\'; --i) ++backslashes;
    if (backslashes % 2 == 1) return text.substr(0, text.size() - 1);
    for (std::size_t k = 1; k <= 5 && k <= text.size(); ++k) {
        const std::size_t u = text.size() - k;
        if (text[u] != 'u' || u == 0 || text[u - 1] != '\\') continue;
        std::size_t before = 0;  // the backslash itself must not be escaped
        for (std::size_t i = u - 1; i > 0 && text[i - 1] == '\\'; --i) ++before;
        if (before % 2 == 0 && k <= 4) return text.substr(0, u - 1);
    }
    return text;
}

}  // namespace

std::optional<Json> parse_partial_json(std::string_view text, bool partial_strings) {
    struct Frame {
        char open;
        bool expect_key;  // an object after '{' or ','
    };
    std::vector<Frame> stack;
    std::vector<char> opens;  // stack's brackets, for closers()
    bool in_string = false, escaped = false, string_is_key = false;
    std::size_t cut = std::string_view::npos;  // text[0, cut) + cut_closers is a whole value
    std::string cut_closers;
    const auto mark_cut = [&](std::size_t at) {
        cut = at;
        cut_closers = closers(opens);
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
                if (!string_is_key && !stack.empty()) mark_cut(i + 1);
            }
            continue;
        }
        switch (c) {
            case '"':
                in_string = true;
                string_is_key = !stack.empty() && stack.back().open == '{' && stack.back().expect_key;
                break;
            case '{':
            case '[':
                // Past the bound no completion would be read (and each cut costs the depth).
                if (stack.size() >= static_cast<std::size_t>(kMaxJsonDepth)) return std::nullopt;
                stack.push_back({c, c == '{'});
                opens.push_back(c);
                mark_cut(i + 1);
                break;
            case '}':
            case ']':
                if (stack.empty()) return std::nullopt;
                stack.pop_back();
                opens.pop_back();
                if (stack.empty()) return try_parse(std::string(text.substr(0, i + 1)));
                mark_cut(i + 1);
                break;
            case ',':
                if (stack.empty()) break;
                mark_cut(i);
                if (stack.back().open == '{') stack.back().expect_key = true;
                break;
            case ':':
                if (!stack.empty()) stack.back().expect_key = false;
                break;
            default:
                break;
        }
    }
    if (in_string && !string_is_key && partial_strings) {
        if (auto j = try_parse(std::string(without_open_escape(text)) + '"' + closers(opens))) return j;
    } else if (!in_string) {
        if (auto j = try_parse(std::string(text) + closers(opens))) return j;  // e.g. a number at the end
    }
    if (cut == std::string_view::npos) return std::nullopt;
    return try_parse(std::string(text.substr(0, cut)) + cut_closers);
}

}  // namespace tessera::server
