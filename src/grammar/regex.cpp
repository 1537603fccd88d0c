// grammar/regex.cpp — see regex.h. The parser is recursive descent over Python's `re`
// grammar; the compiler is Thompson's construction with character classes expanded into
// their UTF-8 byte-range sequences (the method of RE2 and Rust's regex-syntax Utf8Sequences).

#include "grammar/regex.h"

#include <algorithm>
#include <fmt/format.h>

#include "grammar/nfa_builder.h"

namespace tessera::grammar {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

std::vector<CodeRange> normalized(std::vector<CodeRange> ranges) {
    std::sort(ranges.begin(), ranges.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
    std::vector<CodeRange> out;
    for (const CodeRange r : ranges) {
        if (!out.empty() && r.lo <= out.back().hi + 1) {
            out.back().hi = std::max(out.back().hi, r.hi);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

std::vector<CodeRange> complement(const std::vector<CodeRange>& ranges) {
    std::vector<CodeRange> out;
    char32_t next = 0;
    for (const CodeRange r : normalized(ranges)) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
}

// xgrammar's (and ASCII Python's) classes: \d [0-9], \w [A-Za-z0-9_], \s [ \t\n\r\f\v].
std::vector<CodeRange> class_escape(char c) {
    switch (c) {
        case 'd': return {{'0', '9'}};
        case 'D': return complement({{'0', '9'}});
        case 'w': return normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
        case 'W': return complement({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
        case 's': return {{'\t', '\r'}, {' ', ' '}};
        case 'S': return complement({{'\t', '\r'}, {' ', ' '}});
        default: return {};
    }
}

class Parser {
 public:
    explicit Parser(std::string_view pattern) : p_(pattern) {}

    StatusOr<std::unique_ptr<RegexNode>> parse() {
        auto root = alternation();
        if (!error_.empty()) return fail();
        if (pos_ < p_.size()) {
            error_ = p_[pos_] == ')' ? "unbalanced parenthesis" : "unexpected character";
            return fail();
        }
        return root;
    }

 private:
    Status fail() const {
        return Status::InvalidArgument(fmt::format("invalid regex at position {}: {}", pos_, error_));
    }
    bool done() const { return pos_ >= p_.size() || !error_.empty(); }
    char peek() const { return p_[pos_]; }

    std::unique_ptr<RegexNode> make_node(RegexNode::Kind kind) {
        if (++nodes_ > kMaxRegexNodes && error_.empty())
            error_ = fmt::format("the pattern is too large for constrained decoding (over {} elements)",
                                 kMaxRegexNodes);
        auto node = std::make_unique<RegexNode>();
        node->kind = kind;
        return node;
    }
    std::unique_ptr<RegexNode> class_node(std::vector<CodeRange> ranges) {
        auto node = make_node(RegexNode::Kind::kClass);
        node->ranges = normalized(std::move(ranges));
        return node;
    }

    std::unique_ptr<RegexNode> alternation() {
        std::vector<std::unique_ptr<RegexNode>> options;
        options.push_back(concatenation());
        while (!done() && peek() == '|') {
            ++pos_;
            options.push_back(concatenation());
        }
        if (options.size() == 1) return std::move(options.front());
        auto node = make_node(RegexNode::Kind::kAlternate);
        node->children = std::move(options);
        return node;
    }

    std::unique_ptr<RegexNode> concatenation() {
        auto node = make_node(RegexNode::Kind::kConcat);
        while (!done() && peek() != '|' && peek() != ')') {
            auto item = repetition();
            if (item) node->children.push_back(std::move(item));
        }
        return node;
    }

    // `{n}`, `{n,}`, `{,m}`, `{n,m}` at pos_; anything else is a literal brace, as in Python.
    bool counted_quantifier(int* min, int* max) {
        std::size_t i = pos_ + 1;
        const auto number = [&](int* out) {
            const std::size_t start = i;
            long value = 0;
            while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
                value = std::min<long>(value * 10 + (p_[i] - '0'), 1L << 30);
                ++i;
            }
            *out = static_cast<int>(value);
            return i > start;
        };
        int lo = 0;
        int hi = 0;
        const bool has_lo = number(&lo);
        if (i < p_.size() && p_[i] == '}') {
            if (!has_lo) return false;
            *min = *max = lo;
        } else if (i < p_.size() && p_[i] == ',') {
            ++i;
            const bool has_hi = number(&hi);
            if (i >= p_.size() || p_[i] != '}') return false;
            *min = has_lo ? lo : 0;
            *max = has_hi ? hi : -1;
        } else {
            return false;
        }
        pos_ = i + 1;
        return true;
    }

    std::unique_ptr<RegexNode> repetition() {
        auto atom_node = atom();
        if (!error_.empty()) return nullptr;
        bool repeated = false;
        while (!done()) {
            int min = 0;
            int max = 0;
            const char c = peek();
            if (c == '*') {
                max = -1, ++pos_;
            } else if (c == '+') {
                min = 1, max = -1, ++pos_;
            } else if (c == '?') {
                max = 1, ++pos_;
            } else if (c == '{' && counted_quantifier(&min, &max)) {
                if (max >= 0 && max < min) {
                    error_ = "min repeat greater than max repeat";
                    return nullptr;
                }
            } else {
                break;
            }
            if (repeated) {
                error_ = "multiple repeat";
                return nullptr;
            }
            if (!atom_node) {
                error_ = "nothing to repeat";
                return nullptr;
            }
            repeated = true;
            // A lazy (`*?`) or possessive (`*+`) quantifier matches the same whole strings.
            if (!done() && (peek() == '?' || peek() == '+')) ++pos_;
            auto rep = make_node(RegexNode::Kind::kRepeat);
            rep->min = min;
            rep->max = max;
            rep->children.push_back(std::move(atom_node));
            atom_node = std::move(rep);
        }
        return atom_node;
    }

    char32_t code_point() {
        const auto c0 = static_cast<unsigned char>(p_[pos_]);
        int len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
        if (len == 0 || pos_ + len > p_.size()) {
            error_ = "the pattern is not valid UTF-8";
            return 0;
        }
        char32_t cp = len == 1 ? c0 : c0 & (0x7F >> len);
        for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + k]) & 0x3F);
        pos_ += static_cast<std::size_t>(len);
        return cp;
    }

    char32_t hex_digits(int n) {
        char32_t value = 0;
        for (int k = 0; k < n; ++k) {
            if (pos_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_]))) {
                error_ = fmt::format("incomplete escape: {} hex digits expected", n);
                return 0;
            }
            const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(p_[pos_++])));
            value = value * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
        }
        if (value > kMaxCodePoint) error_ = "escape beyond U+10FFFF";
        return value;
    }

    // After a backslash: the characters the escape stands for. `in_class`: \b is a backspace.
    std::vector<CodeRange> escape(bool in_class) {
        if (pos_ >= p_.size()) {
            error_ = "bad escape (end of pattern)";
            return {};
        }
        const char c = p_[pos_];
        if (auto cls = class_escape(c); !cls.empty()) {
            ++pos_;
            return cls;
        }
        const auto single = [&](char32_t cp) { return std::vector<CodeRange>{{cp, cp}}; };
        switch (c) {
            case 'n': ++pos_; return single('\n');
            case 't': ++pos_; return single('\t');
            case 'r': ++pos_; return single('\r');
            case 'f': ++pos_; return single('\f');
            case 'v': ++pos_; return single('\v');
            case 'a': ++pos_; return single('\a');
            case '0': ++pos_; return single(0);
            case 'x': ++pos_; return single(hex_digits(2));
            case 'u': ++pos_; return single(hex_digits(4));
            case 'U': ++pos_; return single(hex_digits(8));
            default: break;
        }
        if (in_class && c == 'b') {
            ++pos_;
            return single('\b');
        }
        if (c >= '1' && c <= '9') {
            error_ = "backreferences are not supported in constrained decoding";
        } else if (c == 'b' || c == 'B') {
            error_ = "word boundaries (\\b, \\B) are not supported in constrained decoding";
        } else if (std::isalnum(static_cast<unsigned char>(c))) {
            error_ = fmt::format("bad escape \\{}", c);
        } else {
            return single(code_point());
        }
        return {};
    }

    // One member of a [...] class at pos_: a character or an escape.
    std::vector<CodeRange> class_member() {
        if (p_[pos_] != '\\') {
            const char32_t cp = code_point();
            return {{cp, cp}};
        }
        ++pos_;
        return escape(/*in_class=*/true);
    }

    std::unique_ptr<RegexNode> char_class() {
        ++pos_;  // '['
        const bool negate = pos_ < p_.size() && p_[pos_] == '^';
        if (negate) ++pos_;
        std::vector<CodeRange> ranges;
        bool first = true;
        while (true) {
            if (pos_ >= p_.size()) {
                error_ = "unterminated character set";
                return nullptr;
            }
            if (p_[pos_] == ']' && !first) {
                ++pos_;
                break;
            }
            first = false;
            std::vector<CodeRange> item = class_member();
            if (!error_.empty()) return nullptr;
            // A range a-b: both ends single characters; '-' before ']' is literal.
            if (item.size() == 1 && item[0].lo == item[0].hi && pos_ + 1 < p_.size() && p_[pos_] == '-' &&
                p_[pos_ + 1] != ']') {
                ++pos_;
                const std::vector<CodeRange> end = class_member();
                if (!error_.empty()) return nullptr;
                if (end.size() != 1 || end[0].lo != end[0].hi) {
                    error_ = "bad character range";
                    return nullptr;
                }
                if (end[0].lo < item[0].lo) {
                    error_ = "bad character range (end before start)";
                    return nullptr;
                }
                item[0].hi = end[0].lo;
            }
            ranges.insert(ranges.end(), item.begin(), item.end());
        }
        return class_node(negate ? complement(ranges) : std::move(ranges));
    }

    std::unique_ptr<RegexNode> group() {
        ++pos_;  // '('
        if (++depth_ > kMaxRegexDepth) {
            error_ = fmt::format("groups nest deeper than {} levels", kMaxRegexDepth);
            return nullptr;
        }
        if (pos_ < p_.size() && p_[pos_] == '?') {
            const std::string_view rest = p_.substr(pos_ + 1);
            if (rest.starts_with(":")) {
                pos_ += 2;
            } else if (rest.starts_with("P<") || (rest.starts_with("<") && !rest.starts_with("<=") &&
                                                  !rest.starts_with("<!"))) {
                const std::size_t close = p_.find('>', pos_);
                if (close == std::string_view::npos) {
                    error_ = "unterminated group name";
                    return nullptr;
                }
                pos_ = close + 1;
            } else if (rest.starts_with("=") || rest.starts_with("!") || rest.starts_with("<")) {
                error_ = "lookaround assertions are not supported in constrained decoding";
                return nullptr;
            } else {
                error_ = "inline flags and other (?...) extensions are not supported in constrained decoding";
                return nullptr;
            }
        }
        auto inner = alternation();
        if (!error_.empty()) return nullptr;
        if (pos_ >= p_.size() || p_[pos_] != ')') {
            error_ = "missing ), unterminated subpattern";
            return nullptr;
        }
        ++pos_;
        --depth_;
        return inner;
    }

    std::unique_ptr<RegexNode> atom() {
        const char c = peek();
        switch (c) {
            case '(': return group();
            case '[': return char_class();
            case '.':
                ++pos_;
                return class_node(complement({{'\n', '\n'}}));
            case '*':
            case '+':
            case '?':
                error_ = "nothing to repeat";
                return nullptr;
            case '^':
            case '$': {
                // Whole-match semantics: an anchor at the pattern's edge asks for nothing more.
                const bool at_edge = c == '^' ? pos_ == 0 : pos_ + 1 == p_.size();
                if (!at_edge) {
                    error_ = "anchors are supported only at the start (^) and end ($) of the pattern";
                    return nullptr;
                }
                ++pos_;
                return nullptr;
            }
            case '\\': {
                ++pos_;
                if (pos_ < p_.size() && (p_[pos_] == 'A' || p_[pos_] == 'Z' || p_[pos_] == 'z')) {
                    const bool at_edge = p_[pos_] == 'A' ? pos_ == 1 : pos_ + 1 == p_.size();
                    if (!at_edge) {
                        error_ = "anchors are supported only at the start and end of the pattern";
                        return nullptr;
                    }
                    ++pos_;
                    return nullptr;
                }
                auto ranges = escape(/*in_class=*/false);
                if (!error_.empty()) return nullptr;
                return class_node(std::move(ranges));
            }
            default: {
                const char32_t cp = code_point();
                if (!error_.empty()) return nullptr;
                return class_node({{cp, cp}});
            }
        }
    }

    std::string_view p_;
    std::size_t pos_ = 0;
    std::string error_;
    std::size_t nodes_ = 0;
    int depth_ = 0;
};

