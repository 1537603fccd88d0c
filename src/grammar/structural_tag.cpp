// grammar/structural_tag.cpp — see structural_tag.h.

#include "grammar/structural_tag.h"

#include <array>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::grammar {
namespace {

constexpr std::size_t kMaxTriggerBytes = 4096;

struct Structure {
    std::string begin;
    std::string schema;  // JSON text
    std::string end;
};

// The triggers' trie with Aho-Corasick failure links, as a complete byte automaton: next[s][b]
// is the state after reading b in state s; matched[s] the trigger that ends there (the longest
// one that is a suffix of what was read), or -1.
struct TriggerAutomaton {
    std::vector<std::array<std::int32_t, 256>> next;
    std::vector<int> matched;

    explicit TriggerAutomaton(const std::vector<std::string>& triggers) {
        add_state();
        std::vector<std::int32_t> depth{0};
        for (std::size_t t = 0; t < triggers.size(); ++t) {
            std::int32_t s = 0;
            for (const char c : triggers[t]) {
                const auto b = static_cast<std::uint8_t>(c);
                if (next[static_cast<std::size_t>(s)][b] < 0) {
                    next[static_cast<std::size_t>(s)][b] = add_state();
                    depth.push_back(depth[static_cast<std::size_t>(s)] + 1);
                }
                s = next[static_cast<std::size_t>(s)][b];
            }
            if (matched[static_cast<std::size_t>(s)] < 0) matched[static_cast<std::size_t>(s)] = static_cast<int>(t);
        }
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
            const std::int32_t s = queue.front();
            queue.pop_front();
            const auto su = static_cast<std::size_t>(s);
            if (matched[su] < 0) matched[su] = matched[static_cast<std::size_t>(fail[su])];
            for (int b = 0; b < 256; ++b) {
                std::int32_t& to = next[su][static_cast<std::size_t>(b)];
                const std::int32_t via_fail = next[static_cast<std::size_t>(fail[su])][static_cast<std::size_t>(b)];
                if (to < 0) {
                    to = via_fail;
                } else {
                    fail[static_cast<std::size_t>(to)] = via_fail;
                    queue.push_back(to);
                }
            }
        }
    }

    std::int32_t add_state() {
        std::array<std::int32_t, 256> row;
        row.fill(-1);
        next.push_back(row);
        matched.push_back(-1);
        return static_cast<std::int32_t>(next.size() - 1);
    }
};

// Appends `part`'s states to `into`, renumbered; returns the offset of its start state.
std::int32_t splice(ByteNfa& into, ByteNfa part) {
    const auto offset = static_cast<std::int32_t>(into.states.size());
    for (ByteNfa::State& s : part.states) {
        for (ByteNfa::Edge& e : s.edges) e.to += offset;
        for (std::int32_t& to : s.epsilon) to += offset;
        into.states.push_back(std::move(s));
    }
    return offset;
}

StatusOr<std::vector<Structure>> read_structures(const nlohmann::json& spec) {
    const auto it = spec.find("structures");
    if (it == spec.end() || !it->is_array() || it->empty())
        return Status::InvalidArgument("structural_tag needs \"structures\": a non-empty list of "
                                       "{\"begin\": ..., \"schema\": {...}, \"end\": ...}");
    std::vector<Structure> out;
    for (std::size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& s = (*it)[i];
        const std::string where = "structural_tag.structures[" + std::to_string(i) + "]";
        if (!s.is_object() || !s.contains("begin") || !s["begin"].is_string() || !s.contains("end") ||
            !s["end"].is_string())
            return Status::InvalidArgument(where + " needs \"begin\" and \"end\" strings");
        const auto schema = s.find("schema");
        if (schema == s.end() || !(schema->is_object() || schema->is_boolean()))
            return Status::InvalidArgument(where + ".schema: give the JSON schema of what goes between begin and end");
        out.push_back({s["begin"].get<std::string>(), schema->dump(), s["end"].get<std::string>()});
    }
    return out;
}

