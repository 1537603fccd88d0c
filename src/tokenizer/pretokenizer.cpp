// tokenizer/pretokenizer.cpp — see pretokenizer.h.
//
// Each matcher answers "where does the match that starts at code point i end?" the way
// Oniguruma (the regex engine of HF tokenizers) would: the leftmost alternative that matches
// wins, quantifiers are greedy and give back only what the rest of the alternative needs.
// The driver, isolate(), then does what HF's Split does with the regex's find_iter: a
// position where nothing matches is passed over, and each stretch passed over becomes a
// piece of its own beside the matches (behaviour "Isolated"). Matching never looks outside
// the piece being split, so (?!\S) holds at its end and [^...]? cannot take a character of
// the piece before.
// \s is the Unicode White_Space property (Oniguruma's \s for Unicode strings); \p{L}, \p{N},
// \p{M}, \p{P}, \p{S} are the general categories (letter, number, mark, punctuation, symbol).
//
// Qwen2 / Llama 3, per alternative at code point i, with runs taken maximal:
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)  apostrophe + ASCII suffix, case-insensitive. Oniguruma,
//                                   as used by HF tokenizers, does not fold U+017F to 's'.
//   2 [^\r\n\p{L}\p{N}]?\p{L}+      one non-letter/digit/CR/LF char then letters, or letters
//   3 \p{N} or \p{N}{1,3}           digits
//   4  ?[^\s\p{L}\p{N}]+[\r\n]*     optional U+0020, symbols, then CR/LF
//   5 \s*[\r\n]+                    whitespace up to and including its last CR/LF
//   6 \s+(?!\S)                     whitespace but its last char when a non-space follows
//   7 \s+                           whitespace (a single space before a word)
// Every code point starts one of these, so this pattern leaves no gaps.
//
// DeepSeek V3 runs three Split steps, each over the pieces of the one before:
//   \p{N}{1,3}       digits in groups of three from the left; the rest are gaps
//   [一-龥぀-ゟ゠-ヿ]+  runs of code points in three ranges (not a Unicode property: the
//                    kana blocks hold marks, symbols and punctuation too, e.g. U+30FB ・)
//   then the word pattern:
//   1 [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
//                          one ASCII punctuation/symbol char then ASCII letters (".Hello",
//                          "#define"); tried first, so it beats alternative 3 there
//   2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//                          one char that is none of those (a space, a digit, a control, a
//                          mark) then letters and marks, or letters and marks alone
//   3  ?[\p{P}\p{S}]+[\r\n]*
//                          optional U+0020, punctuation and symbols, then CR/LF
//   4-6 as 5-7 above.
//   Anything else (numbers, controls, format characters such as U+200D, private use,
//   unassigned) that does not lead a word is in no match: it ends up in a gap piece.
//
// GPT-2 (HF's ByteLevel pre-tokenizer with use_regex, the pattern of OpenAI's encoder.py):
//   1 's|'t|'re|'ve|'m|'ll|'d       apostrophe + lower-case ASCII suffix (case-sensitive)
//   2  ?\p{L}+                      optional U+0020, then letters
//   3  ?\p{N}+                      optional U+0020, then digits (no grouping)
//   4  ?[^\s\p{L}\p{N}]+            optional U+0020, then symbols (no CR/LF rule)
//   5 \s+(?!\S)|\s+                whitespace but its last char when a non-space follows
// Every code point starts one of these, so this pattern leaves no gaps either.

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
constexpr std::string_view kDigitGroupsRegex = R"(\p{N}{1,3})";
// [一-龥぀-ゟ゠-ヿ]+ spelled as UTF-8 bytes.
constexpr std::string_view kCjkKanaRegex =
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+";
// DeepSeek's file holds CR and LF as raw characters inside the classes; a file spelling
// them as the escapes \r \n means the same regex to Oniguruma, so both are recognised.
constexpr std::string_view kDeepSeekV3Regex =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)re"
    "\r\n"
    R"re(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)re"
    "\r\n"
    R"re(]*|\s*[)re"
    "\r\n"
    R"re(]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kDeepSeekV3EscapedRegex =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Character class bits. For the Qwen2 / Llama 3 pattern a code point with none of
