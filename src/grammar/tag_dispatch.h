#pragma once
// grammar/tag_dispatch.h — free text that watches for strings, xgrammar's TagDispatch (the
// core of a structural tag's any_text, triggered_tags and dispatch formats): the text is free
// and may end anywhere, a partial trigger or excluded string included; completing a trigger
// hands over to that trigger's continuation; completing an excluded string is not allowed.
// After a continuation the text is free again (`loop`), or the dispatch ends. Built as an
// Aho-Corasick automaton over the triggers and excluded strings. Not thread-safe (a builder).

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/nfa_builder.h"

namespace tessera::grammar {

struct DispatchRule {
    std::string trigger;
    // What must follow the trigger; none: the trigger is plain text (the free text goes on).
    std::optional<Fragment> continuation;
};

// The triggers and excluded strings hold at most this many bytes in all (each byte is a state
// of 256 transitions).
inline constexpr std::size_t kMaxDispatchBytes = 4096;

// InvalidArgument for an empty trigger or excluded string, or too many bytes.
StatusOr<Fragment> tag_dispatch(NfaBuilder& nfa, const std::vector<DispatchRule>& rules, bool loop,
                                const std::vector<std::string>& excludes);

}  // namespace tessera::grammar
