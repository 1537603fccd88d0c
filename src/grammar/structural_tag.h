#pragma once
// grammar/structural_tag.h — SGLang's `structural_tag` constraint (the response_format
// {"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]},
// compiled by xgrammar's compile_structural_tag): the output is free text until it writes one of
// the triggers; from there it must finish the `begin` of a structure that starts with that
// trigger, then an instance of the structure's JSON schema, then its `end`, and is free again.
// Built directly as a byte NFA: the free text is an Aho-Corasick automaton over the triggers,
// whose completed triggers lead into the structures. Pure; thread-safe.

#include <string_view>

#include "base/status.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace tessera::grammar {

// `spec`: the JSON object above (other keys, such as "type", are ignored). InvalidArgument for
// a malformed one, an empty trigger, a structure whose begin starts with no trigger, or a
// schema json_schema_to_regex refuses.
StatusOr<ByteNfa> structural_tag_nfa(std::string_view spec, const JsonWhitespace& whitespace = {});

}  // namespace tessera::grammar