// kLetter/kNumber/kSpace is a "symbol" ([^\s\p{L}\p{N}]).
enum : std::uint16_t {
    kLetter = 1,         // \p{L}
    kNumber = 2,         // \p{N}
    kSpace = 4,          // \s
    kCrLf = 8,           // [\r\n] (also kSpace)
    kAscSpace = 16,      // U+0020 (also kSpace)
    kApos = 32,          // '
    kMark = 64,          // \p{M}
    kPunct = 128,        // \p{P}
    kSymbol = 256,       // \p{S}
    kAsciiPunct = 512,   // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~] (also kPunct or kSymbol)
    kAsciiLetter = 1024, // [A-Za-z] (also kLetter)
    kCjkKana = 2048,     // [一-龥぀-ゟ゠-ヿ]
};

std::uint16_t classify(char32_t cp) {
    const auto c = static_cast<UChar32>(cp);
    std::uint16_t k = 0;
    if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF)) k = kCjkKana;
    if (u_isUWhiteSpace(c)) return static_cast<std::uint16_t>(k | kSpace);
    switch (u_charType(c)) {
        case U_UPPERCASE_LETTER:
        case U_LOWERCASE_LETTER:
        case U_TITLECASE_LETTER:
        case U_MODIFIER_LETTER:
        case U_OTHER_LETTER:
            return static_cast<std::uint16_t>(k | kLetter);
        case U_DECIMAL_DIGIT_NUMBER:
        case U_LETTER_NUMBER:
        case U_OTHER_NUMBER:
            return static_cast<std::uint16_t>(k | kNumber);
        case U_NON_SPACING_MARK:
        case U_ENCLOSING_MARK:
        case U_COMBINING_SPACING_MARK:
            return static_cast<std::uint16_t>(k | kMark);
        case U_CONNECTOR_PUNCTUATION:
        case U_DASH_PUNCTUATION:
        case U_START_PUNCTUATION:
        case U_END_PUNCTUATION:
        case U_INITIAL_PUNCTUATION:
        case U_FINAL_PUNCTUATION:
        case U_OTHER_PUNCTUATION:
            return static_cast<std::uint16_t>(k | kPunct);
        case U_MATH_SYMBOL:
        case U_CURRENCY_SYMBOL:
        case U_MODIFIER_SYMBOL:
        case U_OTHER_SYMBOL:
            return static_cast<std::uint16_t>(k | kSymbol);
        default:
            return k;
    }
}

struct AsciiTable {
    std::array<std::uint16_t, 128> cls{};
    AsciiTable() {
        for (char32_t c = 0; c < 128; ++c) {
            std::uint16_t k = classify(c);
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k |= kAsciiLetter;
            if (c > 0x20 && c < 0x7F && !(k & (kLetter | kNumber))) k |= kAsciiPunct;
            if (c == '\r' || c == '\n') k |= kCrLf;
            if (c == ' ') k |= kAscSpace;
            if (c == '\'') k |= kApos;
            cls[c] = k;
        }
    }
};

const AsciiTable& ascii_table() {
    static const AsciiTable t;
    return t;
}

// Per-thread scratch: classes and byte offsets of the code points of the text being split,
// and piece ends (code point indices) between the steps of a sequence.
struct Scratch {
    std::vector<std::uint16_t> cls;  // [n_cp]
    std::vector<std::uint32_t> off;  // [n_cp + 1] byte offset of each code point
    std::vector<std::uint32_t> ends;
    std::vector<std::uint32_t> next_ends;
};

// The text being split, as code points.
struct Text {
    std::string_view bytes;
    const std::uint16_t* cls;
    const std::uint32_t* off;

    std::size_t run_of(std::size_t k, std::size_t hi, std::uint16_t bits) const {
        while (k < hi && (cls[k] & bits)) ++k;
        return k;
    }
};

inline bool is_symbol(std::uint16_t c) { return (c & (kLetter | kNumber | kSpace)) == 0; }

