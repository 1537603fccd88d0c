#pragma once
// server/partial_json.h — the value a JSON text says while it is still being written, as
// SGLang reads a streamed tool call's arguments with partial_json_parser
// (function_call/base_format_detector.py parse_streaming_increment). Pure.

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::server {

// `text` (a JSON value, possibly cut anywhere) read as far as it goes: open strings and
// brackets closed, a member or element cut short dropped. With `partial_strings` false a
// string cut short is dropped too (a function's name must be whole). Object keys keep their
// order. nullopt when not even the value's opening is there. Text after a complete value is
// ignored.
std::optional<nlohmann::ordered_json> parse_partial_json(std::string_view text, bool partial_strings);

}  // namespace tessera::server
