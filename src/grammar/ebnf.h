#pragma once
// grammar/ebnf.h — SGLang's `ebnf` constraint: a grammar in the GBNF-style EBNF xgrammar reads
// (`root ::= "yes" | "no" ws item*`; string literals, character classes [a-z] / [^...], rule
// references, grouping, `|`, `* + ?` and `{m,n}`, `#` comments), rewritten as the regular
// expression of the language of `root`. A rule that refers to itself, directly or through
// others, is inlined at most kMaxNesting levels deep, the deeper branches left out, as the JSON
// schema's recursive $refs are: exact for grammars without recursion, cut for nested ones.
// Lookahead assertions and other xgrammar extensions are refused. Pure; thread-safe.

#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::grammar {

// The regex's size bound: a grammar whose inlining would write more is refused.
inline constexpr std::size_t kMaxEbnfRegexBytes = 1 << 20;

StatusOr<std::string> ebnf_to_regex(std::string_view grammar);

}  // namespace tessera::grammar
