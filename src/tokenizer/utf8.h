#pragma once
// tokenizer/utf8.h — UTF-8 scanning with the Unicode "maximal subpart" replacement policy:
// each maximal invalid subsequence becomes one U+FFFD. This is what WHATWG TextDecoder (JS),
// Python's errors="replace" and Rust's String::from_utf8_lossy do, so the tokenizer sees the
// same text as the reference library does. Pure functions; thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Kind {
    kValid,       // a complete, well-formed character of `length` bytes
    kInvalid,     // `length` bytes (>= 1) form one maximal invalid subpart: one U+FFFD
    kIncomplete,  // all remaining bytes are a valid prefix of a character: wait for more
};

struct Utf8Step {
    Utf8Kind kind;
    std::size_t length;
    char32_t code_point;  // only for kValid
};

// Classifies the sequence starting at data[0]; n >= 1.
Utf8Step utf8_step(const unsigned char* data, std::size_t n);

// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// `text` with every maximal invalid subpart (incl. an incomplete tail) replaced by U+FFFD.
std::string utf8_replace_invalid(std::string_view text);

// Appends the final part of `bytes` to `out` (invalid subparts as U+FFFD) and returns the
// length of the incomplete tail that may still become a character (0..3 bytes).
std::size_t utf8_append_complete(std::string_view bytes, std::string& out);

// Appends `cp` encoded as UTF-8.
void append_utf8(char32_t cp, std::string& out);

}  // namespace tessera::tokenizer
