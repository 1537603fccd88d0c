#pragma once
// base/text.h — small text helpers the HTTP code needs in several places: ASCII lower-casing
// (header names, host names), trimming of the blanks around a header value, Python's
// str.strip of whitespace, and the start of a marker at a text's end (streamed output that
// may be cut inside a tag), base64. Pure and header-only.

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace tessera {

inline std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Without leading spaces and tabs, and trailing spaces, tabs and a carriage return.
inline std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

inline bool is_ascii_whitespace(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.strip() / str.rstrip() of ASCII whitespace.
inline std::string_view strip_whitespace(std::string_view s) {
    while (!s.empty() && is_ascii_whitespace(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ascii_whitespace(s.back())) s.remove_suffix(1);
    return s;
}
inline std::string_view rstrip_whitespace(std::string_view s) {
    while (!s.empty() && is_ascii_whitespace(s.back())) s.remove_suffix(1);
    return s;
}

// The length of the longest proper prefix of `marker` that `text` ends with (0 if none).
inline std::size_t marker_start_at_end(std::string_view text, std::string_view marker) {
    for (std::size_t n = std::min(text.size(), marker.empty() ? 0 : marker.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

// RFC 4648 base64, with padding.
inline std::string base64_encode(std::string_view bytes) {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
        unsigned long chunk = 0;
        for (std::size_t k = 0; k < 3; ++k)
            chunk = chunk << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
        for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

}  // namespace tessera
