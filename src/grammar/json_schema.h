#pragma once
// grammar/json_schema.h — a JSON schema as the regular expression its instances match, for
// constrained decoding (SGLang's `json_schema` sampling parameter and the OpenAI
// `response_format`). Covered: type (one or a list), properties / required (in the schema's
// order; undeclared properties only where additionalProperties asks for them), items /
// prefixItems / minItems / maxItems, string minLength / maxLength / pattern and the formats
// date, time, date-time and uuid, enum, const, anyOf / oneOf, a one-member allOf, and local
// $ref ("#", "#/$defs/...", "#/definitions/..."), and minimum / maximum / exclusiveMinimum /
// exclusiveMaximum on integers. Keywords that would narrow the output in a way a regex here does
// not express (a number's bounds, multipleOf, not, if/then, ...) are refused,
// never ignored. JSON is not a regular language: values of unconstrained type ({} or
// {"type": "object"}) and recursive $refs nest at most kMaxNesting levels deep.
// Pure functions; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::grammar {

inline constexpr int kMaxNesting = 5;
// A schema (or structural tag) given as JSON text nests at most this deep.
inline constexpr int kMaxConstraintJsonDepth = 256;

// Where JSON allows whitespace, what the output may put there.
struct JsonWhitespace {
    enum class Mode {
        kAny,      // any run of spaces, tabs and newlines (xgrammar's any_whitespace, SGLang's default)
        kCompact,  // ", " and ": " only, as json.dumps (--constrained-json-disable-any-whitespace)
        kPattern,  // `pattern` (--constrained-json-whitespace-pattern)
    } mode = Mode::kAny;
    std::string pattern;
};

StatusOr<std::string> json_schema_to_regex(std::string_view schema, const JsonWhitespace& whitespace = {});

// The decimal integers in [lo, hi] (an absent bound is open), as JSON writes them: no leading
// zeros, no "-0". For an integer's minimum / maximum.
std::string integer_range_regex(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi);

}  // namespace tessera::grammar
