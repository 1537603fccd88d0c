// grammar/tag_dispatch.cpp — see tag_dispatch.h.

#include "grammar/tag_dispatch.h"

#include <array>
#include <deque>

namespace tessera::grammar {
namespace {

// The patterns' trie with Aho-Corasick failure links, as a complete byte automaton: next[s][b]
// is the state after reading b in state s. trigger[s] is the rule whose trigger ends there (the
// longest that is a suffix of what was read), or -1; excluded[s] whether an excluded string does.
struct PatternAutomaton {
    std::vector<std::array<std::int32_t, 256>> next;
    std::vector<int> trigger;
    std::vector<bool> excluded;

    PatternAutomaton(const std::vector<DispatchRule>& rules, const std::vector<std::string>& excludes) {
        add_state();
        for (std::size_t r = 0; r < rules.size(); ++r) {
            const auto s = static_cast<std::size_t>(insert(rules[r].trigger));
            if (trigger[s] < 0) trigger[s] = static_cast<int>(r);
        }
        for (const std::string& e : excludes) excluded[static_cast<std::size_t>(insert(e))] = true;
        // Breadth first: a state's failure target is shallower, so complete before it.
        std::vector<std::int32_t> fail(next.size(), 0);
        std::deque<std::int32_t> queue;
        for (auto& to : next[0]) {
            if (to < 0) {
                to = 0;
            } else {
                queue.push_back(to);
            }
        }
        while (!queue.empty()) {
            const auto s = static_cast<std::size_t>(queue.front());
            queue.pop_front();
            const auto f = static_cast<std::size_t>(fail[s]);
            if (trigger[s] < 0) trigger[s] = trigger[f];
            if (excluded[f]) excluded[s] = true;
            for (std::size_t b = 0; b < 256; ++b) {
                std::int32_t& to = next[s][b];
                const std::int32_t via_fail = next[f][b];
                if (to < 0) {
                    to = via_fail;
                } else {
                    fail[static_cast<std::size_t>(to)] = via_fail;
                    queue.push_back(to);
                }
            }
        }
    }

    std::int32_t insert(const std::string& pattern) {
        std::int32_t s = 0;
        for (const char c : pattern) {
            const auto b = static_cast<std::uint8_t>(c);
            if (next[static_cast<std::size_t>(s)][b] < 0) next[static_cast<std::size_t>(s)][b] = add_state();
            s = next[static_cast<std::size_t>(s)][b];
        }
        return s;
    }

    std::int32_t add_state() {
        std::array<std::int32_t, 256> row;
        row.fill(-1);
        next.push_back(row);
        trigger.push_back(-1);
        excluded.push_back(false);
        return static_cast<std::int32_t>(next.size() - 1);
    }
};

Status check_patterns(const std::vector<DispatchRule>& rules, const std::vector<std::string>& excludes) {
    std::size_t bytes = 0;
    for (const DispatchRule& r : rules) {
        if (r.trigger.empty()) return Status::InvalidArgument("triggers must be non-empty strings");
        bytes += r.trigger.size();
    }
    for (const std::string& e : excludes) {
        if (e.empty()) return Status::InvalidArgument("excluded strings must be non-empty");
        bytes += e.size();
    }
    if (bytes > kMaxDispatchBytes)
        return Status::InvalidArgument("the triggers and excluded strings hold " + std::to_string(bytes) +
                                       " bytes; at most " + std::to_string(kMaxDispatchBytes) + " are taken");
    return Status::Ok();
}

}  // namespace

StatusOr<Fragment> tag_dispatch(NfaBuilder& nfa, const std::vector<DispatchRule>& rules, bool loop,
                                const std::vector<std::string>& excludes) {
    TSR_RETURN_IF_ERROR(check_patterns(rules, excludes));
    const PatternAutomaton automaton(rules, excludes);
    const auto n = static_cast<std::int32_t>(automaton.next.size());
    const std::int32_t first = nfa.add_state();
    for (std::int32_t s = 1; s < n; ++s) nfa.add_state();
    const std::int32_t end = nfa.add_state();
    const auto state = [&](std::int32_t s) { return first + s; };
    for (const DispatchRule& r : rules) {
        if (r.continuation) nfa.epsilon(r.continuation->end, loop ? state(0) : end);
    }
    // Where reading into automaton state `to` leads: nowhere (an excluded string), into a rule's
    // continuation, or on through the free text (a trigger without one is plain text).
    const auto target = [&](std::int32_t to) -> std::int32_t {
        const auto tu = static_cast<std::size_t>(to);
        if (automaton.excluded[tu]) return -1;
        if (const int r = automaton.trigger[tu]; r >= 0) {
            const auto& continuation = rules[static_cast<std::size_t>(r)].continuation;
            return continuation ? continuation->start : state(0);
        }
        return state(to);
    };
    for (std::int32_t s = 0; s < n; ++s) {
        const auto su = static_cast<std::size_t>(s);
        // States where a pattern ends are passed through at once, never rested in.
        if (automaton.excluded[su] || automaton.trigger[su] >= 0) continue;
        nfa.epsilon(state(s), end);  // free text may end anywhere, a pattern's prefix included
        for (int b = 0; b < 256;) {
            const std::int32_t to = target(automaton.next[su][static_cast<std::size_t>(b)]);
            int hi = b;
            while (hi + 1 < 256 && target(automaton.next[su][static_cast<std::size_t>(hi + 1)]) == to) ++hi;
            if (to >= 0) nfa.edge(state(s), static_cast<std::uint8_t>(b), static_cast<std::uint8_t>(hi), to);
            b = hi + 1;
        }
    }
    TSR_RETURN_IF_ERROR(nfa.check_size());
    return Fragment{state(0), end};
}

}  // namespace tessera::grammar
