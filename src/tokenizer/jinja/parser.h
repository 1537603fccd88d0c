#pragma once
// tokenizer/jinja/parser.h — tokens → statement tree (ast.h), by precedence climbing in
// Jinja2's own grammar order: `x if c else y` < or < and < not < comparisons (in, not in)
// < + - < ~ < * / // % < ** < unary - < postfix (.x [i] [a:b:c] call) | filter / is test.
// Filters, tests, methods and global functions outside the supported set fail here, so a
// template that compiles only fails at render time on data (undefined, type errors).
// Pure function; throws JinjaError (caught by Template::compile).

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace tessera::jinja {

NodeList parse(const std::vector<Token>& tokens);

}  // namespace tessera::jinja
