// tokenizer/jinja/parser.cpp — recursive-descent parser for the Jinja subset (parser.h).

#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"

namespace tessera::jinja {
namespace {

using TT = Token::Type;

ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
}

class Parser {
 public:
    explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

    NodeList run() {
        NodeList body = parse_body({}, nullptr);
        // Functions called by name must be builtins or macros defined somewhere in the
        // template (checked at the end because a macro may be defined after its caller).
        for (const auto& [name, line] : called_names_) {
            if (!is_global_function(name) && !macro_names_.count(name)) {
                throw_unsupported("function '" + name + "'", line);
            }
        }
        return body;
    }

 private:
    // ---- token helpers -------------------------------------------------------------
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
    bool is_op(const char* op) const { return cur().type == TT::kOp && cur().text == op; }
    bool is_name(const char* name) const { return cur().type == TT::kName && cur().text == name; }
    const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }

    static std::string describe(const Token& t) {
        switch (t.type) {
            case TT::kBlockEnd:
                return "'%}'";
            case TT::kVarEnd:
                return "'}}'";
            case TT::kEof:
                return "end of template";
            case TT::kString:
                return "string '" + t.text + "'";
            default:
                return "'" + t.text + "'";
        }
    }
    [[noreturn]] void fail(const std::string& expected) const {
        throw_error("expected " + expected + ", got " + describe(cur()), cur().line);
    }
    void expect_op(const char* op) {
        if (!is_op(op)) fail(std::string("'") + op + "'");
        next();
    }
    void expect_block_end() {
        if (cur().type != TT::kBlockEnd) fail("'%}'");
        next();
    }
    std::string expect_name(const char* what) {
        if (cur().type != TT::kName) fail(what);
        return next().text;
    }

    // ---- statements ----------------------------------------------------------------

    // Parses nodes until `{% <one of ends>`; the end keyword is consumed and stored in
    // *found (the rest of that tag is left to the caller).
    NodeList parse_body(const std::vector<std::string>& ends, std::string* found) {
        NodeList out;
        while (true) {
            const Token& t = cur();
            if (t.type == TT::kEof) {
                if (ends.empty()) return out;
                throw_error("unexpected end of template, expected '{% " + ends.back() + " %}'",
                            t.line);
            }
            if (t.type == TT::kText) {
                auto n = node(Node::Kind::kText, t.line);
                n->text = t.text;
                out.push_back(std::move(n));
                next();
            } else if (t.type == TT::kVarBegin) {
                next();
                auto n = node(Node::Kind::kOutput, t.line);
                n->expr = parse_tuple();
                if (cur().type != TT::kVarEnd) fail("'}}'");
                next();
                out.push_back(std::move(n));
            } else if (t.type == TT::kBlockBegin) {
                next();
                if (cur().type == TT::kName &&
                    std::find(ends.begin(), ends.end(), cur().text) != ends.end()) {
                    *found = next().text;
                    return out;
                }
                out.push_back(parse_statement());
            } else {
                fail("text or a tag");
            }
        }
    }

    std::unique_ptr<Node> node(Node::Kind kind, int line) {
        auto n = std::make_unique<Node>();
        n->kind = kind;
        n->line = line;
        return n;
    }

    std::unique_ptr<Node> parse_statement() {
        const Token& t = cur();
        if (t.type != TT::kName) fail("a statement name");
        const std::string kw = t.text;
        const int line = t.line;
        next();
        if (kw == "if") return parse_if(line);
        if (kw == "for") return parse_for(line);
        if (kw == "set") return parse_set(line);
        if (kw == "macro") return parse_macro(line);
        if (kw == "filter") return parse_filter_block(line);
        if (kw == "break" || kw == "continue") {
            auto n = node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
            expect_block_end();
            return n;
        }
        if (kw == "generation") {
            // transformers' {% generation %} marks assistant spans for masks; as text it is
            // a plain pass-through block.
            expect_block_end();
            auto n = node(Node::Kind::kIf, line);
            auto always = make(Expr::Kind::kLiteral, line);
            always->literal = true;
            std::string end;
            n->branches.emplace_back(std::move(always), parse_body({"endgeneration"}, &end));
            expect_block_end();
            return n;
        }
        static const std::set<std::string> kEnds = {"endif",     "endfor", "endset", "endmacro",
                                                    "endfilter", "else",   "elif"};
        if (kEnds.count(kw)) throw_error("unexpected '{% " + kw + " %}'", line);
        throw_unsupported("tag '" + kw + "'", line);
    }

