#include "bench/prompt_generator.h"

#include <algorithm>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace tessera::bench {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// " word": one space, then 2..12 ASCII lower-case letters. Such a token is a whole
// pre-tokenizer piece for the GPT-2 / Qwen / Llama 3 split patterns, so consecutive words
// never merge across their boundary.
bool is_plain_word(const std::string& bytes) {
    if (bytes.size() < 3 || bytes.size() > 13 || bytes[0] != ' ') return false;
    return std::all_of(bytes.begin() + 1, bytes.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

std::vector<std::pair<std::int64_t, std::int64_t>> draw_random_lengths(const RandomDatasetOptions& o) {
    std::mt19937_64 rng(o.seed);
    auto range = [](std::int64_t len, double ratio) {
        const auto lo = std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(len) * ratio));
        return std::uniform_int_distribution<std::int64_t>(std::min(lo, std::max<std::int64_t>(1, len)),
                                                           std::max<std::int64_t>(1, len));
    };
    auto in = range(o.input_len, o.range_ratio);
    auto out = range(o.output_len, o.range_ratio);
    std::vector<std::pair<std::int64_t, std::int64_t>> lens(static_cast<std::size_t>(std::max(0, o.num_prompts)));
    for (auto& l : lens) l.first = in(rng);
    for (auto& l : lens) l.second = out(rng);
    return lens;
}

RandomPromptGenerator::RandomPromptGenerator(const tokenizer::Tokenizer& tok, std::uint64_t seed)
    : tok_(tok), rng_state_(seed ^ 0x7e55e7aull) {}

Status RandomPromptGenerator::init_pool() {
    constexpr std::size_t kPoolSize = 4096;
    const std::int64_t vocab = tok_.vocab_size();
    if (vocab <= 0) return Status::InvalidArgument("the tokenizer has an empty vocabulary");
    // Scan the vocabulary from a seeded random start so the pool does not depend on the
    // order of ids; stop once the pool is full.
    const auto start = static_cast<std::int64_t>(splitmix64(rng_state_) % static_cast<std::uint64_t>(vocab));
    for (std::int64_t k = 0; k < vocab && pool_.size() < kPoolSize; ++k) {
        const auto id = static_cast<std::int32_t>((start + k) % vocab);
        if (tok_.is_special(id)) continue;
        const std::string bytes = tok_.token_bytes(id);
        if (!is_plain_word(bytes)) continue;
        const std::vector<std::int32_t> ids = tok_.encode(bytes, /*add_special_tokens=*/false);
        if (ids.size() == 1 && ids[0] == id) pool_.push_back(id);
    }
    if (pool_.size() < 16)
        return Status::InvalidArgument("the tokenizer has only " + std::to_string(pool_.size()) +
                                       " single-token words (\" word\"); the random dataset needs at least 16. "
                                       "Use --dataset jsonl:FILE instead");
    return Status::Ok();
}

StatusOr<std::string> RandomPromptGenerator::make(std::int64_t n_tokens) {
    if (pool_.empty()) TSR_RETURN_IF_ERROR(init_pool());
    std::string text;
    for (int attempt = 0; attempt < 8; ++attempt) {
        text.clear();
        for (std::int64_t i = 0; i < n_tokens; ++i)
            text += tok_.token_bytes(pool_[splitmix64(rng_state_) % pool_.size()]);
        if (static_cast<std::int64_t>(tok_.encode(text, false).size()) == n_tokens) return text;
    }
    return Status::Internal("could not build a prompt of exactly " + std::to_string(n_tokens) +
                            " tokens with this tokenizer (its words merge); use --dataset jsonl:FILE");
}

StatusOr<std::vector<BenchPrompt>> make_random_dataset(const tokenizer::Tokenizer& tok,
                                                       const RandomDatasetOptions& options) {
    RandomPromptGenerator gen(tok, options.seed);
    std::vector<BenchPrompt> prompts;
    for (const auto& [in, out] : draw_random_lengths(options)) {
        TSR_ASSIGN_OR_RETURN(std::string text, gen.make(in));
        prompts.push_back(BenchPrompt{std::move(text), in, out});
    }
    return prompts;
}

StatusOr<std::vector<BenchPrompt>> load_jsonl_dataset(const std::string& path, const tokenizer::Tokenizer* tok,
                                                      int num_prompts, std::int64_t default_output_len) {
    std::ifstream in(path);
    if (!in) return Status::NotFound("cannot open dataset file '" + path + "'");
    std::vector<BenchPrompt> prompts;
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
        if (num_prompts > 0 && static_cast<int>(prompts.size()) >= num_prompts) break;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        const std::string at = path + ":" + std::to_string(line_no);
        if (!j.is_object()) return Status::InvalidArgument(at + ": expected one JSON object per line");
        BenchPrompt p;
        if (j.contains("prompt") && j["prompt"].is_string()) {
            p.text = j["prompt"].get<std::string>();
        } else if (j.contains("text") && j["text"].is_string()) {
            p.text = j["text"].get<std::string>();
        } else {
            for (const char* key : {"conversations", "messages"}) {
                if (!j.contains(key) || !j[key].is_array()) continue;
                for (const auto& turn : j[key]) {
                    const std::string role = turn.value("from", turn.value("role", std::string()));
                    const std::string content = turn.value("value", turn.value("content", std::string()));
                    if (role == "human" || role == "user") {
                        p.text = content;
                        break;
                    }
                }
                if (!p.text.empty()) break;
            }
        }
        if (p.text.empty())
            return Status::InvalidArgument(at +
                                           ": no prompt; give \"prompt\" (a string), \"text\", or a "
                                           "\"conversations\"/\"messages\" list with a user turn");
        p.output_len = default_output_len;
        for (const char* key : {"output_len", "max_tokens"})
            if (j.contains(key) && j[key].is_number_integer()) p.output_len = j[key].get<std::int64_t>();
        if (p.output_len < 1) return Status::InvalidArgument(at + ": the output length must be >= 1");
        if (tok != nullptr) p.prompt_len = static_cast<std::int64_t>(tok->encode(p.text, false).size());
        prompts.push_back(std::move(p));
    }
    if (prompts.empty()) return Status::InvalidArgument("dataset file '" + path + "' has no prompts");
    return prompts;
}

}  // namespace tessera::bench
