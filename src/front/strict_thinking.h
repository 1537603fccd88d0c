#pragma once
// front/strict_thinking.h — --enable-strict-thinking (SGLang's reasoner_grammar_backend.py
// ReasonerGrammarBackend with token filtering): the tokens a request may write inside its
// reasoning, which the scheduler hands the sampler until the think-end token comes.

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "server/reasoning_parser.h"
#include "tokenizer/tokenizer.h"

namespace tessera::front {

// Every token of [0, vocab_size) but those the parser's think_excluded_tokens encode to (all of
// a marker's pieces when it is not one token, as SGLang bans them); bit t of word t / 32. Null
// when the parser excludes nothing (SGLang then filters nothing). Fails as SGLang when the
// think-end text is not exactly one token, or an excluded text encodes to nothing.
StatusOr<std::shared_ptr<const std::vector<std::uint32_t>>> strict_thinking_filter(
    const server::ReasoningFormat& format, const tokenizer::Tokenizer& tokenizer, std::int64_t vocab_size);

// SGLANG_MAX_THINK_TOKENS: the budget of a request that gives no thinking_budget (-1 unset).
StatusOr<std::int64_t> default_thinking_budget();

}  // namespace tessera::front