    std::unique_ptr<Node> parse_if(int line) {
        auto n = node(Node::Kind::kIf, line);
        ExprPtr cond = parse_expression();
        expect_block_end();
        std::string end;
        NodeList body = parse_body({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(body));
        while (end == "elif") {
            cond = parse_expression();
            expect_block_end();
            body = parse_body({"elif", "else", "endif"}, &end);
            n->branches.emplace_back(std::move(cond), std::move(body));
        }
        if (end == "else") {
            expect_block_end();
            n->else_body = parse_body({"endif"}, &end);
        }
        expect_block_end();
        return n;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        bool paren = is_op("(");
        if (paren) next();
        names.push_back(expect_name("a variable name"));
        while (is_op(",")) {
            next();
            names.push_back(expect_name("a variable name"));
        }
        if (paren) expect_op(")");
        return names;
    }

    std::unique_ptr<Node> parse_for(int line) {
        auto n = node(Node::Kind::kFor, line);
        n->targets = parse_targets();
        if (!is_name("in")) fail("'in'");
        next();
        n->expr = parse_tuple(/*with_condexpr=*/false);
        if (is_name("if")) {
            next();
            n->cond = parse_expression();
        }
        if (is_name("recursive")) throw_unsupported("recursive for loop", cur().line);
        expect_block_end();
        std::string end;
        n->body = parse_body({"else", "endfor"}, &end);
        if (end == "else") {
            expect_block_end();
            n->else_body = parse_body({"endfor"}, &end);
        }
        expect_block_end();
        return n;
    }

    std::unique_ptr<Node> parse_set(int line) {
        auto n = node(Node::Kind::kSet, line);
        n->targets.push_back(expect_name("a variable name"));
        if (is_op(".")) {
            next();
            n->attr = expect_name("an attribute name");
        } else {
            while (is_op(",")) {
                next();
                n->targets.push_back(expect_name("a variable name"));
            }
        }
        if (is_op("=")) {
            next();
            n->expr = parse_tuple();
            expect_block_end();
            return n;
        }
        if (cur().type != TT::kBlockEnd) fail("'=' or '%}'");
        if (n->targets.size() != 1 || !n->attr.empty()) {
            throw_error("a block set takes a single variable name", line);
        }
        next();
        n->kind = Node::Kind::kSetBlock;
        std::string end;
        n->body = parse_body({"endset"}, &end);
        expect_block_end();
        return n;
    }

    std::unique_ptr<Node> parse_macro(int line) {
        auto n = node(Node::Kind::kMacro, line);
        n->macro = std::make_unique<MacroNode>();
        n->macro->name = expect_name("a macro name");
        macro_names_.insert(n->macro->name);
        expect_op("(");
        while (!is_op(")")) {
            std::string param = expect_name("a parameter name");
            ExprPtr def;
            if (is_op("=")) {
                next();
                def = parse_expression();
            }
            n->macro->params.emplace_back(std::move(param), std::move(def));
            if (!is_op(")")) expect_op(",");
        }
        next();
        expect_block_end();
        std::string end;
        n->macro->body = parse_body({"endmacro"}, &end);
        if (cur().type == TT::kName) next();  // {% endmacro name %}
        expect_block_end();
        return n;
    }

    std::unique_ptr<Node> parse_filter_block(int line) {
        auto n = node(Node::Kind::kFilterBlock, line);
        ExprPtr placeholder;  // the body's text is the operand at run time
        n->expr = parse_filter(std::move(placeholder), line);
        expect_block_end();
        std::string end;
        n->body = parse_body({"endfilter"}, &end);
        expect_block_end();
        return n;
    }

    // ---- expressions ---------------------------------------------------------------

    bool at_expr_end() const {
        const Token& t = cur();
        return t.type == TT::kBlockEnd || t.type == TT::kVarEnd || t.type == TT::kEof ||
               (t.type == TT::kOp && (t.text == ")" || t.text == "]" || t.text == "}"));
    }

    // `a, b` without parentheses makes a tuple (in {{ }}, set and for).
    ExprPtr parse_tuple(bool with_condexpr = true) {
        int line = cur().line;
        ExprPtr first = with_condexpr ? parse_expression() : parse_or();
        if (!is_op(",")) return first;
        auto t = make(Expr::Kind::kTuple, line);
        t->args.push_back(std::move(first));
        while (is_op(",")) {
            next();
            if (at_expr_end() || is_name("if")) break;
            t->args.push_back(with_condexpr ? parse_expression() : parse_or());
        }
        return t;
    }

    ExprPtr parse_expression() {
        ExprPtr e = parse_or();
        while (is_name("if")) {
            int line = next().line;
            auto c = make(Expr::Kind::kCond, line);
            ExprPtr cond = parse_or();
            ExprPtr otherwise;
            if (is_name("else")) {
                next();
                otherwise = parse_expression();
            }
            c->args.push_back(std::move(cond));
            c->args.push_back(std::move(e));
            c->args.push_back(std::move(otherwise));
            e = std::move(c);
        }
        return e;
    }

    ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
        auto b = make(Expr::Kind::kBinary, line);
        b->name = std::move(op);
        b->args.push_back(std::move(l));
        b->args.push_back(std::move(r));
        return b;
    }

