// tokenizer/jinja/template.cpp — Template: compile = lex + parse, render = interpret; the
// boundary where internal JinjaError exceptions become Status values.

#include "tokenizer/jinja/template.h"

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace tessera::jinja {

struct Template::Impl {
    NodeList body;  // immutable after compile
};

Template::Template(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

namespace {

Status to_status(const JinjaError& e, const char* stage) {
    return Status(e.code(), std::string("chat template ") + stage + ": " + e.describe());
}

}  // namespace

StatusOr<Template> Template::compile(const std::string& source) {
    try {
        auto impl = std::make_unique<Impl>();
        impl->body = parse(tokenize(source));
        return Template(std::move(impl));
    } catch (const JinjaError& e) {
        return to_status(e, "syntax");
    } catch (const std::exception& e) {
        return Status::Internal(std::string("chat template syntax: ") + e.what());
    }
}

StatusOr<std::string> Template::render(const nlohmann::ordered_json& context) const {
    if (!context.is_object()) {
        return Status::InvalidArgument("template context must be a JSON object, got " +
                                       std::string(context.type_name()));
    }
    try {
        // Non-owning: the caller's context outlives this call, so values can point into it.
        std::shared_ptr<const Json> ctx(&context, [](const Json*) {});
        Interpreter interp(std::move(ctx));
        return interp.render(impl_->body);
    } catch (const JinjaError& e) {
        return to_status(e, "render");
    } catch (const std::exception& e) {
        return Status::Internal(std::string("chat template render: ") + e.what());
    }
}

StatusOr<std::string> Template::render(const nlohmann::json& context) const {
    return render(nlohmann::ordered_json(context));
}

}  // namespace tessera::jinja
