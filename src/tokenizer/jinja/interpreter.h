#pragma once
// tokenizer/jinja/interpreter.h — walks a parsed template (ast.h) and writes its output.
// Scoping follows Jinja: each for-loop iteration gets a fresh frame (so `set` inside a loop
// does not leak out, hence namespace()), `if` does not, and a macro sees the top-level
// frame plus its parameters. One Interpreter per render call; not shared between threads.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace tessera::jinja {

// Bounds of one render (steps: nodes executed plus expressions evaluated).
struct RenderLimits {
    std::int64_t max_steps = 2'000'000;
    std::size_t max_output_bytes = std::size_t{32} << 20;
    int max_depth = 256;
};
extern const RenderLimits kRenderLimits;

class Interpreter {
 public:
    // `context` is a JSON object of top-level variables; it must outlive the render, and the
    // tree must outlive the Interpreter (values may point into both without copying).
    explicit Interpreter(std::shared_ptr<const Json> context);

    // Throws JinjaError (with the line of the failing node) on error.
    std::string render(const NodeList& body);

 private:
    enum class Flow { kNormal, kBreak, kContinue };
    using Frame = std::unordered_map<std::string, Value>;

    Flow exec_list(const NodeList& body, std::string& out);
    Flow exec(const Node& node, std::string& out);
    void exec_for(const Node& node, std::string& out);
    void exec_set(const Node& node);
    void assign(const std::vector<std::string>& targets, const Value& v, int line);

    Value eval(const Expr& e);
    Value eval_inner(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_compare(const Expr& e);
    Value eval_subscript(const Value& obj, const Value& key);
    Value eval_slice(const Expr& e);
    Value eval_call(const Expr& e);
    Value call_macro(const MacroNode& macro, const std::vector<Value>& args,
                     const std::vector<std::pair<std::string, Value>>& kwargs);
    void eval_args(const Expr& e, size_t first, std::vector<Value>& args,
                   std::vector<std::pair<std::string, Value>>& kwargs);
    Value lookup(const std::string& name) const;
    void count_step();                             // throws past kRenderLimits.max_steps
    void check_output(const std::string& out) const;  // throws past max_output_bytes

    std::shared_ptr<const Json> context_;
    std::vector<Frame> frames_;  // frames_[0]: top-level sets; back(): innermost
    int macro_depth_ = 0;
    std::int64_t steps_ = 0;
    int depth_ = 0;  // exec + eval nesting
};

}  // namespace tessera::jinja
