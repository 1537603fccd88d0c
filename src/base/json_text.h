#pragma once
// base/json_text.h — JSON text that comes from outside (a request body, a schema or structural
// tag sent as a string, a model's tool-call arguments) read with its nesting bounded: a deeper
// document is refused while it is read, since what reads it on (copies, dump) recurses once per
// level and 10^5 levels overflow the stack. Include only where JSON is handled: it brings in
// nlohmann/json. Pure; thread-safe.

#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace tessera {

// The value, in the text's key order. InvalidArgument "<what> nests deeper than <max_depth>
// levels" or "<what> is not valid JSON: ...".
StatusOr<nlohmann::ordered_json> parse_json_text(std::string_view text, int max_depth, std::string_view what);

}  // namespace tessera