inline char lower_ascii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Length in code points of a contraction suffix at cp i (an apostrophe), 0 if none.
std::size_t contraction(const Text& t, std::size_t i, std::size_t hi) {
    auto ascii_at = [&](std::size_t k) -> char {
        if (k >= hi || t.off[k + 1] - t.off[k] != 1) return 0;
        return lower_ascii(t.bytes[t.off[k]]);
    };
    const char c1 = ascii_at(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    const char c2 = ascii_at(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at whitespace code point i.
std::size_t whitespace_end(const Text& t, std::size_t i, std::size_t hi) {
    const std::size_t ws_end = t.run_of(i, hi, kSpace);
    for (std::size_t k = ws_end; k > i; --k) {
        if (t.cls[k - 1] & kCrLf) return k;
    }
    if (ws_end == hi || ws_end - i == 1) return ws_end;
    return ws_end - 1;
}

// Qwen2 / Llama 3. Every code point starts a match, so the pieces are the matches back to
// back; a loop of its own rather than isolate() with a matcher, which measured ~15% slower
// on this hot path of those models.
template <typename Emit>
void split_qwen_llama(const Text& tx, std::size_t lo, std::size_t hi, std::size_t max_digits,
                      Emit&& emit) {
    const std::uint16_t* cls = tx.cls;
    const auto run_of = [&](std::size_t k, std::uint16_t bits) {
        while (k < hi && (cls[k] & bits)) ++k;
        return k;
    };
    std::size_t i = lo;
    while (i < hi) {
        const std::uint16_t c = cls[i];
        std::size_t end = 0;
        if ((c & kApos) && (end = contraction(tx, i, hi)) != 0) {
            end += i;
        } else if (!(c & (kCrLf | kLetter | kNumber)) && i + 1 < hi && (cls[i + 1] & kLetter)) {
            end = run_of(i + 1, kLetter);
        } else if (c & kLetter) {
            end = run_of(i, kLetter);
        } else if (c & kNumber) {
            end = i + 1;
            while (end < hi && end - i < max_digits && (cls[end] & kNumber)) ++end;
        } else if (is_symbol(c) || ((c & kAscSpace) && i + 1 < hi && is_symbol(cls[i + 1]))) {
            std::size_t k = (c & kAscSpace) ? i + 1 : i;
            while (k < hi && is_symbol(cls[k])) ++k;
            end = run_of(k, kCrLf);
        } else {
            end = whitespace_end(tx, i, hi);
        }
        emit(i, end);
        i = end;
    }
}

// GPT-2: the end of the match at code point i of the piece [.., hi).
std::size_t match_gpt2(const Text& t, std::size_t i, std::size_t hi) {
    const std::uint16_t c = t.cls[i];
    if (c & kApos) {
        const auto ascii_at = [&](std::size_t k) -> char {
            return k < hi && t.off[k + 1] - t.off[k] == 1 ? t.bytes[t.off[k]] : '\0';
        };
        const char c1 = ascii_at(i + 1), c2 = ascii_at(i + 2);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
    // The optional space joins a run of letters, digits or symbols that follows it.
    const std::size_t k = (c & kAscSpace) && i + 1 < hi && !(t.cls[i + 1] & kSpace) ? i + 1 : i;
    const std::uint16_t lead = t.cls[k];
    if (lead & kLetter) return t.run_of(k, hi, kLetter);
    if (lead & kNumber) return t.run_of(k, hi, kNumber);
    if (is_symbol(lead)) {
        std::size_t end = k;
        while (end < hi && is_symbol(t.cls[end])) ++end;
        return end;
    }
    const std::size_t ws_end = t.run_of(i, hi, kSpace);
    return ws_end == hi || ws_end - i == 1 ? ws_end : ws_end - 1;
}

// DeepSeek V3 steps: the end of the match at code point i of the piece [.., hi), or i itself
// when nothing matches there.
std::size_t match_digit_groups(const Text& t, std::size_t i, std::size_t hi) {
    std::size_t end = i;
    while (end < hi && end - i < 3 && (t.cls[end] & kNumber)) ++end;
    return end;
}

std::size_t match_cjk_kana(const Text& t, std::size_t i, std::size_t hi) {
    return t.run_of(i, hi, kCjkKana);
}

std::size_t match_deepseek_v3(const Text& t, std::size_t i, std::size_t hi) {
    const std::uint16_t c = t.cls[i];
    const std::uint16_t next = i + 1 < hi ? t.cls[i + 1] : 0;
    if ((c & kAsciiPunct) && (next & kAsciiLetter)) return t.run_of(i + 1, hi, kAsciiLetter);
    if (!(c & (kCrLf | kLetter | kPunct | kSymbol)) && (next & (kLetter | kMark))) {
        return t.run_of(i + 1, hi, kLetter | kMark);
    }
    if (c & (kLetter | kMark)) return t.run_of(i, hi, kLetter | kMark);
    if (c & (kPunct | kSymbol)) return t.run_of(t.run_of(i, hi, kPunct | kSymbol), hi, kCrLf);
    if ((c & kAscSpace) && (next & (kPunct | kSymbol))) {
        return t.run_of(t.run_of(i + 1, hi, kPunct | kSymbol), hi, kCrLf);
    }
    if (c & kSpace) return whitespace_end(t, i, hi);
    return i;
}

// Split [lo, hi) into matches and the gaps between them, emit(begin, end) for each in order.
template <typename Match, typename Emit>
inline void isolate(std::size_t lo, std::size_t hi, Match&& match, Emit&& emit) {
    std::size_t gap = lo;
    std::size_t i = lo;
    while (i < hi) {
        const std::size_t end = match(i);
        if (end == i) {
            ++i;
            continue;
        }
        if (gap < i) emit(gap, i);
        emit(i, end);
        i = end;
        gap = end;
    }
    if (gap < hi) emit(gap, hi);
}

template <typename Emit>
void run_step(SplitPattern pattern, const Text& t, std::size_t lo, std::size_t hi, Emit&& emit) {
    switch (pattern) {
        case SplitPattern::kQwen2:
            split_qwen_llama(t, lo, hi, 1, emit);
            return;
        case SplitPattern::kLlama3:
            split_qwen_llama(t, lo, hi, 3, emit);
            return;
        case SplitPattern::kDigitGroups:
            isolate(lo, hi, [&](std::size_t i) { return match_digit_groups(t, i, hi); }, emit);
            return;
        case SplitPattern::kCjkKana:
            isolate(lo, hi, [&](std::size_t i) { return match_cjk_kana(t, i, hi); }, emit);
            return;
        case SplitPattern::kDeepSeekV3:
            isolate(lo, hi, [&](std::size_t i) { return match_deepseek_v3(t, i, hi); }, emit);
            return;
        case SplitPattern::kGpt2:
            isolate(lo, hi, [&](std::size_t i) { return match_gpt2(t, i, hi); }, emit);
            return;
    }
}

}  // namespace

StatusOr<SplitPattern> split_pattern_from_regex(std::string_view regex) {
    if (regex == kQwen2Regex) return SplitPattern::kQwen2;
    if (regex == kLlama3Regex) return SplitPattern::kLlama3;
    if (regex == kDigitGroupsRegex) return SplitPattern::kDigitGroups;
    if (regex == kCjkKanaRegex) return SplitPattern::kCjkKana;
    if (regex == kDeepSeekV3Regex || regex == kDeepSeekV3EscapedRegex) {
        return SplitPattern::kDeepSeekV3;
    }
    return Status::Unimplemented("tokenizer.json: pre_tokenizer Split regex is not supported "
                                 "(supported: the Qwen2/Qwen3, Llama 3 and DeepSeek V3 "
                                 "patterns): " +
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
        s.cls.push_back(st.kind == Utf8Kind::kValid ? classify(st.code_point)
                                                    : std::uint16_t{kSymbol});
        i += st.kind == Utf8Kind::kValid ? st.length : 1;
    }
    const std::size_t n = s.cls.size();
    s.off.push_back(static_cast<std::uint32_t>(text.size()));
    const Text t{text, s.cls.data(), s.off.data()};
    const auto emit_piece = [&](std::size_t begin, std::size_t end) {
        pieces.push_back(text.substr(s.off[begin], s.off[end] - s.off[begin]));
    };
    if (steps_.size() == 1) {
        run_step(steps_.front(), t, 0, n, emit_piece);
        return;
    }
    // Pieces between steps are kept as their end indices: they are consecutive.
    s.ends.clear();
    const auto emit_end = [&](std::size_t, std::size_t end) {
        s.next_ends.push_back(static_cast<std::uint32_t>(end));
    };
    s.next_ends.clear();
    run_step(steps_.front(), t, 0, n, emit_end);
    for (std::size_t step = 1; step < steps_.size(); ++step) {
        s.ends.swap(s.next_ends);
        s.next_ends.clear();
        const bool last = step + 1 == steps_.size();
        std::size_t lo = 0;
        for (const std::uint32_t hi : s.ends) {
            if (last) {
                run_step(steps_[step], t, lo, hi, emit_piece);
            } else {
                run_step(steps_[step], t, lo, hi, emit_end);
            }
            lo = hi;
        }
    }
}

}  // namespace tessera::tokenizer
