#pragma once
// tokenizer/jinja/ast.h — the parsed template: expression and statement trees built by
// parser.cpp and walked by interpreter.cpp. Immutable after parsing, so one tree can be
// rendered by many threads at once. Every node keeps its source line for error messages.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace tessera::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        kLiteral,    // literal
        kName,       // name
        kList,       // args = items
        kTuple,      // args = items (a list at run time; only its str() differs in Python)
        kDict,       // args = k0, v0, k1, v1, ...
        kUnary,      // name = "-", "+" or "not"; args[0]
        kBinary,     // name = operator (+ - * / // % ** ~ and or); args[0], args[1]
        kCompare,    // args[0] then args[i+1] compared with ops[i] (== != < > <= >= in notin)
        kAttr,       // args[0].name
        kSubscript,  // args[0][args[1]]
        kSlice,      // args[0][args[1]:args[2]:args[3]]; a missing bound is nullptr
        kCall,       // args[0](args[1..], kwargs)
        kFilter,     // args[0] | name(args[1..], kwargs)
        kTest,       // args[0] is [not] name(args[1..]); negated
        kCond,       // args[1] if args[0] else args[2] (args[2] may be nullptr → Undefined)
    };
    Kind kind;
    int line = 0;
    std::string name;
    Json literal;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

// {% macro name(a, b=default) %}body{% endmacro %}
struct MacroNode {
    std::string name;
    std::vector<std::pair<std::string, ExprPtr>> params;  // default nullptr → required
    NodeList body;
};

struct Node {
    enum class Kind {
        kText,      // text
        kOutput,    // {{ expr }}
        kIf,        // branches (cond, body) in order, else_body
        kFor,       // for targets in expr [if cond]: body, else_body
        kSet,       // set targets = expr; or set targets[0].attr = expr (attr non-empty)
        kSetBlock,  // {% set targets[0] %}body{% endset %}
        kBreak,
        kContinue,
        kMacro,        // macro
        kFilterBlock,  // {% filter name(args) %}body{% endfilter %}: expr is the filter with
                       // a null operand
    };
    Kind kind;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr cond;
    std::vector<std::pair<ExprPtr, NodeList>> branches;
    NodeList body;
    NodeList else_body;
    std::vector<std::string> targets;
    std::string attr;
    std::unique_ptr<MacroNode> macro;
};

}  // namespace tessera::jinja
