#pragma once
// grammar/lazy_dfa.h — a DFA over bytes built from a ByteNfa on demand (subset construction
// one transition at a time, as RE2's and Rust regex's lazy DFAs): only the states a request
// and its vocabulary walks reach are ever made. Not thread-safe: next() adds states; one
// thread (the scheduler's) uses it.

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "grammar/regex.h"

namespace tessera::grammar {

class LazyDfa {
 public:
    static constexpr std::int32_t kDead = -1;
    // The most states one automaton may make; past it next() answers kDead and overflowed()
    // turns true (the request using it is then ended with an error rather than left unbounded).
    // 1 KiB of transitions each: 20 MiB per grammar at most.
    static constexpr std::size_t kMaxStates = 20000;

    explicit LazyDfa(ByteNfa nfa);

    std::int32_t start() const { return 0; }
    std::int32_t next(std::int32_t state, std::uint8_t byte) {
        const std::int32_t to = transitions_[static_cast<std::size_t>(state)][byte];
        if (to != kUnknown) return to;
        // compute() may add a state and move transitions_: store by index afterwards.
        const std::int32_t computed = compute(state, byte);
        transitions_[static_cast<std::size_t>(state)][byte] = computed;
        return computed;
    }
    // The state after `bytes`, or kDead.
    std::int32_t walk(std::int32_t state, std::string_view bytes);
    bool accepting(std::int32_t state) const { return accepting_[static_cast<std::size_t>(state)]; }
    // Whether any byte leads on from `state` (false: the match can only end here).
    bool can_continue(std::int32_t state);
    bool overflowed() const { return overflowed_; }
    std::size_t num_states() const { return sets_.size(); }

 private:
    static constexpr std::int32_t kUnknown = -2;
    std::int32_t compute(std::int32_t state, std::uint8_t byte);
    std::int32_t intern(std::vector<std::int32_t> set);  // set: epsilon-closed, sorted
    std::vector<std::int32_t> closure(std::vector<std::int32_t> seeds);

    ByteNfa nfa_;
    std::vector<std::vector<std::int32_t>> sets_;          // NFA states of each DFA state
    std::map<std::vector<std::int32_t>, std::int32_t> ids_;
    std::vector<std::array<std::int32_t, 256>> transitions_;
    std::vector<bool> accepting_;
    std::vector<std::uint8_t> mark_;  // NFA state scratch for closure()
    bool overflowed_ = false;
};

}  // namespace tessera::grammar
