#pragma once
// tokenizer/byte_level.h — the GPT-2 "ByteLevel" alphabet: a bijection between the 256 byte
// values and 256 printable code points, so that byte-level BPE vocabularies are valid text.
// Printable Latin-1 bytes map to themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
// map in order to U+0100.. (so ' ' is 'Ġ' U+0120, '\n' is 'Ċ' U+010A). Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::tokenizer {

char32_t byte_to_char(std::uint8_t byte);
std::optional<std::uint8_t> char_to_byte(char32_t cp);

// Bytes → their byte-level text (UTF-8).
std::string byte_level_encode(std::string_view bytes);

// Byte-level text → bytes. Returns nullopt when `text` holds a code point outside the
// alphabet (or is not valid UTF-8); the caller then uses the text itself, as HF does.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace tessera::tokenizer
