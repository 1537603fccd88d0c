#pragma once
// tokenizer/jinja/lexer.h — splits a template into text and tag tokens, applying Jinja's
// whitespace control the way transformers configures it: `{%-`/`-%}` (and {{ }}, {# #})
// strip whitespace, trim_blocks drops the newline after a block or comment tag,
// lstrip_blocks drops indentation before one, `+` disables both, and a single trailing
// newline of the source is dropped (keep_trailing_newline off). Comments are discarded.
// Pure function; throws JinjaError (caught by Template::compile).

#include <string>
#include <vector>

namespace tessera::jinja {

struct Token {
    enum class Type {
        kText,        // literal output between tags, whitespace control already applied
        kBlockBegin,  // {%
        kBlockEnd,    // %}
        kVarBegin,    // {{
        kVarEnd,      // }}
        kName,        // identifiers and keywords (if, for, and, not, true, none, ...)
        kString,      // text holds the unescaped value
        kInt,
        kFloat,
        kOp,  // punctuation and operators: + - * / // % ** ~ == != < > ( ) ...
        kEof,
    };
    Type type;
    std::string text;
    int line;
};

std::vector<Token> tokenize(const std::string& source);

}  // namespace tessera::jinja
