// tokenizer/jinja/interpreter.cpp — template execution with Jinja2 semantics
// (interpreter.h).

#include "tokenizer/jinja/interpreter.h"

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"

namespace tessera::jinja {
namespace {

constexpr int kMaxMacroDepth = 64;  // a runaway recursive macro fails instead of overflowing

}  // namespace

// What one render may take, whatever the template and the request's data: a chat template
// runs on every request, so a template loop over user data (nested loops over a long message
// list, a huge repeated string) must fail with a 400, not hold the server's tokenizer.
const RenderLimits kRenderLimits{};

namespace {

[[noreturn]] void undefined_error(const Value& v) {
    throw_error("'" + v.undefined_name() + "' is undefined");
}

[[noreturn]] void operand_error(const std::string& op, const Value& a, const Value& b) {
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    throw_error("unsupported operand type(s) for " + op + ": '" + py_type_name(a) + "' and '" +
                py_type_name(b) + "'");
}

bool numeric(const Value& v) { return v.is_number() || v.is_bool(); }
bool integral(const Value& v) { return v.is_int() || v.is_bool(); }

// Python floor division and modulo (the result takes the divisor's sign).
int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

Value repeat(const Value& seq, int64_t n) {
    if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.str_ref();
        return Value(Json(out));
    }
    Json out = Json::array();
    for (int64_t i = 0; i < n; ++i) {
        for (const Json& j : seq.json()) out.push_back(j);
    }
    return Value(std::move(out));
}

bool contains(const Value& container, const Value& item) {
    if (container.is_undefined()) return false;  // Undefined iterates as empty
    if (container.is_string()) {
        if (!item.is_string()) {
            throw_error("'in <string>' requires string as left operand, not " + py_type_name(item));
        }
        return container.str_ref().find(item.str_ref()) != std::string::npos;
    }
    if (container.is_array()) {
        for (const Json& j : container.json()) {
            if (py_equal(container.element(j), item)) return true;
        }
        return false;
    }
    if (container.is_object()) {
        return item.is_string() && container.json().contains(item.str_ref());
    }
    if (container.is_namespace()) return item.is_string() && container.ns().find(item.str_ref());
    throw_error("argument of type '" + py_type_name(container) + "' is not iterable");
}

}  // namespace

Interpreter::Interpreter(std::shared_ptr<const Json> context) : context_(std::move(context)) {
    frames_.emplace_back();
}

std::string Interpreter::render(const NodeList& body) {
    std::string out;
    exec_list(body, out);
    return out;
}

Value Interpreter::lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
        auto found = it->find(name);
        if (found != it->end()) return found->second;
    }
    if (context_->is_object()) {
        auto it = context_->find(name);
        if (it != context_->end()) return Value::ref(context_, &*it);
    }
    return Value::undefined(name);
}

