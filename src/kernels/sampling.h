#pragma once
// kernels/sampling.h — turning one row of logits into a token id: greedy, or temperature +
// top-k + top-p + min-p (applied in that order, as SGLang does) with a seeded generator.
// Stateless apart from the caller's Rng; thread-safe for distinct Rngs.

#include <cstdint>
#include <random>
#include <vector>

namespace tessera::kernels {

struct SamplingParams {
    float temperature = 0.0f;  // 0: greedy (argmax)
    int top_k = -1;            // -1 or 0: all tokens
    float top_p = 1.0f;        // (0, 1]
    float min_p = 0.0f;        // [0, 1]: drop tokens with p < min_p · p_max
    std::uint64_t seed = 0;

    bool is_greedy() const { return temperature <= 0.0f || top_k == 1; }
};

using Rng = std::mt19937_64;

// Index of the largest logit (the first one on ties).
std::int32_t argmax(const float* logits, std::int64_t vocab);

// Samples from logits f32 [vocab]; `scratch` is reused across calls to avoid allocation.
std::int32_t sample(const float* logits, std::int64_t vocab, const SamplingParams& params,
                    Rng& rng, std::vector<std::pair<float, std::int32_t>>& scratch);

}  // namespace tessera::kernels