// A syntax tree as Thompson fragments. Past kMaxNfaStates no further piece is expanded (a
// bounded repeat such as {0,100000} would otherwise allocate without end) and the build fails.
class RegexTranslator {
 public:
    StatusOr<ByteNfa> build(const RegexNode& root) {
        const Fragment f = fragment(root);
        if (nfa_.full()) {
            return Status::InvalidArgument(
                fmt::format("the pattern is too large for constrained decoding (over {} automaton states; "
                            "bounded repeats such as {{0,100000}} expand)",
                            kMaxNfaStates));
        }
        return std::move(nfa_).finish(f);
    }

 private:
    Fragment fragment(const RegexNode& node) {
        if (nfa_.full()) return {0, 0};
        switch (node.kind) {
            case RegexNode::Kind::kEmpty:
                return nfa_.empty();
            case RegexNode::Kind::kClass: {
                const std::int32_t s = nfa_.add_state();
                const std::int32_t e = nfa_.add_state();
                for (const CodeRange r : node.ranges) {
                    for (const auto& seq : utf8_sequences(r.lo, r.hi)) {
                        std::int32_t at = s;
                        for (std::size_t k = 0; k < seq.size(); ++k) {
                            const std::int32_t to = k + 1 == seq.size() ? e : nfa_.add_state();
                            nfa_.edge(at, seq[k].first, seq[k].second, to);
                            at = to;
                        }
                    }
                }
                return {s, e};
            }
            case RegexNode::Kind::kConcat: {
                if (node.children.empty()) return nfa_.empty();
                Fragment whole = fragment(*node.children.front());
                for (std::size_t k = 1; k < node.children.size() && !nfa_.full(); ++k)
                    whole = nfa_.sequence(whole, fragment(*node.children[k]));
                return whole;
            }
            case RegexNode::Kind::kAlternate: {
                const std::int32_t s = nfa_.add_state();
                const std::int32_t e = nfa_.add_state();
                for (std::size_t k = 0; k < node.children.size() && !nfa_.full(); ++k) {
                    const Fragment f = fragment(*node.children[k]);
                    nfa_.epsilon(s, f.start);
                    nfa_.epsilon(f.end, e);
                }
                return {s, e};
            }
            case RegexNode::Kind::kRepeat: {
                const RegexNode& child = *node.children.front();
                Fragment whole = nfa_.empty();
                for (int k = 0; k < node.min && !nfa_.full(); ++k) whole = nfa_.sequence(whole, fragment(child));
                if (node.max < 0) return nfa_.sequence(whole, nfa_.star(fragment(child)));
                // Each optional copy may be skipped to the end: (x(x(x)?)?)? as one chain.
                const std::int32_t e = nfa_.add_state();
                for (int k = node.min; k < node.max && !nfa_.full(); ++k) {
                    nfa_.epsilon(whole.end, e);
                    whole = nfa_.sequence(whole, fragment(child));
                }
                nfa_.epsilon(whole.end, e);
                return {whole.start, e};
            }
        }
        return {0, 0};
    }