Interpreter::Flow Interpreter::exec_list(const NodeList& body, std::string& out) {
    for (const auto& n : body) {
        Flow f = exec(*n, out);
        if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
}

void Interpreter::count_step() {
    if (++steps_ > kRenderLimits.max_steps)
        throw JinjaError(StatusCode::kInvalidArgument,
                         "rendering stopped after " + std::to_string(kRenderLimits.max_steps) +
                             " steps (the chat template's step limit)");
}

void Interpreter::check_output(const std::string& out) const {
    if (out.size() > kRenderLimits.max_output_bytes)
        throw JinjaError(StatusCode::kInvalidArgument,
                         "the rendered prompt exceeds " + std::to_string(kRenderLimits.max_output_bytes >> 20) +
                             " MiB (the chat template's output limit)");
}

Interpreter::Flow Interpreter::exec(const Node& node, std::string& out) {
    count_step();
    struct Depth {
        int& d;
        explicit Depth(int& depth) : d(depth) {
            if (++d > kRenderLimits.max_depth)
                throw JinjaError(StatusCode::kInvalidArgument,
                                 "the chat template nests deeper than " + std::to_string(kRenderLimits.max_depth) +
                                     " blocks and expressions");
        }
        ~Depth() { --d; }
    } depth(depth_);
    try {
        switch (node.kind) {
            case Node::Kind::kText:
                out += node.text;
                check_output(out);
                break;
            case Node::Kind::kOutput:
                out += eval(*node.expr).str();
                check_output(out);
                break;
            case Node::Kind::kIf:
                for (const auto& [cond, body] : node.branches) {
                    if (eval(*cond).truthy()) return exec_list(body, out);
                }
                return exec_list(node.else_body, out);
            case Node::Kind::kFor:
                exec_for(node, out);
                break;
            case Node::Kind::kSet:
                exec_set(node);
                break;
            case Node::Kind::kSetBlock: {
                std::string captured;
                exec_list(node.body, captured);
                frames_.back()[node.targets[0]] = Value(Json(std::move(captured)));
                break;
            }
            case Node::Kind::kBreak:
                return Flow::kBreak;
            case Node::Kind::kContinue:
                return Flow::kContinue;
            case Node::Kind::kMacro:
                frames_.back()[node.macro->name] = Value::from_macro(node.macro.get());
                break;
            case Node::Kind::kFilterBlock: {
                std::string captured;
                exec_list(node.body, captured);
                std::vector<Value> args;
                std::vector<std::pair<std::string, Value>> kwargs;
                eval_args(*node.expr, 1, args, kwargs);
                out += apply_filter(node.expr->name, Value(Json(std::move(captured))), args, kwargs)
                           .str();
                check_output(out);
                break;
            }
        }
    } catch (JinjaError& e) {
        if (e.line() == 0) e.set_line(node.line);
        throw;
    }
    return Flow::kNormal;
}

void Interpreter::assign(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
        frames_.back()[targets[0]] = v;
        return;
    }
    if (!v.is_array() || v.json().size() != targets.size()) {
        throw_error("cannot unpack " + py_type_name(v) + " into " + std::to_string(targets.size()) +
                        " variables",
                    line);
    }
    for (size_t i = 0; i < targets.size(); ++i) {
        frames_.back()[targets[i]] = v.element(v.json()[i]);
    }
}

void Interpreter::exec_set(const Node& node) {
    Value v = eval(*node.expr);
    if (node.attr.empty()) {
        assign(node.targets, v, node.line);
        return;
    }
    Value target = lookup(node.targets[0]);
    if (!target.is_namespace()) {
        throw_error("cannot assign attribute '" + node.attr + "' on non-namespace object '" +
                        node.targets[0] + "'",
                    node.line);
    }
    target.ns().set(node.attr, std::move(v));
}

void Interpreter::exec_for(const Node& node, std::string& out) {
    Value iterable = eval(*node.expr);
    std::vector<Value> items;
    if (iterable.is_array()) {
        for (const Json& j : iterable.json()) items.push_back(iterable.element(j));
    } else if (iterable.is_object()) {
        for (auto it = iterable.json().begin(); it != iterable.json().end(); ++it) {
            items.emplace_back(Json(it.key()));
        }
    } else if (iterable.is_string()) {
        for (auto& c : utf8_chars(iterable.str_ref())) items.emplace_back(Json(c));
    } else if (!iterable.is_undefined()) {  // Undefined iterates as empty
        throw_error("'" + py_type_name(iterable) + "' object is not iterable", node.line);
    }
    if (node.cond) {
        // `for x in xs if cond`: filtered before the loop, so loop.length counts survivors.
        std::vector<Value> kept;
        for (const Value& item : items) {
            frames_.emplace_back();
            assign(node.targets, item, node.line);
            bool keep = eval(*node.cond).truthy();
            frames_.pop_back();
            if (keep) kept.push_back(item);
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        exec_list(node.else_body, out);
        return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
        count_step();  // an empty body still iterates
        frames_.emplace_back();
        Json loop = {
            {"index", i + 1},  {"index0", i},        {"revindex", n - i}, {"revindex0", n - i - 1},
            {"first", i == 0}, {"last", i == n - 1}, {"length", n},       {"depth", 1},
            {"depth0", 0}};
        frames_.back()["loop"] = Value(std::move(loop));
        assign(node.targets, items[static_cast<size_t>(i)], node.line);
        Flow f;
        try {
            f = exec_list(node.body, out);
        } catch (...) {
            frames_.pop_back();
            throw;
        }
        frames_.pop_back();
        if (f == Flow::kBreak) break;
    }
}

Value Interpreter::eval(const Expr& e) {
    count_step();
    if (++depth_ > kRenderLimits.max_depth) {
        --depth_;
        throw JinjaError(StatusCode::kInvalidArgument, "the chat template nests deeper than " +
                                                           std::to_string(kRenderLimits.max_depth) +
                                                           " blocks and expressions");
    }
    struct Leave {
        int& d;
        ~Leave() { --d; }
    } leave{depth_};
    try {
        return eval_inner(e);
    } catch (JinjaError& err) {
        if (err.line() == 0) err.set_line(e.line);
        throw;
    }
}

void Interpreter::eval_args(const Expr& e, size_t first, std::vector<Value>& args,
                            std::vector<std::pair<std::string, Value>>& kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v));
}

