#pragma once
// base/text.h — the two small text helpers the HTTP code needs in several places: ASCII
// lower-casing (header names, host names) and trimming of the blanks around a header value.
// Pure and header-only.

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

}  // namespace tessera
