// grammar/lazy_dfa.cpp — see lazy_dfa.h.

#include "grammar/lazy_dfa.h"

#include <algorithm>

namespace tessera::grammar {

LazyDfa::LazyDfa(ByteNfa nfa) : nfa_(std::move(nfa)), mark_(nfa_.states.size(), 0) {
    // State 0 exists even for a pattern that matches nothing: a start with no way on.
    std::vector<std::int32_t> start = closure({0});
    if (start.empty()) {
        accepting_.push_back(false);
        sets_.emplace_back();
        std::array<std::int32_t, 256> row;
        row.fill(kDead);
        transitions_.push_back(row);
        return;
    }
    intern(std::move(start));
}

std::vector<std::int32_t> LazyDfa::closure(std::vector<std::int32_t> seeds) {
    std::vector<std::int32_t> visited;
    std::vector<std::int32_t> stack = std::move(seeds);
    while (!stack.empty()) {
        const std::int32_t s = stack.back();
        stack.pop_back();
        if (mark_[static_cast<std::size_t>(s)]) continue;
        mark_[static_cast<std::size_t>(s)] = 1;
        visited.push_back(s);
        for (const std::int32_t to : nfa_.states[static_cast<std::size_t>(s)].epsilon) stack.push_back(to);
    }
    // Only states that consume bytes (or accept) tell DFA states apart.
    std::vector<std::int32_t> out;
    for (const std::int32_t s : visited) {
        mark_[static_cast<std::size_t>(s)] = 0;
        if (!nfa_.states[static_cast<std::size_t>(s)].edges.empty() || s == nfa_.accept) out.push_back(s);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::int32_t LazyDfa::intern(std::vector<std::int32_t> set) {
    if (set.empty()) return kDead;
    if (const auto it = ids_.find(set); it != ids_.end()) return it->second;
    if (sets_.size() >= kMaxStates) {
        overflowed_ = true;
        return kDead;
    }
    const auto id = static_cast<std::int32_t>(sets_.size());
    accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa_.accept));
    ids_.emplace(set, id);
    sets_.push_back(std::move(set));
    std::array<std::int32_t, 256> row;
    row.fill(kUnknown);
    transitions_.push_back(row);
    return id;
}

std::int32_t LazyDfa::compute(std::int32_t state, std::uint8_t byte) {
    std::vector<std::int32_t> seeds;
    for (const std::int32_t s : sets_[static_cast<std::size_t>(state)]) {
        for (const ByteNfa::Edge& e : nfa_.states[static_cast<std::size_t>(s)].edges)
            if (e.lo <= byte && byte <= e.hi) seeds.push_back(e.to);
    }
    if (seeds.empty()) return kDead;
    return intern(closure(std::move(seeds)));
}

std::int32_t LazyDfa::walk(std::int32_t state, std::string_view bytes) {
    for (const char c : bytes) {
        if (state == kDead) return kDead;
        state = next(state, static_cast<std::uint8_t>(c));
    }
    return state;
}

bool LazyDfa::can_continue(std::int32_t state) {
    for (const std::int32_t s : sets_[static_cast<std::size_t>(state)])
        if (!nfa_.states[static_cast<std::size_t>(s)].edges.empty()) return true;
    return false;
}

}  // namespace tessera::grammar
