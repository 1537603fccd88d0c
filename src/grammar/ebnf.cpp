// grammar/ebnf.cpp — see ebnf.h. A recursive-descent parser over the grammar text builds each
// rule's expression, already written as regex text except for its rule references, which are
// inlined when root is written out.

#include "grammar/ebnf.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace tessera::grammar {
namespace {

constexpr std::string_view kNothing = R"([^\s\S])";

// A rule's expression is regex text with its rule references between \x01 and \x02, bytes
// that cannot occur otherwise: raw control characters in literals and classes are refused.
class EbnfParser {
 public:
    explicit EbnfParser(std::string_view text) : t_(text) {}

    Status parse(std::map<std::string, std::string>& rules) {
        skip_space(true);
        while (pos_ < t_.size()) {
            const std::string name = identifier();
            if (name.empty()) return error("a rule name");
            skip_space(false);
            if (!t_.substr(pos_).starts_with("::=")) return error("'::=' after rule '" + name + "'");
            pos_ += 3;
            std::string body;
            TSR_RETURN_IF_ERROR(alternation(body, /*top=*/true));
            if (rules.count(name)) return Status::InvalidArgument("ebnf: rule '" + name + "' is defined twice");
            rules[name] = std::move(body);
            skip_space(true);
        }
        return Status::Ok();
    }

 private:
    Status error(const std::string& expected) const {
        const std::size_t line = 1 + static_cast<std::size_t>(std::count(t_.begin(), t_.begin() + pos_, '\n'));
        return Status::InvalidArgument(fmt::format("ebnf: expected {} at line {} (byte {})", expected, line, pos_));
    }

    // Spaces and comments; a newline ends a rule unless `newlines` (between rules).
    void skip_space(bool newlines) {
        while (pos_ < t_.size()) {
            const char c = t_[pos_];
            if (c == '#') {
                while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
            } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else {
                break;
            }
        }
    }

    // After the end of a rule's line: whether the next line continues it, as GBNF lets a rule
    // span lines (it does unless it starts the next rule, `NAME ::=`).
    bool continues_on_next_line() const {
        std::size_t p = pos_;
        if (p >= t_.size() || t_[p] != '\n') return false;
        while (p < t_.size() && (t_[p] == '\n' || t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\r')) ++p;
        if (p >= t_.size()) return false;
        // A new rule: NAME ::= on that line.
        std::size_t q = p;
        while (q < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[q])) || t_[q] == '_' || t_[q] == '-')) ++q;
        std::size_t r = q;
        while (r < t_.size() && (t_[r] == ' ' || t_[r] == '\t')) ++r;
        return !(q > p && t_.substr(r).starts_with("::="));
    }

    std::string identifier() {
        const std::size_t start = pos_;
        while (pos_ < t_.size() &&
               (std::isalnum(static_cast<unsigned char>(t_[pos_])) || t_[pos_] == '_' || t_[pos_] == '-'))
            ++pos_;
        return std::string(t_.substr(start, pos_ - start));
    }

    Status alternation(std::string& out, bool top) {
        std::vector<std::string> options(1);
        TSR_RETURN_IF_ERROR(sequence(options.back(), top));
        while (pos_ < t_.size() && t_[pos_] == '|') {
            ++pos_;
            options.emplace_back();
            TSR_RETURN_IF_ERROR(sequence(options.back(), top));
        }
        out = "(";
        for (std::size_t i = 0; i < options.size(); ++i) out += (i ? "|" : "") + options[i];
        out += ")";
        return Status::Ok();
    }

    Status sequence(std::string& out, bool top) {
        while (true) {
            skip_space(!top);
            if (top && continues_on_next_line()) skip_space(true);
            if (pos_ >= t_.size() || t_[pos_] == '|' || t_[pos_] == ')' || t_[pos_] == '\n') return Status::Ok();
            std::string item;
            TSR_RETURN_IF_ERROR(element(item));
            skip_space(false);
            if (pos_ < t_.size()) {
                const char c = t_[pos_];
                if (c == '*' || c == '+' || c == '?') {
                    item = "(" + item + ")" + c;
                    ++pos_;
                } else if (c == '{') {
                    const std::size_t close = t_.find('}', pos_);
                    if (close == std::string_view::npos) return error("'}'");
                    const std::string_view counts = t_.substr(pos_ + 1, close - pos_ - 1);
                    if (counts.empty() || counts.find_first_not_of("0123456789, ") != std::string_view::npos)
                        return error("a repetition count {m}, {m,} or {m,n}");
                    std::string bounds(counts);
                    std::erase(bounds, ' ');  // "{1, 3}" as the regex syntax writes it
                    item = "(" + item + "){" + bounds + "}";
                    pos_ = close + 1;
                }
            }
            out += item;
        }
    }