Value Interpreter::eval_inner(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::kLiteral:
            return Value::ref(nullptr, &e.literal);  // the tree outlives us
        case Expr::Kind::kName:
            return lookup(e.name);
        case Expr::Kind::kList:
        case Expr::Kind::kTuple: {
            Json arr = Json::array();
            for (const auto& item : e.args) arr.push_back(eval(*item).to_json());
            return Value(std::move(arr));
        }
        case Expr::Kind::kDict: {
            Json obj = Json::object();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                obj[eval(*e.args[i]).str()] = eval(*e.args[i + 1]).to_json();
            }
            return Value(std::move(obj));
        }
        case Expr::Kind::kUnary: {
            Value v = eval(*e.args[0]);
            if (e.name == "not") return Value(Json(!v.truthy()));
            if (!numeric(v)) {
                if (v.is_undefined()) undefined_error(v);
                throw_error("bad operand type for unary " + e.name + ": '" + py_type_name(v) + "'");
            }
            if (e.name == "+") return v;
            if (integral(v)) return Value(Json(-to_int(v, "-")));
            return Value(Json(-v.json().get<double>()));
        }
        case Expr::Kind::kBinary:
            return eval_binary(e);
        case Expr::Kind::kCompare:
            return eval_compare(e);
        case Expr::Kind::kAttr: {
            Value obj = eval(*e.args[0]);
            if (obj.is_undefined()) undefined_error(obj);
            if (obj.is_namespace()) {
                const Value* v = obj.ns().find(e.name);
                return v ? *v : Value::undefined(e.name);
            }
            return obj.member(e.name);  // non-dicts have no data attributes → Undefined
        }
        case Expr::Kind::kSubscript:
            return eval_subscript(eval(*e.args[0]), eval(*e.args[1]));
        case Expr::Kind::kSlice:
            return eval_slice(e);
        case Expr::Kind::kCall:
            return eval_call(e);
        case Expr::Kind::kFilter: {
            Value operand = eval(*e.args[0]);
            std::vector<Value> args;
            std::vector<std::pair<std::string, Value>> kwargs;
            eval_args(e, 1, args, kwargs);
            return apply_filter(e.name, operand, args, kwargs);
        }
        case Expr::Kind::kTest: {
            Value operand = eval(*e.args[0]);
            std::vector<Value> args;
            std::vector<std::pair<std::string, Value>> kwargs;
            eval_args(e, 1, args, kwargs);
            return Value(Json(apply_test(e.name, operand, args) != e.negated));
        }
        case Expr::Kind::kCond:
            if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
            return e.args[2] ? eval(*e.args[2]) : Value::undefined("else branch");
    }
    throw_error("internal: unknown expression kind");
}

