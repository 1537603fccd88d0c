#pragma once
// grammar/nfa_builder.h — a ByteNfa assembled from fragments (Thompson's construction), for the
// constraints compiled straight to an automaton rather than through one regular expression: a
// structural tag's formats nest compiled regexes, literals, repetitions and free text that
// watches for strings. Not thread-safe; one builder per compilation.

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "grammar/regex.h"

namespace tessera::grammar {

// A piece of the automaton: matching it leads from `start` to `end`, which has nothing leaving
// it yet (the piece that follows is joined to it by an epsilon).
struct Fragment {
    std::int32_t start = 0;
    std::int32_t end = 0;
};

class NfaBuilder {
 public:
    // State 0 is kept for the whole automaton's start (finish() joins it to the root fragment).
    NfaBuilder();

    std::int32_t add_state();
    void epsilon(std::int32_t from, std::int32_t to);
    void edge(std::int32_t from, std::uint8_t lo, std::uint8_t hi, std::int32_t to);

    Fragment empty();
    Fragment literal(std::string_view bytes);
    // Another automaton's states, renumbered into this one (a compiled regex, say).
    Fragment embed(ByteNfa nfa);
    Fragment sequence(Fragment first, Fragment second);
    // Either of two pieces; `alternative(f, empty())` makes `f` optional.
    Fragment alternative(Fragment a, Fragment b);
    // Zero or more of `f` (`f` is used once; for one or more, sequence a copy before it).
    Fragment star(Fragment f);

    // Whether the automaton holds kMaxNfaStates states (a builder that expands pieces stops
    // there), and InvalidArgument past it: every request's constraint is bounded, however it nests.
    bool full() const;
    Status check_size() const;
    // The automaton, from state 0 through `root`, without the moves into states from which its
    // accept state cannot be reached.
    ByteNfa finish(Fragment root) &&;

 private:
    ByteNfa nfa_;
};

}  // namespace tessera::grammar