    // One character of a string literal or a class (a UTF-8 character or an escape), appended as
    // regex text that matches just it.
    Status literal_char(std::string& out) {
        const auto c = static_cast<unsigned char>(t_[pos_]);
        if (c < 0x20) return error("an escape for a control character (\\n, \\t, \\x1f, ...)");
        if (c != '\\') {
            const std::size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            out += regex_escape(t_.substr(pos_, len));
            pos_ = std::min(t_.size(), pos_ + len);
            return Status::Ok();
        }
        if (pos_ + 1 >= t_.size()) return error("an escaped character");
        const char e = t_[pos_ + 1];
        pos_ += 2;
        switch (e) {
            case 'n': out += "\\n"; return Status::Ok();
            case 't': out += "\\t"; return Status::Ok();
            case 'r': out += "\\r"; return Status::Ok();
            case '\\': case '"': case '\'': case '[': case ']': case '-': case '^':
                out += regex_escape(std::string_view(&e, 1));
                return Status::Ok();
            case 'x': case 'u': case 'U': {
                const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (pos_ + n > t_.size()) return error("hex digits after \\" + std::string(1, e));
                out += "\\" + std::string(1, e) + std::string(t_.substr(pos_, n));
                pos_ += n;
                return Status::Ok();
            }
            default: return error(fmt::format("a known escape (not \\{})", e));
        }
    }

    Status element(std::string& out) {
        const char c = t_[pos_];
        if (c == '"') {
            ++pos_;
            out = "(";
            while (pos_ < t_.size() && t_[pos_] != '"') TSR_RETURN_IF_ERROR(literal_char(out));
            if (pos_ >= t_.size()) return error("the closing '\"' of a string");
            ++pos_;
            out += ")";
            return Status::Ok();
        }
        if (c == '[') {
            ++pos_;
            out = "[";
            if (pos_ < t_.size() && t_[pos_] == '^') {
                out += "^";
                ++pos_;
            }
            while (pos_ < t_.size() && t_[pos_] != ']') {
                if (t_[pos_] == '-') {
                    out += "-";
                    ++pos_;
                    continue;
                }
                TSR_RETURN_IF_ERROR(literal_char(out));
            }
            if (pos_ >= t_.size()) return error("the closing ']' of a character class");
            ++pos_;
            out += "]";
            return Status::Ok();
        }
        if (c == '(') {
            ++pos_;
            if (pos_ < t_.size() && t_[pos_] == '=')
                return Status::InvalidArgument("ebnf: lookahead assertions (= ...) are not supported");
            if (++depth_ > 200) return error("fewer nested groups");
            TSR_RETURN_IF_ERROR(alternation(out, /*top=*/false));
            --depth_;
            skip_space(true);
            if (pos_ >= t_.size() || t_[pos_] != ')') return error("')'");
            ++pos_;
            return Status::Ok();
        }
        const std::string name = identifier();
        if (name.empty()) return error("a string, a character class, '(' or a rule name");
        out = "\x01" + name + "\x02";
        return Status::Ok();
    }

    std::string_view t_;
    std::size_t pos_ = 0;
    int depth_ = 0;
};

class Inliner {
 public:
    explicit Inliner(const std::map<std::string, std::string>& rules) : rules_(rules) {}

    Status write(const std::string& name, int depth, std::string& out) {
        const auto it = rules_.find(name);
        if (it == rules_.end()) return Status::InvalidArgument("ebnf: rule '" + name + "' is used but not defined");
        if (depth > kMaxNesting) {
            out += kNothing;  // a recursion, cut here
            return Status::Ok();
        }
        const std::string& body = it->second;
        stack_.push_back(name);
        for (std::size_t i = 0; i < body.size(); ++i) {
            if (body[i] != '\x01') {
                out += body[i];
                continue;
            }
            const std::size_t end = body.find('\x02', i);
            const std::string ref = body.substr(i + 1, end - i - 1);
            // A rule already being written: one more level of a recursion.
            const bool recursive = std::find(stack_.begin(), stack_.end(), ref) != stack_.end();
            out += "(";
            TSR_RETURN_IF_ERROR(write(ref, recursive ? depth + 1 : depth, out));
            out += ")";
            if (out.size() > kMaxEbnfRegexBytes) {
                return Status::InvalidArgument(fmt::format(
                    "ebnf: the grammar is too large once its rules are inlined (over {} bytes of regex)",
                    kMaxEbnfRegexBytes));
            }
            i = end;
        }
        stack_.pop_back();
        return Status::Ok();
    }

 private:
    const std::map<std::string, std::string>& rules_;
    std::vector<std::string> stack_;
};

}  // namespace

StatusOr<std::string> ebnf_to_regex(std::string_view grammar) {
    std::map<std::string, std::string> rules;
    TSR_RETURN_IF_ERROR(EbnfParser(grammar).parse(rules));
    if (!rules.count("root")) return Status::InvalidArgument("ebnf: the grammar has no 'root' rule");
    std::string out;
    TSR_RETURN_IF_ERROR(Inliner(rules).write("root", 0, out));
    TSR_RETURN_IF_ERROR(parse_regex(out).status());
    return out;
}

}  // namespace tessera::grammar
