#pragma once
// bench/prompt_generator.h — the prompts of `tessera bench serve`: the `random` dataset
// (prompts of exactly the requested number of tokens under the served model's tokenizer,
// lengths drawn as SGLang's bench_serving does) and `jsonl:FILE` (one prompt per line).
// Pure functions of their inputs and seed; the tokenizer is only read (thread-safe).

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::tokenizer {
class Tokenizer;
}

namespace tessera::bench {

struct BenchPrompt {
    std::string text;
    std::int64_t prompt_len = 0;  // tokens of `text` under the tokenizer (0: unknown)
    std::int64_t output_len = 0;  // max tokens to generate
};

struct RandomDatasetOptions {
    int num_prompts = 1000;
    std::int64_t input_len = 1024;
    std::int64_t output_len = 1024;
    // Lengths are drawn uniformly from [len · ratio, len] (SGLang: --random-range-ratio);
    // 1.0 gives every prompt exactly input_len tokens.
    double range_ratio = 0.0;
    std::uint64_t seed = 1;
};

// Draws the input / output lengths only (as SGLang: uniform in [max(1, len·ratio), len]).
std::vector<std::pair<std::int64_t, std::int64_t>> draw_random_lengths(const RandomDatasetOptions& options);

// Text of exactly `n_tokens` tokens under `tok` (encode without special tokens): words
// that the tokenizer maps to one token each, joined so they do not merge. Fails only when
// the vocabulary has too few such words.
// Not thread-safe across calls on one generator (it caches the word pool); one per thread.
class RandomPromptGenerator {
 public:
    RandomPromptGenerator(const tokenizer::Tokenizer& tok, std::uint64_t seed);
    StatusOr<std::string> make(std::int64_t n_tokens);

 private:
    Status init_pool();

    const tokenizer::Tokenizer& tok_;
    std::uint64_t rng_state_;
    std::vector<std::int32_t> pool_;  // ids whose text (" word") re-encodes to themselves
};

StatusOr<std::vector<BenchPrompt>> make_random_dataset(const tokenizer::Tokenizer& tok,
                                                       const RandomDatasetOptions& options);

// One JSON object per line: the prompt under "prompt" or "text" (a string), or the first
// user turn of "conversations" / "messages" (ShareGPT style); the output length under
// "output_len" / "max_tokens", else `default_output_len`. At most `num_prompts` prompts
// (all when <= 0). With a tokenizer, prompt_len is counted; else it stays 0.
StatusOr<std::vector<BenchPrompt>> load_jsonl_dataset(const std::string& path, const tokenizer::Tokenizer* tok,
                                                      int num_prompts, std::int64_t default_output_len);

}  // namespace tessera::bench
