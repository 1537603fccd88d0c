#pragma once
// server/python_calls.h — the pythonic tool-call format: a Python list of calls with keyword
// arguments, `[get_weather(city="Paris"), add(a=1, b=[2, 3])]`, read into JSON as SGLang's
// pythonic_detector.py reads it with Python's ast (arguments are literals: strings, numbers,
// True / False / None, lists, tuples, dicts). Text only, no I/O.

#include <cstddef>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tessera::server {

// Bytes of the bracketed list that opens `text` (brackets counted outside strings of either
// quote), or npos while it is incomplete or `text` does not open with '['.
std::size_t python_list_end(std::string_view text);

// `text` is exactly one list of calls: fills `calls` with [{"name", "arguments"}, ...] and
// returns true; false for anything else (a call with positional arguments, a value that is
// not a literal, text around the list).
bool parse_python_calls(std::string_view text, nlohmann::json& calls);

}  // namespace tessera::server