    ExprPtr parse_or() {
        ExprPtr l = parse_and();
        while (is_name("or")) {
            int line = next().line;
            l = binary("or", std::move(l), parse_and(), line);
        }
        return l;
    }

    ExprPtr parse_and() {
        ExprPtr l = parse_not();
        while (is_name("and")) {
            int line = next().line;
            l = binary("and", std::move(l), parse_not(), line);
        }
        return l;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            auto u = make(Expr::Kind::kUnary, next().line);
            u->name = "not";
            u->args.push_back(parse_not());
            return u;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        int line = cur().line;
        ExprPtr first = parse_math1();
        ExprPtr cmp;
        while (true) {
            std::string op;
            if (cur().type == TT::kOp &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
                op = next().text;
            } else if (is_name("in")) {
                next();
                op = "in";
            } else if (is_name("not") && peek().type == TT::kName && peek().text == "in") {
                next();
                next();
                op = "notin";
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(Expr::Kind::kCompare, line);
                cmp->args.push_back(std::move(first));
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    ExprPtr parse_math1() {
        ExprPtr l = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& t = next();
            l = binary(t.text, std::move(l), parse_concat(), t.line);
        }
        return l;
    }

    ExprPtr parse_concat() {
        ExprPtr l = parse_math2();
        while (is_op("~")) {
            int line = next().line;
            l = binary("~", std::move(l), parse_math2(), line);
        }
        return l;
    }

    ExprPtr parse_math2() {
        ExprPtr l = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& t = next();
            l = binary(t.text, std::move(l), parse_pow(), t.line);
        }
        return l;
    }

    ExprPtr parse_pow() {
        ExprPtr l = parse_unary(true);
        while (is_op("**")) {
            int line = next().line;
            l = binary("**", std::move(l), parse_unary(true), line);
        }
        return l;
    }

    ExprPtr parse_unary(bool with_filter) {
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            const Token& t = next();
            e = make(Expr::Kind::kUnary, t.line);
            e->name = t.text;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        switch (t.type) {
            case TT::kName: {
                next();
                auto e = make(Expr::Kind::kLiteral, line);
                if (t.text == "true" || t.text == "True") {
                    e->literal = true;
                } else if (t.text == "false" || t.text == "False") {
                    e->literal = false;
                } else if (t.text == "none" || t.text == "None") {
                    e->literal = nullptr;
                } else {
                    e->kind = Expr::Kind::kName;
                    e->name = t.text;
                }
                return e;
            }
            case TT::kString: {
                auto e = make(Expr::Kind::kLiteral, line);
                std::string s;
                while (cur().type == TT::kString) s += next().text;  // "a" "b" → "ab"
                e->literal = std::move(s);
                return e;
            }
            case TT::kInt:
            case TT::kFloat: {
                auto e = make(Expr::Kind::kLiteral, line);
                try {
                    if (t.type == TT::kInt) {
                        e->literal = static_cast<int64_t>(std::stoll(t.text));
                    } else {
                        e->literal = std::stod(t.text);
                    }
                } catch (const std::exception&) {
                    throw_error("number literal out of range: " + t.text, line);
                }
                next();
                return e;
            }
            case TT::kOp:
                if (t.text == "(") return parse_paren();
                if (t.text == "[") return parse_list();
                if (t.text == "{") return parse_dict();
                break;
            default:
                break;
        }
        fail("an expression");
    }

    ExprPtr parse_paren() {
        int line = next().line;
        if (is_op(")")) {
            next();
            return make(Expr::Kind::kTuple, line);
        }
        ExprPtr e = parse_tuple();
        expect_op(")");
        return e;
    }

    ExprPtr parse_list() {
        auto e = make(Expr::Kind::kList, next().line);
        while (!is_op("]")) {
            e->args.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
        }
        next();
        return e;
    }

    ExprPtr parse_dict() {
        auto e = make(Expr::Kind::kDict, next().line);
        while (!is_op("}")) {
            e->args.push_back(parse_expression());
            expect_op(":");
            e->args.push_back(parse_expression());
            if (!is_op("}")) expect_op(",");
        }
        next();
        return e;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (is_op(".")) {
                int line = next().line;
                if (cur().type == TT::kInt) {  // x.0 is x[0] in Jinja
                    auto s = make(Expr::Kind::kSubscript, line);
                    auto idx = make(Expr::Kind::kLiteral, line);
                    idx->literal = static_cast<int64_t>(std::stoll(next().text));
                    s->args.push_back(std::move(e));
                    s->args.push_back(std::move(idx));
                    e = std::move(s);
                    continue;
                }
                auto a = make(Expr::Kind::kAttr, line);
                a->name = expect_name("an attribute name");
                if (e->kind == Expr::Kind::kName && e->name == "loop" &&
                    (a->name == "previtem" || a->name == "nextitem" || a->name == "changed")) {
                    throw_unsupported("'loop." + a->name + "'", line);
                }
                a->args.push_back(std::move(e));
                e = std::move(a);
            } else if (is_op("[")) {
                e = parse_subscript(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr obj) {
        int line = next().line;
        ExprPtr parts[3];
        int n_colons = 0;
        if (!is_op(":")) parts[0] = parse_expression();
        while (is_op(":") && n_colons < 2) {
            next();
            ++n_colons;
            if (!is_op(":") && !is_op("]")) parts[n_colons] = parse_expression();
        }
        if (is_op(",")) throw_unsupported("tuple subscript", line);
        expect_op("]");
        auto s = make(n_colons ? Expr::Kind::kSlice : Expr::Kind::kSubscript, line);
        s->args.push_back(std::move(obj));
        s->args.push_back(std::move(parts[0]));
        if (n_colons) {
            s->args.push_back(std::move(parts[1]));
            s->args.push_back(std::move(parts[2]));
        }
        return s;
    }

    // Parses `(args, key=value)` into e->args (after any already there) and e->kwargs.
    void parse_call_args(Expr& e) {
        expect_op("(");
        while (!is_op(")")) {
            if (is_op("*") || is_op("**"))
                throw_unsupported("*args/**kwargs in a call", cur().line);
            if (cur().type == TT::kName && peek().type == TT::kOp && peek().text == "=") {
                std::string key = next().text;
                next();
                e.kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!e.kwargs.empty())
                    throw_error("positional argument after keyword argument", cur().line);
                e.args.push_back(parse_expression());
            }
            if (!is_op(")")) expect_op(",");
        }
        next();
    }

    ExprPtr parse_call(ExprPtr callee) {
        int line = cur().line;
        if (callee->kind == Expr::Kind::kAttr) {
            if (!is_method(callee->name)) throw_unsupported("method '" + callee->name + "'", line);
        } else if (callee->kind == Expr::Kind::kName) {
            called_names_.emplace_back(callee->name, line);
        } else {
            throw_unsupported("call of a computed value", line);
        }
        auto c = make(Expr::Kind::kCall, line);
        c->args.push_back(std::move(callee));
        parse_call_args(*c);
        return c;
    }

    std::string dotted_name() {
        std::string name = expect_name("a name");
        while (is_op(".")) {
            next();
            name += '.';
            name += expect_name("a name");
        }
        return name;
    }

    // `| name(args)`; operand may be null for a {% filter %} block.
    ExprPtr parse_filter(ExprPtr operand, int line) {
        std::string name = dotted_name();
        if (!is_filter(name)) throw_unsupported("filter '" + name + "'", line);
        auto f = make(Expr::Kind::kFilter, line);
        f->name = name;
        f->args.push_back(std::move(operand));
        if (is_op("(")) parse_call_args(*f);
        return f;
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (is_op("|")) {
                int line = next().line;
                e = parse_filter(std::move(e), line);
            } else if (is_name("is")) {
                int line = next().line;
                auto t = make(Expr::Kind::kTest, line);
                if (is_name("not")) {
                    next();
                    t->negated = true;
                }
                t->name = dotted_name();
                if (!is_test(t->name)) throw_unsupported("test '" + t->name + "'", line);
                t->args.push_back(std::move(e));
                const Token& c = cur();
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if ((c.type == TT::kName || c.type == TT::kString || c.type == TT::kInt ||
                            c.type == TT::kFloat || is_op("[") || is_op("{")) &&
                           !(c.type == TT::kName &&
                             (c.text == "else" || c.text == "or" || c.text == "and" ||
                              c.text == "if" || c.text == "is"))) {
                    // `x is divisibleby 3`: one argument without parentheses. (Jinja also
                    // stops at if/else/and/or; it rejects `is`.)
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    const std::vector<Token>& toks_;
    size_t pos_ = 0;
    std::set<std::string> macro_names_;
    std::vector<std::pair<std::string, int>> called_names_;
};

}  // namespace

NodeList parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace tessera::jinja
