#pragma once
// grammar/token_grammar.h — a compiled grammar over a tokenizer's vocabulary, and the matcher
// one request walks through it (the roles of xgrammar's CompiledGrammar and GrammarMatcher).
// The mask of a state is the set of tokens whose bytes keep the output a prefix of some match:
// found by walking every token's bytes through the lazy DFA, in sorted order so that shared
// prefixes are walked once, and cached per DFA state. Stop tokens are allowed where a match
// may end (and are all that is left once the match cannot go on).
// Not thread-safe: a CompiledGrammar and its matchers are used from one thread (the scheduler's).

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/lazy_dfa.h"

namespace tessera::grammar {

// Bit t (word t / 32, bit t % 32) set: token t is allowed.
using TokenBitmask = std::vector<std::uint32_t>;
inline bool bitmask_allows(const TokenBitmask& mask, std::int64_t token) {
    const auto word = static_cast<std::size_t>(token >> 5);
    return token >= 0 && word < mask.size() && ((mask[word] >> (token & 31)) & 1u);
}

// The vocabulary as the grammar sees it: each token's bytes, with the tokens that never
// appear in constrained text (special tokens, empty ones) left out. Immutable; shared.
class Vocabulary {
 public:
    // token_bytes[id]: what the token decodes to; special[id]: a special (control) token.
    // leading_spaces_stripped: spaces the detokenizer drops from the start of an output
    // (SentencePiece's Strip decoder), which the grammar then does not see either.
    Vocabulary(std::vector<std::string> token_bytes, const std::vector<bool>& special,
               int leading_spaces_stripped = 0);
    int leading_spaces_stripped() const { return leading_spaces_stripped_; }
    std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
    const std::string& bytes(std::int32_t id) const { return bytes_[static_cast<std::size_t>(id)]; }
    bool usable(std::int32_t id) const { return id >= 0 && id < size() && usable_[static_cast<std::size_t>(id)]; }

 private:
    friend class CompiledGrammar;
    std::vector<std::string> bytes_;
    std::vector<bool> usable_;
    std::vector<std::int32_t> sorted_;   // usable ids, by their bytes
    std::vector<std::uint32_t> lcp_;     // [i]: common prefix of sorted_[i] and sorted_[i - 1]
    std::size_t max_len_ = 0;
    int leading_spaces_stripped_ = 0;
};

class CompiledGrammar {
 public:
    CompiledGrammar(ByteNfa nfa, std::shared_ptr<const Vocabulary> vocabulary);

    // The usable tokens that may follow in `state` (stop tokens not included), the first
    // `strip` spaces of the output still to be dropped by the detokenizer.
    StatusOr<std::shared_ptr<const TokenBitmask>> mask(std::int32_t state, int strip = 0);
    LazyDfa& dfa() { return dfa_; }
    const Vocabulary& vocabulary() const { return *vocabulary_; }

 private:
    // Masks kept per grammar; past this many the cache starts over (a few MB for a 150k vocabulary).
    static constexpr std::size_t kMaxCachedMasks = 1024;
    LazyDfa dfa_;
    std::shared_ptr<const Vocabulary> vocabulary_;
    StatusOr<std::shared_ptr<TokenBitmask>> walk_all(std::int32_t state);
    std::unordered_map<std::int64_t, std::shared_ptr<const TokenBitmask>> masks_;  // by state, strip
};

class GrammarMatcher {
 public:
    GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<std::int32_t> stop_tokens);

    // The tokens allowed next. An error when the automaton outgrew its bound, or when no token
    // of the vocabulary can continue the output (a pattern the vocabulary cannot spell).
    StatusOr<std::shared_ptr<const TokenBitmask>> allowed_tokens();
    // Advances by a sampled token; false when the grammar does not allow it.
    bool accept(std::int32_t token);
    // A stop token was accepted where the match may end.
    bool terminated() const { return terminated_; }
    // The output so far is a whole match (a stop token may come).
    bool can_stop() const;

 private:
    bool is_stop(std::int32_t token) const;

    std::shared_ptr<CompiledGrammar> grammar_;
    std::vector<std::int32_t> stop_tokens_;
    std::int32_t state_;
    int strip_;  // leading spaces of the output the detokenizer will still drop
    bool terminated_ = false;
};

}  // namespace tessera::grammar