StatusOr<std::vector<std::string>> read_triggers(const nlohmann::json& spec) {
    const auto it = spec.find("triggers");
    if (it == spec.end() || !it->is_array() || it->empty())
        return Status::InvalidArgument("structural_tag needs \"triggers\": a non-empty list of strings");
    std::vector<std::string> out;
    std::size_t bytes = 0;
    for (const nlohmann::json& t : *it) {
        if (!t.is_string() || t.get<std::string>().empty())
            return Status::InvalidArgument("structural_tag.triggers must be non-empty strings");
        out.push_back(t.get<std::string>());
        bytes += out.back().size();
    }
    // Each byte of a trigger is a state of 1 KB of transitions.
    if (bytes > kMaxTriggerBytes)
        return Status::InvalidArgument("structural_tag.triggers hold " + std::to_string(bytes) + " bytes; at most " +
                                       std::to_string(kMaxTriggerBytes) + " are taken");
    return out;
}

}  // namespace

StatusOr<ByteNfa> structural_tag_nfa(std::string_view spec_text, const JsonWhitespace& whitespace) {
    const nlohmann::json spec = nlohmann::json::parse(spec_text, nullptr, /*allow_exceptions=*/false);
    if (!spec.is_object())
        return Status::InvalidArgument("structural_tag must be a JSON object with \"structures\" and \"triggers\"");
    TSR_ASSIGN_OR_RETURN(const std::vector<Structure> structures, read_structures(spec));
    TSR_ASSIGN_OR_RETURN(const std::vector<std::string> triggers, read_triggers(spec));

    // What follows each trigger: the rest of the begins that start with it, a schema's instance,
    // the end (xgrammar: every begin must start with a trigger).
    std::vector<std::string> after_trigger(triggers.size());
    for (const Structure& s : structures) {
        std::size_t owner = triggers.size();
        for (std::size_t t = 0; t < triggers.size() && owner == triggers.size(); ++t)
            if (s.begin.starts_with(triggers[t])) owner = t;
        if (owner == triggers.size())
            return Status::InvalidArgument("structural_tag: the begin \"" + s.begin + "\" starts with none of the "
                                           "triggers");
        auto schema = json_schema_to_regex(s.schema, whitespace);
        if (!schema.ok()) return Status::InvalidArgument("structural_tag schema: " + schema.status().message());
        std::string& alternatives = after_trigger[owner];
        alternatives += (alternatives.empty() ? "(?:" : "|(?:") + regex_escape(s.begin.substr(triggers[owner].size())) +
                        "(?:" + *schema + ")" + regex_escape(s.end) + ")";
    }

    const TriggerAutomaton automaton(triggers);
    ByteNfa nfa;
    // States 0 .. n-1: the automaton's states (0, the start, is the root); then the accept
    // state; then each trigger's continuation.
    const auto n_free = static_cast<std::int32_t>(automaton.next.size());
    nfa.states.resize(static_cast<std::size_t>(n_free) + 1);
    nfa.accept = n_free;
    std::vector<std::int32_t> continuation(triggers.size(), -1);
    for (std::size_t t = 0; t < triggers.size(); ++t) {
        if (after_trigger[t].empty()) continue;  // a trigger no structure starts with: plain text
        TSR_ASSIGN_OR_RETURN(ByteNfa part, compile_regex(after_trigger[t]));
        const std::int32_t part_accept = part.accept;
        continuation[t] = splice(nfa, std::move(part));
        nfa.states[static_cast<std::size_t>(continuation[t] + part_accept)].epsilon.push_back(0);
        if (nfa.states.size() > kMaxNfaStates) return Status::InvalidArgument("structural_tag is too large");
    }
    for (std::int32_t s = 0; s < n_free; ++s) {
        const auto su = static_cast<std::size_t>(s);
        // Free text may end anywhere outside a structure (a trigger's prefix included).
        if (automaton.matched[su] < 0) nfa.states[su].epsilon.push_back(n_free);
        if (automaton.matched[su] >= 0) continue;  // reached only to dispatch, below
        for (int b = 0; b < 256;) {
            const std::int32_t to = automaton.next[su][static_cast<std::size_t>(b)];
            const int t = automaton.matched[static_cast<std::size_t>(to)];
            const std::int32_t target = t >= 0 && continuation[static_cast<std::size_t>(t)] >= 0
                                            ? continuation[static_cast<std::size_t>(t)]
                                            : (t >= 0 ? 0 : to);
            int hi = b;
            while (hi + 1 < 256 && automaton.next[su][static_cast<std::size_t>(hi + 1)] == to) ++hi;
            nfa.states[su].edges.push_back({static_cast<std::uint8_t>(b), static_cast<std::uint8_t>(hi), target});
            b = hi + 1;
        }
    }
    return nfa;
}

}  // namespace tessera::grammar
