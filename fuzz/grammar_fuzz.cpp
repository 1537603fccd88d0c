// libFuzzer target: a request's constraint (the input after its first byte) as a regex, or as a
// JSON schema (first byte odd), or as an EBNF grammar (first byte even with bit 3 set), or as a
// structural tag (first byte even with bit 4 set and bit 3 clear). No input
// may crash or hang the compiler: a pattern compiles or is refused, and a compiled one is walked
// along the input's own bytes and asked for a token mask over a small vocabulary, within the
// automaton's bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/structural_tag.h"
#include "grammar/token_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera::grammar;
    if (size == 0 || size > 4096) return 0;
    const bool schema = data[0] & 1;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::string pattern(text);
    const bool structural = !schema && !(data[0] & 8) && (data[0] & 16);
    if (structural) {
        // compiled directly below
    } else if (schema) {
        auto regex = json_schema_to_regex(text, {.mode = (data[0] & 2) ? JsonWhitespace::Mode::kCompact
                                                                       : JsonWhitespace::Mode::kAny});
        if (!regex.ok()) return 0;
        pattern = regex.value();
    } else if (data[0] & 8) {
        auto regex = ebnf_to_regex(text);
        if (!regex.ok()) return 0;
        pattern = regex.value();
    }
    auto nfa = structural ? structural_tag_nfa(text) : compile_regex(pattern);
    if (!nfa.ok()) return 0;
    static const auto vocabulary = std::make_shared<const Vocabulary>(
        std::vector<std::string>{"<eos>", "{", "}", "\"", ":", ",", " ", "a", "ab", "1", "12", "-", "[", "]", "true",
                                 "null", "\xC3", "\xA9", "\xE4\xB8\xAD", "\\", "\n", " \""},
        std::vector<bool>{true}, /*leading_spaces_stripped=*/data[0] & 4 ? 1 : 0);
    auto grammar = std::make_shared<CompiledGrammar>(std::move(nfa.value()), vocabulary);
    GrammarMatcher matcher(grammar, {0});
    for (int step = 0; step < 8; ++step) {
        auto mask = matcher.allowed_tokens();
        if (!mask.ok()) break;
        std::int32_t pick = -1;
        for (std::int32_t t = 0; t < vocabulary->size(); ++t)
            if (bitmask_allows(*mask.value(), t)) pick = t;  // the last allowed
        if (pick < 0) std::abort();  // an Ok mask always allows something
        if (!matcher.accept(pick)) std::abort();  // what the mask allows is accepted
        if (matcher.terminated()) break;
    }
    LazyDfa& dfa = grammar->dfa();
    (void)dfa.walk(dfa.start(), text);
    return 0;
}
