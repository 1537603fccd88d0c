#pragma once
// grammar/regex.h — the regular expressions of constrained decoding (SGLang's `regex`
// sampling parameter, and what a JSON schema compiles to), parsed into a syntax tree over
// Unicode code points and compiled to a byte-level NFA that matches their UTF-8 encoding.
// The syntax is Python's `re` as xgrammar's regex converter accepts it: literals and
// escapes (\d \w \s and their negations, \n \t \xHH \uXXXX, escaped punctuation), `.`
// (any character but newline), classes [a-z] / [^...], groups ( ), (?: ), (?P<name> ),
// alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same
// language). Anchors count only at the ends; lookaround, backreferences and inline flags
// are refused. Whole-match semantics: the text must match the pattern entirely.
// Pure functions and value types; thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::grammar {

// Inclusive code point range.
struct CodeRange {
    char32_t lo;
    char32_t hi;
};

struct RegexNode {
    enum class Kind { kEmpty, kClass, kConcat, kAlternate, kRepeat } kind = Kind::kEmpty;
    std::vector<CodeRange> ranges;                    // kClass: sorted, disjoint
    std::vector<std::unique_ptr<RegexNode>> children;  // kConcat, kAlternate; kRepeat: one
    int min = 0;                                      // kRepeat
    int max = 0;                                      // kRepeat; -1: unbounded
};

StatusOr<std::unique_ptr<RegexNode>> parse_regex(std::string_view pattern);

// A pattern that matches `text` literally (for keys, enum values and constants).
std::string regex_escape(std::string_view text);

// Byte-level NFA (Thompson): state 0 is the start, `accept` the only accepting state.
struct ByteNfa {
    struct Edge {
        std::uint8_t lo;
        std::uint8_t hi;
        std::int32_t to;
    };
    struct State {
        std::vector<Edge> edges;
        std::vector<std::int32_t> epsilon;
    };
    std::vector<State> states;
    std::int32_t accept = 0;
};

// What a pattern may cost, so that a request cannot exhaust the server: the syntax tree's
// nodes and the nesting of its groups (the parser recurses into them), and the NFA states it
// compiles to (bounded repeats are expanded). Beyond them the pattern is refused as too large.
inline constexpr std::size_t kMaxRegexNodes = 200000;
inline constexpr int kMaxRegexDepth = 1000;
inline constexpr std::size_t kMaxNfaStates = 400000;

StatusOr<ByteNfa> compile_nfa(const RegexNode& root);
StatusOr<ByteNfa> compile_regex(std::string_view pattern);

// The UTF-8 encodings of the code points in [lo, hi], as sequences of byte ranges (each
// sequence one encoded length). Surrogates are skipped.
std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> utf8_sequences(char32_t lo, char32_t hi);

}  // namespace tessera::grammar