Value Interpreter::eval_binary(const Expr& e) {
    const std::string& op = e.name;
    Value a = eval(*e.args[0]);
    // and / or short-circuit and return an operand, as in Python.
    if (op == "and") return a.truthy() ? eval(*e.args[1]) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.args[1]);
    Value b = eval(*e.args[1]);
    if (op == "~") return Value(Json(a.str() + b.str()));
    if (op == "+") {
        if (a.is_string() && b.is_string()) return Value(Json(a.str_ref() + b.str_ref()));
        if (a.is_array() && b.is_array()) {
            Json out = a.json();
            for (const Json& j : b.json()) out.push_back(j);
            return Value(std::move(out));
        }
    }
    if (op == "*") {
        if ((a.is_string() || a.is_array()) && integral(b)) return repeat(a, to_int(b, "*"));
        if ((b.is_string() || b.is_array()) && integral(a)) return repeat(b, to_int(a, "*"));
    }
    if (op == "%" && a.is_string()) throw_unsupported("'%' string formatting");
    if (!numeric(a) || !numeric(b)) operand_error(op, a, b);
    const bool ints = integral(a) && integral(b);
    if (ints && op != "/") {
        // Python's integers do not overflow; where int64 would, the result is computed in
        // double below (an approximation of the big integer, never undefined behaviour).
        int64_t x = to_int(a, op.c_str()), y = to_int(b, op.c_str()), r = 0;
        if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value(Json(r));
        if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value(Json(r));
        if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value(Json(r));
        if ((op == "//" || op == "%") && y == 0) throw_error("integer division or modulo by zero");
        const bool min_by_minus_one = x == INT64_MIN && y == -1;
        if (op == "//" && !min_by_minus_one) return Value(Json(floor_div(x, y)));
        if (op == "%") return Value(Json(min_by_minus_one ? 0 : x - floor_div(x, y) * y));
        if (op == "**" && y >= 0) {
            // Square-and-multiply: O(log y) steps, however large the exponent.
            int64_t result = 1, base = x;
            bool overflow = false;
            for (int64_t e = y; e > 0 && !overflow; e >>= 1) {
                if ((e & 1) != 0) overflow |= __builtin_mul_overflow(result, base, &result);
                if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
            }
            if (!overflow) return Value(Json(result));
        }
    }
    double x = to_double(a, op.c_str()), y = to_double(b, op.c_str());
    if (op == "+") return Value(Json(x + y));
    if (op == "-") return Value(Json(x - y));
    if (op == "*") return Value(Json(x * y));
    if (op == "**") return Value(Json(std::pow(x, y)));
    if (y == 0.0) throw_error("division by zero");
    if (op == "/") return Value(Json(x / y));
    if (op == "//") return Value(Json(std::floor(x / y)));
    if (op == "%") {
        double r = std::fmod(x, y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value(Json(r));
    }
    throw_error("internal: unknown operator '" + op + "'");
}

Value Interpreter::eval_compare(const Expr& e) {
    Value left = eval(*e.args[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") {
            r = py_equal(left, right);
        } else if (op == "!=") {
            r = !py_equal(left, right);
        } else if (op == "in" || op == "notin") {
            r = contains(right, left) == (op == "in");
        } else {
            if (left.is_undefined()) undefined_error(left);
            if (right.is_undefined()) undefined_error(right);
            const Json a = left.to_json(), b = right.to_json();
            if (op == "<") {
                r = py_less(a, b);
            } else if (op == ">") {
                r = py_less(b, a);
            } else if (op == "<=") {
                r = !py_less(b, a);
            } else {
                r = !py_less(a, b);
            }
        }
        if (!r) return Value(Json(false));  // chained: a < b < c is a < b and b < c
        left = std::move(right);
    }
    return Value(Json(true));
}

Value Interpreter::eval_subscript(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_object())
        return key.is_string() ? obj.member(key.str_ref()) : Value::undefined(key.str());
    if (obj.is_namespace() && key.is_string()) {
        const Value* v = obj.ns().find(key.str_ref());
        return v ? *v : Value::undefined(key.str_ref());
    }
    if ((obj.is_array() || obj.is_string()) && integral(key)) {
        int64_t i = to_int(key, "index");
        if (obj.is_array()) {
            int64_t n = static_cast<int64_t>(obj.json().size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) return Value::undefined("index " + std::to_string(i));
            return obj.element(obj.json()[static_cast<size_t>(i)]);
        }
        std::vector<std::string> chars = utf8_chars(obj.str_ref());
        int64_t n = static_cast<int64_t>(chars.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("index " + std::to_string(i));
        return Value(Json(chars[static_cast<size_t>(i)]));
    }
    // Jinja turns failed lookups (None[0], 'abc'['x']) into Undefined.
    return Value::undefined(key.str());
}

