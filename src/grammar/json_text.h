#pragma once
// grammar/json_text.h — a constraint's JSON text (a schema, a structural tag) parsed with its
// nesting bounded: the text may come as a string inside a request, past the request's own
// depth check, and what reads it recurses. Pure; thread-safe.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace tessera::grammar {

inline constexpr int kMaxConstraintJsonDepth = 256;

// InvalidArgument naming `what` for text that is not JSON or nests deeper than the bound.
StatusOr<nlohmann::ordered_json> parse_constraint_json(std::string_view text, std::string_view what);

}  // namespace tessera::grammar
