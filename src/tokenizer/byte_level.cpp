// tokenizer/byte_level.cpp — see byte_level.h.

#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

struct Tables {
    std::array<char32_t, 256> to_char{};
    std::array<std::int16_t, 324> to_byte{};  // indexed by code point < 324; -1 = none

    Tables() {
        to_byte.fill(-1);
        int next_extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                                   (b >= 0xAE && b <= 0xFF);
            const char32_t cp = printable ? static_cast<char32_t>(b)
                                          : static_cast<char32_t>(256 + next_extra++);
            to_char[b] = cp;
            to_byte[cp] = static_cast<std::int16_t>(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

char32_t byte_to_char(std::uint8_t byte) { return tables().to_char[byte]; }

std::optional<std::uint8_t> char_to_byte(char32_t cp) {
    if (cp >= tables().to_byte.size() || tables().to_byte[cp] < 0) return std::nullopt;
    return static_cast<std::uint8_t>(tables().to_byte[cp]);
}

std::string byte_level_encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) append_utf8(byte_to_char(static_cast<std::uint8_t>(c)), out);
    return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t i = 0;
    while (i < text.size()) {
        const Utf8Step s = utf8_step(p + i, text.size() - i);
        if (s.kind != Utf8Kind::kValid) return std::nullopt;
        const auto b = char_to_byte(s.code_point);
        if (!b) return std::nullopt;
        out += static_cast<char>(*b);
        i += s.length;
    }
    return out;
}

}  // namespace tessera::tokenizer