Value Interpreter::eval_slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    if (obj.is_undefined()) undefined_error(obj);
    if (!obj.is_array() && !obj.is_string()) {
        // Built with += : GCC 12 warns falsely (-Wrestrict) on "'" + std::string&& here.
        std::string msg;
        msg += '\'';
        msg += py_type_name(obj);
        msg += "' object is not subscriptable";
        throw_error(msg);
    }
    std::vector<std::string> chars;
    if (obj.is_string()) chars = utf8_chars(obj.str_ref());
    const int64_t n = obj.is_string() ? static_cast<int64_t>(chars.size())
                                      : static_cast<int64_t>(obj.json().size());
    auto bound = [&](const ExprPtr& x, bool& present) -> int64_t {
        present = false;
        if (!x) return 0;
        Value v = eval(*x);
        if (v.is_null() || v.is_undefined()) return 0;
        present = true;
        return to_int(v, "slice index");
    };
    bool has_start, has_stop, has_step;
    int64_t start = bound(e.args[1], has_start), stop = bound(e.args[2], has_stop);
    int64_t step = bound(e.args[3], has_step);
    if (!has_step) step = 1;
    if (step == 0) throw_error("slice step cannot be zero");
    // Python's slice index adjustment (PySlice_AdjustIndices).
    const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
    auto adjust = [&](int64_t v, bool present, int64_t fallback) {
        if (!present) return fallback;
        if (v < 0) {
            v += n;
            return v < lower ? lower : v;
        }
        return v > upper ? upper : v;
    };
    start = adjust(start, has_start, step > 0 ? lower : upper);
    stop = adjust(stop, has_stop, step > 0 ? upper : lower);
    if (obj.is_string()) {
        std::string out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            out += chars[static_cast<size_t>(i)];
        return Value(Json(out));
    }
    Json out = Json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(obj.json()[static_cast<size_t>(i)]);
    }
    return Value(std::move(out));
}

Value Interpreter::eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs;
    if (callee.kind == Expr::Kind::kAttr) {
        Value obj = eval(*callee.args[0]);
        eval_args(e, 1, args, kwargs);
        return call_method(obj, callee.name, args, kwargs);
    }
    eval_args(e, 1, args, kwargs);
    Value fn = lookup(callee.name);
    if (fn.is_macro()) return call_macro(*fn.macro(), args, kwargs);
    if (is_global_function(callee.name)) return call_global(callee.name, args, kwargs);
    if (fn.is_undefined()) undefined_error(fn);
    throw_error("'" + py_type_name(fn) + "' object is not callable");
}

Value Interpreter::call_macro(const MacroNode& macro, const std::vector<Value>& args,
                              const std::vector<std::pair<std::string, Value>>& kwargs) {
    if (args.size() > macro.params.size()) {
        throw_error("macro '" + macro.name + "' takes " + std::to_string(macro.params.size()) +
                    " arguments, got " + std::to_string(args.size()));
    }
    if (macro_depth_ >= kMaxMacroDepth)
        throw_error("macro recursion too deep in '" + macro.name + "'");
    // A macro sees the top-level frame and its parameters, not the caller's locals.
    std::vector<Frame> saved;
    saved.swap(frames_);
    frames_.push_back(saved.front());
    frames_.emplace_back();
    struct Restore {
        Interpreter* self;
        std::vector<Frame>* saved;
        ~Restore() {
            self->frames_.swap(*saved);
            --self->macro_depth_;
        }
    } restore{this, &saved};
    ++macro_depth_;
    for (size_t i = 0; i < macro.params.size(); ++i) {
        const auto& [pname, def] = macro.params[i];
        Value v = Value::undefined(pname);
        if (i < args.size()) {
            v = args[i];
        } else {
            bool found = false;
            for (const auto& [k, kv] : kwargs) {
                if (k == pname) {
                    v = kv;
                    found = true;
                }
            }
            if (!found && def) v = eval(*def);
        }
        frames_.back()[pname] = v;
    }
    for (const auto& [k, kv] : kwargs) {
        bool known = false;
        for (const auto& p : macro.params) known = known || p.first == k;
        if (!known) throw_error("macro '" + macro.name + "' has no parameter '" + k + "'");
    }
    std::string out;
    exec_list(macro.body, out);
    return Value(Json(std::move(out)));
}

}  // namespace tessera::jinja
