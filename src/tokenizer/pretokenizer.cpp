// tokenizer/pretokenizer.cpp — see pretokenizer.h.
//
// Regex semantics reproduced (leftmost alternative wins, greedy with backtracking), per
// alternative at code point i, with runs taken maximal:
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)  apostrophe + ASCII suffix, case-insensitive. Oniguruma,
//                                   as used by HF tokenizers, does not fold U+017F to 's'.
//   2 [^\r\n\p{L}\p{N}]?\p{L}+      one non-letter/digit/CR/LF char then letters, or letters
//   3 \p{N} or \p{N}{1,3}           digits
//   4  ?[^\s\p{L}\p{N}]+[\r\n]*     optional U+0020, symbols, then CR/LF
//   5 \s*[\r\n]+                    whitespace up to and including its last CR/LF
//   6 \s+(?!\S)                     whitespace but its last char when a non-space follows
//   7 \s+                           whitespace (a single space before a word)
// \s is the Unicode White_Space property (Oniguruma's \s for Unicode strings).

#include "tokenizer/pretokenizer.h"

#include <unicode/uchar.h>

#include <array>
#include <cstdint>
#include <string>

#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Character class bits. A code point with none of kLetter/kNumber/kSpace is a "symbol"
// ([^\s\p{L}\p{N}]).
enum : std::uint8_t {
    kLetter = 1,    // \p{L}
    kNumber = 2,    // \p{N}
    kSpace = 4,     // \s
    kCrLf = 8,      // [\r\n] (also kSpace)
    kAscSpace = 16, // U+0020 (also kSpace)
    kApos = 32,     // '
};

std::uint8_t classify_non_ascii(char32_t cp) {
    if (u_isUWhiteSpace(static_cast<UChar32>(cp))) return kSpace;
    switch (u_charType(static_cast<UChar32>(cp))) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER:
            return kLetter;
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER:
            return kNumber;
        default:
            return 0;
    }
}

struct AsciiTable {
    std::array<std::uint8_t, 128> cls{};
    AsciiTable() {
        for (int c = 0; c < 128; ++c) {
            std::uint8_t k = 0;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = kLetter;
            if (c >= '0' && c <= '9') k = kNumber;
            if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = kSpace;
            if (c == '\r' || c == '\n') k |= kCrLf;
            if (c == ' ') k |= kAscSpace;
            if (c == '\'') k = kApos;
            cls[c] = k;
        }
    }
};

const AsciiTable& ascii_table() {
    static const AsciiTable t;
    return t;
}

// Per-thread scratch: classes and byte offsets of the code points of the text being split.
struct Scratch {
    std::vector<std::uint8_t> cls;   // [n_cp]
    std::vector<std::uint32_t> off;  // [n_cp + 1] byte offset of each code point
};

inline bool is_symbol(std::uint8_t c) { return (c & (kLetter | kNumber | kSpace)) == 0; }

inline char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Length in code points of a contraction suffix at cp i (an apostrophe), 0 if none.
std::size_t contraction(std::string_view text, const Scratch& s, std::size_t i, std::size_t n) {
    auto ascii_at = [&](std::size_t k) -> char {
        if (k >= n || s.off[k + 1] - s.off[k] != 1) return 0;
        return lower_ascii(text[s.off[k]]);
    };
    const char c1 = ascii_at(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    const char c2 = ascii_at(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

}  // namespace

StatusOr<SplitPattern> split_pattern_from_regex(std::string_view regex) {
    if (regex == kQwen2Regex) return SplitPattern::kQwen2;
    if (regex == kLlama3Regex) return SplitPattern::kLlama3;
    return Status::Unimplemented("tokenizer.json: pre_tokenizer Split regex is not supported "
                                 "(supported: the Qwen2/Qwen3 and Llama 3 patterns): " +
                                 std::string(regex));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
    thread_local Scratch s;
    s.cls.clear();
    s.off.clear();
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const AsciiTable& table = ascii_table();
    for (std::size_t i = 0; i < text.size();) {
        s.off.push_back(static_cast<std::uint32_t>(i));
        if (p[i] < 0x80) {
            s.cls.push_back(table.cls[p[i]]);
            ++i;
            continue;
        }
        const Utf8Step st = utf8_step(p + i, text.size() - i);
        // The caller guarantees valid UTF-8; a stray byte is treated as a symbol.
        s.cls.push_back(st.kind == Utf8Kind::kValid ? classify_non_ascii(st.code_point) : 0);
        i += st.kind == Utf8Kind::kValid ? st.length : 1;
    }
    const std::size_t n = s.cls.size();
    s.off.push_back(static_cast<std::uint32_t>(text.size()));
    const std::uint8_t* cls = s.cls.data();
    const std::size_t max_digits = pattern_ == SplitPattern::kLlama3 ? 3 : 1;

    auto run_of = [&](std::size_t k, std::uint8_t bits) {
        while (k < n && (cls[k] & bits)) ++k;
        return k;
    };

    std::size_t i = 0;
    while (i < n) {
        const std::uint8_t c = cls[i];
        std::size_t end = 0;
        if ((c & kApos) && (end = contraction(text, s, i, n)) != 0) {
            end += i;
        } else if (!(c & (kCrLf | kLetter | kNumber)) && i + 1 < n && (cls[i + 1] & kLetter)) {
            end = run_of(i + 1, kLetter);  // alternative 2 with its leading char
        } else if (c & kLetter) {
            end = run_of(i, kLetter);
        } else if (c & kNumber) {
            end = i + 1;
            while (end < n && end - i < max_digits && (cls[end] & kNumber)) ++end;
        } else if (is_symbol(c) || ((c & kAscSpace) && i + 1 < n && is_symbol(cls[i + 1]))) {
            std::size_t k = (c & kAscSpace) ? i + 1 : i;
            while (k < n && is_symbol(cls[k])) ++k;
            end = run_of(k, kCrLf);
        } else {
            // Whitespace: alternatives 5, 6 and 7.
            const std::size_t ws_end = run_of(i, kSpace);
            std::size_t last_crlf = n;
            for (std::size_t k = ws_end; k > i; --k) {
                if (cls[k - 1] & kCrLf) {
                    last_crlf = k - 1;
                    break;
                }
            }
            if (last_crlf != n) {
                end = last_crlf + 1;
            } else if (ws_end == n || ws_end - i == 1) {
                end = ws_end;
            } else {
                end = ws_end - 1;
            }
        }
        pieces.push_back(text.substr(s.off[i], s.off[end] - s.off[i]));
        i = end;
    }
}

}  // namespace tessera::tokenizer
