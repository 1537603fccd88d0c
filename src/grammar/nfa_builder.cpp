// grammar/nfa_builder.cpp — see nfa_builder.h.

#include "grammar/nfa_builder.h"

#include <string>
#include <utility>
#include <vector>

namespace tessera::grammar {

NfaBuilder::NfaBuilder() { add_state(); }

std::int32_t NfaBuilder::add_state() {
    nfa_.states.emplace_back();
    return static_cast<std::int32_t>(nfa_.states.size() - 1);
}

void NfaBuilder::epsilon(std::int32_t from, std::int32_t to) {
    nfa_.states[static_cast<std::size_t>(from)].epsilon.push_back(to);
}

void NfaBuilder::edge(std::int32_t from, std::uint8_t lo, std::uint8_t hi, std::int32_t to) {
    nfa_.states[static_cast<std::size_t>(from)].edges.push_back({lo, hi, to});
}

Fragment NfaBuilder::empty() {
    const std::int32_t s = add_state();
    return {s, s};
}

Fragment NfaBuilder::literal(std::string_view bytes) {
    const std::int32_t start = add_state();
    std::int32_t at = start;
    for (const char c : bytes) {
        const std::int32_t next = add_state();
        const auto b = static_cast<std::uint8_t>(c);
        edge(at, b, b, next);
        at = next;
    }
    return {start, at};
}

Fragment NfaBuilder::embed(ByteNfa part) {
    const auto offset = static_cast<std::int32_t>(nfa_.states.size());
    for (ByteNfa::State& s : part.states) {
        for (ByteNfa::Edge& e : s.edges) e.to += offset;
        for (std::int32_t& to : s.epsilon) to += offset;
        nfa_.states.push_back(std::move(s));
    }
    return {offset, offset + part.accept};
}

Fragment NfaBuilder::sequence(Fragment first, Fragment second) {
    epsilon(first.end, second.start);
    return {first.start, second.end};
}

Fragment NfaBuilder::alternative(Fragment a, Fragment b) {
    const std::int32_t start = add_state();
    const std::int32_t end = add_state();
    epsilon(start, a.start);
    epsilon(start, b.start);
    epsilon(a.end, end);
    epsilon(b.end, end);
    return {start, end};
}

Fragment NfaBuilder::star(Fragment f) {
    // A hub before and after each copy: start and end are never f's own states, so an epsilon
    // into f from outside cannot skip back through its loop.
    const std::int32_t hub = add_state();
    const std::int32_t end = add_state();
    epsilon(hub, f.start);
    epsilon(f.end, hub);
    epsilon(hub, end);
    return {hub, end};
}

bool NfaBuilder::full() const { return nfa_.states.size() >= kMaxNfaStates; }

Status NfaBuilder::check_size() const {
    if (nfa_.states.size() > kMaxNfaStates)
        return Status::InvalidArgument("the constraint compiles to more than " + std::to_string(kMaxNfaStates) +
                                       " automaton states; make it smaller");
    return Status::Ok();
}

ByteNfa NfaBuilder::finish(Fragment root) && {
    epsilon(0, root.start);
    nfa_.accept = root.end;
    // Moves into states from which the accept state cannot be reached are dropped (a schema no
    // value fits, say, behind a trigger): the text may then never write its way into a dead end,
    // where no token would be allowed.
    const std::size_t n = nfa_.states.size();
    std::vector<std::vector<std::int32_t>> into(n);
    for (std::size_t s = 0; s < n; ++s) {
        const auto from = static_cast<std::int32_t>(s);
        for (const ByteNfa::Edge& e : nfa_.states[s].edges) into[static_cast<std::size_t>(e.to)].push_back(from);
        for (const std::int32_t to : nfa_.states[s].epsilon) into[static_cast<std::size_t>(to)].push_back(from);
    }
    std::vector<bool> finishes(n, false);
    std::vector<std::int32_t> stack{nfa_.accept};
    finishes[static_cast<std::size_t>(nfa_.accept)] = true;
    while (!stack.empty()) {
        const std::int32_t s = stack.back();
        stack.pop_back();
        for (const std::int32_t from : into[static_cast<std::size_t>(s)]) {
            if (finishes[static_cast<std::size_t>(from)]) continue;
            finishes[static_cast<std::size_t>(from)] = true;
            stack.push_back(from);
        }
    }
    const auto dead = [&](std::int32_t to) { return !finishes[static_cast<std::size_t>(to)]; };
    for (ByteNfa::State& s : nfa_.states) {
        std::erase_if(s.edges, [&](const ByteNfa::Edge& e) { return dead(e.to); });
        std::erase_if(s.epsilon, dead);
    }
    return std::move(nfa_);
}

}  // namespace tessera::grammar
