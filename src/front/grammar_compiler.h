#pragma once
// front/grammar_compiler.h — turns a request's regex, JSON schema or EBNF grammar into the TokenConstraint
// the scheduler walks (SGLang's grammar backend: compile, cache by the grammar's text, hand
// each request a fresh matcher). Compiling happens on the submitting (HTTP) thread, so a bad
// pattern is a 400 before the request is queued; the compiled automaton then grows lazily on
// the scheduler thread, which is the only one that walks it.
// Thread-safe: constraint() may be called from any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/json_schema.h"
#include "grammar/token_grammar.h"
#include "scheduler/token_constraint.h"
#include "server/backend.h"
#include "tokenizer/tokenizer.h"

namespace tessera::front {

class GrammarCompiler {
 public:
    // `tokenizer` must outlive the compiler.
    GrammarCompiler(const tokenizer::Tokenizer& tokenizer, grammar::JsonWhitespace json_whitespace);

    // A matcher at the start of `constraint`'s grammar; `stop_tokens` end the output where a
    // match may end. InvalidArgument for a regex or schema the backend does not take.
    StatusOr<std::shared_ptr<scheduler::TokenConstraint>> constraint(const server::OutputConstraint& constraint,
                                                                     std::vector<std::int32_t> stop_tokens);

 private:
    // Compiled grammars kept for reuse; past this many the cache starts over. Each may grow to
    // its DFA bound (20 MiB) and its mask cache (1024 masks of vocab / 8 bytes).
    static constexpr std::size_t kMaxCachedGrammars = 16;

    const tokenizer::Tokenizer& tokenizer_;
    const grammar::JsonWhitespace json_whitespace_;
    std::mutex mu_;
    std::shared_ptr<const grammar::Vocabulary> vocabulary_;                        // GUARDED_BY(mu_), on first use
    std::map<std::string, std::shared_ptr<grammar::CompiledGrammar>> compiled_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::front
