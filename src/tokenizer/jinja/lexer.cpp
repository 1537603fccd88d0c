// tokenizer/jinja/lexer.cpp — template → tokens with Jinja's whitespace rules (lexer.h).

#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <string_view>

#include "tokenizer/jinja/error.h"

namespace tessera::jinja {
namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

// Python's "unicode-escape" decoding, which Jinja applies to string literals.
std::string unescape(std::string_view s, int line) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        char c = s[++i];
        auto hex = [&](size_t n) {
            if (i + n >= s.size()) {
                throw_error("truncated \\x/\\u escape in string literal", line);
            }
            uint32_t cp = 0;
            for (size_t k = 1; k <= n; ++k) {
                char h = s[i + k];
                if (!std::isxdigit(static_cast<unsigned char>(h))) {
                    throw_error("bad \\x/\\u escape in string literal", line);
                }
                cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                         ? h - '0'
                                                         : (std::tolower(h) - 'a' + 10));
            }
            i += n;
            append_utf8(cp, out);
        };
        switch (c) {
            case '\\':
                out += '\\';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case 'a':
                out += '\a';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'v':
                out += '\v';
                break;
            case '\n':
                break;  // line continuation
            case 'x':
                hex(2);
                break;
            case 'u':
                hex(4);
                break;
            case 'U':
                hex(8);
                break;
            default:
                if (c >= '0' && c <= '7') {
                    uint32_t cp = 0;
                    size_t k = 0;
                    for (; k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; ++k) {
                        cp = cp * 8 + static_cast<uint32_t>(s[i + k] - '0');
                    }
                    i += k - 1;
                    append_utf8(cp, out);
                } else {
                    out += '\\';  // Python keeps unknown escapes verbatim
                    out += c;
                }
        }
    }
    return out;
}

class Lexer {
 public:
    explicit Lexer(const std::string& source) : src_(source) {
        // keep_trailing_newline=False: Jinja drops one trailing newline of the source.
        if (!src_.empty() && src_.back() == '\n') {
            src_.pop_back();
            if (!src_.empty() && src_.back() == '\r') src_.pop_back();
        }
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            size_t start = find_tag(pos_);
            std::string text = src_.substr(pos_, start - pos_);
            bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
            if (start == src_.size()) {
                emit_text(std::move(text));
                advance_to(start);
                break;
            }
            char kind = src_[start + 1];  // '{', '%' or '#'
            char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
            if (sign == '-') {
                size_t end = text.size();
                while (end > 0 && is_space(text[end - 1])) --end;
                text.resize(end);
            } else if (sign != '+' && kind != '{') {
                // lstrip_blocks: drop the indentation before a block/comment tag that starts
                // its line.
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
                if (l_pos > 0 || line_starting) {
                    bool all_ws = l_pos < text.size();
                    for (size_t i = l_pos; i < text.size(); ++i)
                        all_ws = all_ws && is_space(text[i]);
                    if (all_ws) text.resize(l_pos);
                }
            }
            emit_text(std::move(text));
            advance_to(start);
            size_t body = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (kind == '#') {
                lex_comment(body);
            } else {
                lex_tag(kind == '%', body);
            }
        }
        tokens_.push_back({Token::Type::kEof, "", line_});
        return std::move(tokens_);
    }

 private:
    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i) {
            if (src_[i] == '{' &&
                (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
                return i;
            }
        }
        return src_.size();
    }

    void advance_to(size_t p) {
        for (; pos_ < p; ++pos_) {
            if (src_[pos_] == '\n') ++line_;
        }
    }

    void emit_text(std::string text) {
        if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), line_});
    }

    // After a tag: `-` strips all following whitespace; trim_blocks drops one newline
    // after block and comment tags (never after `}}`), unless the tag ends with `+`.
    void after_tag(size_t end, char sign, bool block_like) {
        advance_to(end);
        if (sign == '-') {
            size_t p = pos_;
            while (p < src_.size() && is_space(src_[p])) ++p;
            advance_to(p);
        } else if (sign != '+' && block_like && pos_ < src_.size() && src_[pos_] == '\n') {
            advance_to(pos_ + 1);
        }
    }

    void lex_comment(size_t body) {
        int line = line_;
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) throw_error("unterminated comment", line);
        char sign = close > body ? src_[close - 1] : '\0';
        after_tag(close + 2, sign, /*block_like=*/true);
    }

    void lex_tag(bool block, size_t body) {
        tokens_.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
        advance_to(body);
        const char close = block ? '%' : '}';
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
            if (pos_ >= src_.size()) {
                throw_error(std::string("unterminated ") + (block ? "'{%' tag" : "'{{' expression"),
                            line_);
            }
            // End marker: [-+]%} or [-]}} (checked before operators, as Jinja does).
            for (char sign : {'-', '+', '\0'}) {
                if (sign == '+' && !block) continue;
                size_t p = pos_ + (sign ? 1 : 0);
                if (sign && src_[pos_] != sign) continue;
                if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
                    tokens_.push_back(
                        {block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
                    after_tag(p + 2, sign, block);
                    return;
                }
            }
            lex_token();
        }
    }

    void lex_token() {
        const char c = src_[pos_];
        const size_t n = src_.size();
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t p = pos_;
            while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
                ++p;
            push(Token::Type::kName, src_.substr(pos_, p - pos_), p);
            return;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) {
            lex_number();
            return;
        }
        if (c == '\'' || c == '"') {
            size_t p = pos_ + 1;
            while (p < n && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
            if (p >= n) throw_error("unterminated string literal", line_);
            push(Token::Type::kString,
                 unescape(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1), line_), p + 1);
            return;
        }
        static const char* kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        for (const char* op : kTwoChar) {
            if (src_.compare(pos_, 2, op) == 0) {
                push(Token::Type::kOp, op, pos_ + 2);
                return;
            }
        }
        if (std::string_view("+-*/%~<>()[]{},.:|=").find(c) != std::string_view::npos) {
            push(Token::Type::kOp, std::string(1, c), pos_ + 1);
            return;
        }
        throw_error(std::string("unexpected character '") + c + "' in tag", line_);
    }

    void lex_number() {
        const size_t n = src_.size();
        auto digits = [&](size_t p) {
            while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
                ++p;
            return p;
        };
        size_t p = digits(pos_);
        bool is_float = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
            is_float = true;
            p = digits(p + 1);
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
            size_t q = p + 1;
            if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
                is_float = true;
                p = digits(q);
            }
        }
        std::string text;
        for (size_t i = pos_; i < p; ++i) {
            if (src_[i] != '_') text += src_[i];
        }
        push(is_float ? Token::Type::kFloat : Token::Type::kInt, std::move(text), p);
    }

    void push(Token::Type type, std::string text, size_t end) {
        tokens_.push_back({type, std::move(text), line_});
        advance_to(end);
    }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace tessera::jinja
