// tokenizer/utf8.cpp — see utf8.h. The second-byte ranges follow Unicode Table 3-7
// (well-formed byte sequences); they exclude overlongs, surrogates and > U+10FFFF.

#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

// Bytes after the lead byte, and the allowed range of the first continuation byte.
struct LeadInfo {
    std::uint8_t n_trail;  // 0 for ASCII; 0xFF for a byte that never starts a character
    std::uint8_t lo;
    std::uint8_t hi;
};

constexpr LeadInfo lead_info(unsigned char b) {
    if (b < 0x80) return {0, 0, 0};
    if (b < 0xC2) return {0xFF, 0, 0};  // continuation byte or overlong 2-byte lead
    if (b < 0xE0) return {1, 0x80, 0xBF};
    if (b == 0xE0) return {2, 0xA0, 0xBF};
    if (b == 0xED) return {2, 0x80, 0x9F};
    if (b < 0xF0) return {2, 0x80, 0xBF};
    if (b == 0xF0) return {3, 0x90, 0xBF};
    if (b < 0xF4) return {3, 0x80, 0xBF};
    if (b == 0xF4) return {3, 0x80, 0x8F};
    return {0xFF, 0, 0};
}

}  // namespace

Utf8Step utf8_step(const unsigned char* data, std::size_t n) {
    const unsigned char b0 = data[0];
    if (b0 < 0x80) return {Utf8Kind::kValid, 1, b0};
    const LeadInfo info = lead_info(b0);
    if (info.n_trail == 0xFF) return {Utf8Kind::kInvalid, 1, 0};
    char32_t cp = b0 & (0x3F >> info.n_trail);
    for (std::size_t i = 1; i <= info.n_trail; ++i) {
        if (i >= n) return {Utf8Kind::kIncomplete, n, 0};
        const unsigned char b = data[i];
        const bool ok = i == 1 ? (b >= info.lo && b <= info.hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return {Utf8Kind::kInvalid, i, 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Utf8Kind::kValid, std::size_t{info.n_trail} + 1, cp};
}

bool is_valid_utf8(std::string_view text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t i = 0;
    const std::size_t n = text.size();
    while (i < n) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= n) {
            std::uint64_t w;
            __builtin_memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            ++i;
            continue;
        }
        const Utf8Step s = utf8_step(p + i, n - i);
        if (s.kind != Utf8Kind::kValid) return false;
        i += s.length;
    }
    return true;
}

std::string utf8_replace_invalid(std::string_view text) {
    std::string out;
    out.reserve(text.size() + 8);
    const std::size_t tail = utf8_append_complete(text, out);
    if (tail > 0) out += kReplacementChar;
    return out;
}

std::size_t utf8_append_complete(std::string_view bytes, std::string& out) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::size_t n = bytes.size();
    std::size_t i = 0;
    std::size_t run_start = 0;  // start of a run of valid bytes not yet copied
    while (i < n) {
        if (p[i] < 0x80) {
            ++i;
            continue;
        }
        const Utf8Step s = utf8_step(p + i, n - i);
        if (s.kind == Utf8Kind::kValid) {
            i += s.length;
            continue;
        }
        out.append(bytes.substr(run_start, i - run_start));
        if (s.kind == Utf8Kind::kIncomplete) return n - i;
        out += kReplacementChar;
        i += s.length;
        run_start = i;
    }
    out.append(bytes.substr(run_start, n - run_start));
    return 0;
}

void append_utf8(char32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace tessera::tokenizer