    NfaBuilder nfa_;
};

void encode_utf8(char32_t cp, std::uint8_t* out, int len) {
    if (len == 1) {
        out[0] = static_cast<std::uint8_t>(cp);
        return;
    }
    for (int k = len - 1; k > 0; --k) {
        out[k] = static_cast<std::uint8_t>(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = static_cast<std::uint8_t>((0xF00 >> len) | cp);
}

int utf8_length(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void split_same_length(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>>& out) {
    const int len = utf8_length(lo);
    // Split until every continuation position spans its full range or a single value, so the
    // byte ranges per position describe exactly [lo, hi].
    for (int i = 1; i < len; ++i) {
        const char32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split_same_length(lo, lo | m, out);
                split_same_length((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                split_same_length(lo, (hi & ~m) - 1, out);
                split_same_length(hi & ~m, hi, out);
                return;
            }
        }
    }
    std::uint8_t a[4];
    std::uint8_t b[4];
    encode_utf8(lo, a, len);
    encode_utf8(hi, b, len);
    std::vector<std::pair<std::uint8_t, std::uint8_t>> seq;
    for (int k = 0; k < len; ++k) seq.emplace_back(a[k], b[k]);
    out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> utf8_sequences(char32_t lo, char32_t hi) {
    std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> out;
    const auto add = [&](char32_t a, char32_t b) {
        if (a > b) return;
        // One encoded length at a time.
        for (const char32_t edge : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
            if (a <= edge && b > edge) {
                split_same_length(a, edge, out);
                a = edge + 1;
            }
        }
        split_same_length(a, b, out);
    };
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) return out;
    if (hi < 0xD800 || lo > 0xDFFF) {
        add(lo, hi);
    } else {
        if (lo < 0xD800) add(lo, 0xD7FF);
        if (hi > 0xDFFF) add(0xE000, hi);
    }
    return out;
}

StatusOr<std::unique_ptr<RegexNode>> parse_regex(std::string_view pattern) { return Parser(pattern).parse(); }

std::string regex_escape(std::string_view text) {
    std::string out;
    for (const char c : text) {
        if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

StatusOr<ByteNfa> compile_nfa(const RegexNode& root) { return RegexTranslator().build(root); }

StatusOr<ByteNfa> compile_regex(std::string_view pattern) {
    TSR_ASSIGN_OR_RETURN(auto root, parse_regex(pattern));
    return compile_nfa(*root);
}

}  // namespace tessera::grammar
