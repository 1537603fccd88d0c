#pragma once
// grammar/structural_tag.h — SGLang's `structural_tag` constraint, in both of the shapes SGLang
// hands to xgrammar (xgrammar_backend.py dispatch_structural_tag):
// - xgrammar's structural tag, {"type": "structural_tag", "format": {...}}: a tree of formats
//   (const_string, json_schema, grammar, regex, any_text, sequence, or, optional, star, plus,
//   repeat, tag, triggered_tags, tags_with_separator, dispatch), as xgrammar's
//   structural_tag.cc reads and converts them;
// - the legacy {"structures": [{"begin", "schema", "end"}], "triggers": [...], "at_least_one"},
//   which is triggered_tags over tags whose content is the schema (StructuralTag
//   .from_legacy_structural_tag): free text until a trigger, then the rest of a begin that starts
//   with it, an instance of the schema, the end, and free text again.
// Compiled straight to a byte NFA. Token-level formats and the XML styles of json_schema are
// refused by name. Pure; thread-safe.

#include <string_view>

#include "base/status.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace tessera::grammar {

// Formats nest at most this deep.
inline constexpr int kMaxFormatDepth = 64;
// A repeat's min and finite max are at most this.
inline constexpr std::int64_t kMaxFormatRepeat = 10000;

// `spec`: the JSON text of either shape. InvalidArgument, with xgrammar's message where it has
// one, for a malformed spec, an unsupported format, or a schema, regex or grammar refused by
// its own compiler.
StatusOr<ByteNfa> structural_tag_nfa(std::string_view spec, const JsonWhitespace& whitespace = {});

}  // namespace tessera::grammar
