// front/grammar_compiler.cpp — see grammar_compiler.h.

#include "front/grammar_compiler.h"

#include "grammar/ebnf.h"
#include "grammar/structural_tag.h"

namespace tessera::front {
namespace {

using ConstraintPtr = std::shared_ptr<scheduler::TokenConstraint>;

class GrammarConstraint final : public scheduler::TokenConstraint {
 public:
    GrammarConstraint(std::shared_ptr<grammar::CompiledGrammar> grammar, std::vector<std::int32_t> stop_tokens)
        : matcher_(std::move(grammar), std::move(stop_tokens)) {}
    StatusOr<std::shared_ptr<const std::vector<std::uint32_t>>> allowed_tokens() override {
        return matcher_.allowed_tokens();
    }
    bool accept(std::int32_t token) override { return matcher_.accept(token); }
    bool terminated() const override { return matcher_.terminated(); }

 private:
    grammar::GrammarMatcher matcher_;
};

}  // namespace

GrammarCompiler::GrammarCompiler(const tokenizer::Tokenizer& tokenizer, grammar::JsonWhitespace json_whitespace)
    : tokenizer_(tokenizer), json_whitespace_(std::move(json_whitespace)) {}

StatusOr<std::shared_ptr<scheduler::TokenConstraint>> GrammarCompiler::constraint(
    const server::OutputConstraint& constraint, std::vector<std::int32_t> stop_tokens) {
    using Kind = server::OutputConstraint::Kind;
    const char* kind = constraint.kind == Kind::kJsonSchema      ? "json_schema"
                       : constraint.kind == Kind::kEbnf          ? "ebnf"
                       : constraint.kind == Kind::kStructuralTag ? "structural_tag"
                                                                 : "regex";
    const std::string key = std::string(kind) + ":" + constraint.text;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (const auto it = compiled_.find(key); it != compiled_.end())
            return ConstraintPtr(std::make_shared<GrammarConstraint>(it->second, std::move(stop_tokens)));
    }
    std::string regex = constraint.text;
    if (constraint.kind == Kind::kJsonSchema) {
        TSR_ASSIGN_OR_RETURN(regex, grammar::json_schema_to_regex(constraint.text, json_whitespace_));
    } else if (constraint.kind == Kind::kEbnf) {
        TSR_ASSIGN_OR_RETURN(regex, grammar::ebnf_to_regex(constraint.text));
    }
    auto nfa = constraint.kind == Kind::kStructuralTag
                   ? grammar::structural_tag_nfa(constraint.text, json_whitespace_)
                   : grammar::compile_regex(regex);
    if (!nfa.ok()) return Status::InvalidArgument(std::string(kind) + ": " + nfa.status().message());
    std::lock_guard<std::mutex> lock(mu_);
    if (!vocabulary_) {
        const auto n = static_cast<std::int32_t>(tokenizer_.vocab_size());
        std::vector<std::string> bytes(static_cast<std::size_t>(n));
        std::vector<bool> special(static_cast<std::size_t>(n));
        for (std::int32_t id = 0; id < n; ++id) {
            bytes[static_cast<std::size_t>(id)] = tokenizer_.token_bytes(id);
            special[static_cast<std::size_t>(id)] = tokenizer_.is_special(id);
        }
        vocabulary_ = std::make_shared<grammar::Vocabulary>(
            std::move(bytes), special, static_cast<int>(tokenizer_.leading_spaces_stripped()));
    }
    auto compiled = std::make_shared<grammar::CompiledGrammar>(std::move(nfa.value()), vocabulary_);
    if (compiled_.size() >= kMaxCachedGrammars) compiled_.clear();
    compiled_.emplace(key, compiled);
    return ConstraintPtr(std::make_shared<GrammarConstraint>(std::move(compiled), std::move(stop_tokens)));
}

}  // namespace tessera::front
