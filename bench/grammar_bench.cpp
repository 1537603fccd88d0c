// bench/grammar_bench.cpp — what constrained decoding costs the scheduler thread
// (bench_grammar). For each real tokenizer: the time to build the grammar's view of the
// vocabulary, to compile a JSON schema, and per output token the time for the next token's
// mask, the first time a request walks the grammar (cold: DFA states and masks are made) and
// again with the masks cached (warm), over the tokens of a fixed instance of the schema.
// One JSON line per tokenizer; medians of 5 warm walks.
// Usage: bench_grammar [assets_dir]   (default: TSR_TOKENIZER_ASSETS of the build)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "front/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "size": {"enum": ["S", "M", "L", "XL"]},
    "count": {"type": "integer", "minimum": 0, "maximum": 1000},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string",
                "pattern": "[0-9]{5}"}}, "required": ["street", "zip"]}},
    "required": ["name", "size", "count"]})";
constexpr const char* kInstance =
    R"({"name": "Ada Lovelace", "size": "M", "count": 42, "tags": ["analyst", "engine", "notes"], )"
    R"("address": {"street": "12 St James's Square", "zip": "10001"}})";

// Milliseconds per mask along `ids` with a fresh matcher.
std::vector<double> walk(tessera::front::GrammarCompiler& compiler, const std::vector<std::int32_t>& ids,
                         const std::vector<std::int32_t>& stops) {
    auto c = compiler.constraint({tessera::server::OutputConstraint::Kind::kJsonSchema, kSchema}, stops).value();
    std::vector<double> times;
    for (const std::int32_t id : ids) {
        const auto t0 = Clock::now();
        auto mask = c->allowed_tokens();
        times.push_back(ms_since(t0));
        if (!mask.ok() || !c->accept(id)) {
            std::fprintf(stderr, "the instance left the grammar at token %d\n", id);
            return {};
        }
    }
    return times;
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
    const std::string assets = argc > 1 ? argv[1] : TSR_TOKENIZER_ASSETS;
    for (const char* name : {"qwen3", "llama3", "deepseek_v3", "mistral"}) {
        auto tok = tessera::tokenizer::Tokenizer::load(assets + "/" + name);
        if (!tok.ok()) {
            std::fprintf(stderr, "%s: %s\n", name, tok.status().to_string().c_str());
            return 1;
        }
        const auto& t = *tok.value();
        std::vector<std::int32_t> ids = t.encode(kInstance, /*add_special_tokens=*/false);
        const std::vector<std::int32_t> stops = t.eos_token_ids();
        tessera::front::GrammarCompiler compiler(t, {.mode = tessera::grammar::JsonWhitespace::Mode::kCompact});
        // The first constraint builds the vocabulary view and compiles the schema; a second
        // schema text (one more space) compiles alone.
        auto t0 = Clock::now();
        (void)compiler.constraint({tessera::server::OutputConstraint::Kind::kRegex, "x"}, stops).value();
        const double vocabulary_ms = ms_since(t0);
        t0 = Clock::now();
        (void)compiler.constraint({tessera::server::OutputConstraint::Kind::kJsonSchema, std::string(kSchema) + " "},
                                  stops)
            .value();
        const double compile_ms = ms_since(t0);
        const std::vector<double> cold = walk(compiler, ids, stops);
        if (cold.empty()) return 1;
        std::vector<double> warm_means;
        for (int run = 0; run < 5; ++run) warm_means.push_back(mean(walk(compiler, ids, stops)) * 1000.0);
        std::sort(warm_means.begin(), warm_means.end());
        std::printf(
            "{\"bench\": \"grammar\", \"tokenizer\": \"%s\", \"vocab\": %lld, \"instance_tokens\": %zu, "
            "\"vocabulary_ms\": %.1f, \"schema_compile_ms\": %.2f, \"cold_mask_ms_mean\": %.3f, "
            "\"cold_mask_ms_max\": %.3f, \"cold_walk_ms\": %.1f, \"warm_mask_us_median\": %.2f}\n",
            name, static_cast<long long>(t.vocab_size()), ids.size(), vocabulary_ms, compile_ms, mean(cold),
            *std::max_element(cold.begin(), cold.end()), mean(cold) * static_cast<double>(cold.size()),
            warm_means[2]);
    }
    return 0;
}
