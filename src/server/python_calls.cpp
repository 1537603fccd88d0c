#include "server/python_calls.h"

#include <cctype>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/json_limits.h"

namespace tessera::server {
namespace {

using Json = nlohmann::json;

// A recursive-descent reader of the Python the format uses; every method leaves at_ after
// what it read, or returns nullopt / false.
class Reader {
 public:
    explicit Reader(std::string_view text) : text_(text) {}

    bool done() {
        skip_space();
        return at_ == text_.size();
    }

    // [call, call, ...]
    std::optional<Json> call_list() {
        if (!eat('[')) return std::nullopt;
        Json calls = Json::array();
        if (eat(']')) return calls;
        do {
            auto c = call();
            if (!c) return std::nullopt;
            calls.push_back(std::move(*c));
        } while (eat(','));
        if (!eat(']')) return std::nullopt;
        return calls;
    }

 private:
    // name(key=value, ...); dotted names as the detector's regex allows.
    std::optional<Json> call() {
        auto name = identifier();
        while (name && peek() == '.') {
            ++at_;
            auto part = identifier();
            if (!part) return std::nullopt;
            *name += "." + *part;
        }
        if (!name || !eat('(')) return std::nullopt;
        Json arguments = Json::object();
        if (!eat(')')) {
            do {
                if (eat(')')) return Json{{"name", *name}, {"arguments", arguments}};  // trailing comma
                auto key = identifier();
                if (!key || !eat('=')) return std::nullopt;  // positional arguments are not literals
                auto v = value();
                if (!v) return std::nullopt;
                arguments[*key] = std::move(*v);
            } while (eat(','));
            if (!eat(')')) return std::nullopt;
        }
        return Json{{"name", *name}, {"arguments", std::move(arguments)}};
    }

    std::optional<Json> value() {
        skip_space();
        if (at_ >= text_.size()) return std::nullopt;
        const char c = text_[at_];
        if (c == '"' || c == '\'') return string();
        // Containers recurse: a model can be made to nest them deeper than any stack.
        if (c == '[' || c == '(' || c == '{') {
            if (depth_ >= kMaxJsonDepth) return std::nullopt;
            ++depth_;
            auto v = c == '{' ? dict() : sequence(c == '[' ? ']' : ')');
            --depth_;
            return v;
        }
        if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c))) return number();
        auto word = identifier();
        if (word == "True") return Json(true);
        if (word == "False") return Json(false);
        if (word == "None") return Json(nullptr);
        return std::nullopt;
    }

    std::optional<Json> sequence(char close) {
        ++at_;
        Json items = Json::array();
        if (eat(close)) return items;
        do {
            if (eat(close)) return items;  // trailing comma
            auto v = value();
            if (!v) return std::nullopt;
            items.push_back(std::move(*v));
        } while (eat(','));
        if (!eat(close)) return std::nullopt;
        return items;
    }

    std::optional<Json> dict() {
        ++at_;
        Json items = Json::object();
        if (eat('}')) return items;
        do {
            if (eat('}')) return items;
            auto key = value();
            if (!key || !eat(':')) return std::nullopt;
            auto v = value();
            if (!v) return std::nullopt;
            // json.dumps writes non-string keys as their text.
            items[key->is_string() ? key->get<std::string>() : key->dump()] = std::move(*v);
        } while (eat(','));
        if (!eat('}')) return std::nullopt;
        return items;
    }

    std::optional<Json> string() {
        const char quote = text_[at_++];
        std::string out;
        while (at_ < text_.size() && text_[at_] != quote) {
            char c = text_[at_++];
            if (c == '\\' && at_ < text_.size()) {
                const char e = text_[at_++];
                switch (e) {
                    case 'n': c = '\n'; break;
                    case 't': c = '\t'; break;
                    case 'r': c = '\r'; break;
                    case '0': c = '\0'; break;
                    default: c = e;  // \\ \' \" and anything else as itself
                }
            }
            out += c;
        }
        if (at_ >= text_.size()) return std::nullopt;
        ++at_;
        return Json(std::move(out));
    }

    std::optional<Json> number() {
        const std::size_t begin = at_;
        if (text_[at_] == '-' || text_[at_] == '+') ++at_;
        bool real = false;
        while (at_ < text_.size()) {
            const char c = text_[at_];
            if (std::isdigit(static_cast<unsigned char>(c)) || c == '_') {
                ++at_;
            } else if (c == '.' || c == 'e' || c == 'E') {
                real = true;
                ++at_;
                if ((c == 'e' || c == 'E') && at_ < text_.size() && (text_[at_] == '-' || text_[at_] == '+')) ++at_;
            } else {
                break;
            }
        }
        std::string digits;
        for (char c : text_.substr(begin, at_ - begin))
            if (c != '_') digits += c;
        try {
            std::size_t used = 0;
            Json v = real ? Json(std::stod(digits, &used)) : Json(std::stoll(digits, &used));
            if (used != digits.size()) return std::nullopt;
            return v;
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }

    std::optional<std::string> identifier() {
        skip_space();
        const std::size_t begin = at_;
        while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) || text_[at_] == '_')) ++at_;
        if (at_ == begin || std::isdigit(static_cast<unsigned char>(text_[begin]))) return std::nullopt;
        return std::string(text_.substr(begin, at_ - begin));
    }

    char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
    void skip_space() {
        while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
    }
    bool eat(char c) {
        skip_space();
        if (peek() != c) return false;
        ++at_;
        return true;
    }

    std::string_view text_;
    std::size_t at_ = 0;
    int depth_ = 0;  // containers open around the value being read
};

}  // namespace

std::size_t python_list_end(std::string_view text) {
    if (text.empty() || text[0] != '[') return std::string_view::npos;
    int depth = 0;
    char quote = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quote) {
            if (c == '\\') ++i;
            else if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
            quote = c;
        } else if (c == '[' || c == '(' || c == '{') {
            ++depth;
        } else if ((c == ']' || c == ')' || c == '}') && --depth == 0) {
            return i + 1;
        }
    }
    return std::string_view::npos;
}

bool parse_python_calls(std::string_view text, Json& calls) {
    Reader reader(text);
    auto list = reader.call_list();
    if (!list || !reader.done()) return false;
    calls = std::move(*list);
    return true;
}

}  // namespace tessera::server
