// grammar/token_grammar.cpp — see token_grammar.h.

#include "grammar/token_grammar.h"

#include <algorithm>
#include <fmt/format.h>
#include <numeric>

namespace tessera::grammar {

namespace {

// How many of a token's first bytes are spaces the detokenizer drops (at most `strip`).
std::size_t stripped_spaces(std::string_view bytes, int strip) {
    std::size_t k = 0;
    while (k < bytes.size() && static_cast<int>(k) < strip && bytes[k] == ' ') ++k;
    return k;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, const std::vector<bool>& special,
                       int leading_spaces_stripped)
    : bytes_(std::move(token_bytes)), usable_(bytes_.size(), false), leading_spaces_stripped_(leading_spaces_stripped) {
    for (std::size_t id = 0; id < bytes_.size(); ++id) {
        if (bytes_[id].empty() || (id < special.size() && special[id])) continue;
        usable_[id] = true;
        sorted_.push_back(static_cast<std::int32_t>(id));
        max_len_ = std::max(max_len_, bytes_[id].size());
    }
    std::sort(sorted_.begin(), sorted_.end(), [&](std::int32_t a, std::int32_t b) {
        return bytes_[static_cast<std::size_t>(a)] < bytes_[static_cast<std::size_t>(b)];
    });
    lcp_.resize(sorted_.size(), 0);
    for (std::size_t i = 1; i < sorted_.size(); ++i) {
        const std::string& a = bytes_[static_cast<std::size_t>(sorted_[i - 1])];
        const std::string& b = bytes_[static_cast<std::size_t>(sorted_[i])];
        std::uint32_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        lcp_[i] = n;
    }
}

CompiledGrammar::CompiledGrammar(ByteNfa nfa, std::shared_ptr<const Vocabulary> vocabulary)
    : dfa_(std::move(nfa)), vocabulary_(std::move(vocabulary)) {}

StatusOr<std::shared_ptr<const TokenBitmask>> CompiledGrammar::mask(std::int32_t state, int strip) {
    const std::int64_t key = static_cast<std::int64_t>(state) * 8 + std::min(strip, 7);
    if (const auto it = masks_.find(key); it != masks_.end()) return it->second;
    TSR_ASSIGN_OR_RETURN(std::shared_ptr<TokenBitmask> mask, walk_all(state));
    if (strip > 0) {
        // At the start of the output: a token's first spaces vanish in the decoded text, so
        // the grammar walks the rest (all of it gone: the token leaves the state as it is).
        const Vocabulary& v = *vocabulary_;
        for (const std::int32_t id : v.sorted_) {
            const std::string& bytes = v.bytes_[static_cast<std::size_t>(id)];
            const std::size_t k = stripped_spaces(bytes, strip);
            if (k == 0) continue;
            if (dfa_.walk(state, std::string_view(bytes).substr(k)) != LazyDfa::kDead)
                (*mask)[static_cast<std::size_t>(id) >> 5] |= 1u << (id & 31);
        }
    }
    if (dfa_.overflowed()) {
        return Status::ResourceExhausted(fmt::format(
            "the grammar needs more than {} automaton states; simplify the regex or schema", LazyDfa::kMaxStates));
    }
    if (masks_.size() >= kMaxCachedMasks) masks_.clear();
    masks_.emplace(key, mask);
    return std::shared_ptr<const TokenBitmask>(std::move(mask));
}

StatusOr<std::shared_ptr<TokenBitmask>> CompiledGrammar::walk_all(std::int32_t state) {
    const Vocabulary& v = *vocabulary_;
    auto mask = std::make_shared<TokenBitmask>((v.bytes_.size() + 31) / 32, 0u);
    // states[d]: the DFA state after the current token's first d bytes; valid up to `depth`.
    std::vector<std::int32_t> states(v.max_len_ + 1, LazyDfa::kDead);
    states[0] = state;
    std::size_t depth = 0;
    for (std::size_t i = 0; i < v.sorted_.size(); ++i) {
        const std::int32_t id = v.sorted_[i];
        const std::string& bytes = v.bytes_[static_cast<std::size_t>(id)];
        // Reuse the walk of the shared prefix; a dead prefix stays dead for the tokens after.
        std::size_t d = std::min<std::size_t>(v.lcp_[i], depth);
        while (d < bytes.size()) {
            const std::int32_t next = dfa_.next(states[d], static_cast<std::uint8_t>(bytes[d]));
            if (next == LazyDfa::kDead) break;
            states[++d] = next;
        }
        depth = d;
        if (d == bytes.size()) (*mask)[static_cast<std::size_t>(id) >> 5] |= 1u << (id & 31);
    }
    return mask;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<std::int32_t> stop_tokens)
    : grammar_(std::move(grammar)),
      stop_tokens_(std::move(stop_tokens)),
      state_(grammar_->dfa().start()),
      strip_(grammar_->vocabulary().leading_spaces_stripped()) {}

bool GrammarMatcher::is_stop(std::int32_t token) const {
    return std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end();
}

bool GrammarMatcher::can_stop() const { return grammar_->dfa().accepting(state_); }

StatusOr<std::shared_ptr<const TokenBitmask>> GrammarMatcher::allowed_tokens() {
    const std::size_t words = (static_cast<std::size_t>(grammar_->vocabulary().size()) + 31) / 32;
    const auto with_stops = [&](const TokenBitmask* base) {
        auto mask = base ? std::make_shared<TokenBitmask>(*base) : std::make_shared<TokenBitmask>(words, 0u);
        for (const std::int32_t t : stop_tokens_) {
            const auto word = static_cast<std::size_t>(t) >> 5;
            if (t >= 0 && word < mask->size()) (*mask)[word] |= 1u << (t & 31);
        }
        return std::shared_ptr<const TokenBitmask>(std::move(mask));
    };
    if (terminated_) return with_stops(nullptr);
    LazyDfa& dfa = grammar_->dfa();
    if (dfa.accepting(state_) && !dfa.can_continue(state_)) return with_stops(nullptr);
    TSR_ASSIGN_OR_RETURN(std::shared_ptr<const TokenBitmask> mask, grammar_->mask(state_, strip_));
    if (dfa.accepting(state_)) return with_stops(mask.get());
    if (std::all_of(mask->begin(), mask->end(), [](std::uint32_t w) { return w == 0; })) {
        return Status::OutOfRange(
            "no token of the vocabulary can continue the constrained output (the pattern needs text the "
            "tokenizer cannot spell)");
    }
    return mask;
}

bool GrammarMatcher::accept(std::int32_t token) {
    if (terminated_) return is_stop(token);
    if (is_stop(token)) {
        if (!can_stop()) return false;
        terminated_ = true;
        return true;
    }
    if (token < 0 || token >= grammar_->vocabulary().size() || !grammar_->vocabulary().usable(token)) return false;
    std::string_view bytes = grammar_->vocabulary().bytes(token);
    const std::size_t dropped = stripped_spaces(bytes, strip_);
    const std::int32_t next = grammar_->dfa().walk(state_, bytes.substr(dropped));
    if (next == LazyDfa::kDead) return false;
    state_ = next;
    // Once a byte the detokenizer keeps has come, no later space is dropped.
    strip_ = dropped == bytes.size() ? strip_ - static_cast<int>(dropped) : 0;
    return true;
}

}  // namespace tessera::grammar
