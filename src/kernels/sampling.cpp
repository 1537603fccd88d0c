#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>

namespace tessera::kernels {

std::int32_t argmax(const float* logits, std::int64_t vocab) {
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < vocab; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<std::int32_t>(best);
}

std::int32_t sample(const float* logits, std::int64_t vocab, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, std::int32_t>>& scratch) {
    if (params.is_greedy()) return argmax(logits, vocab);

    // Candidates as (probability, id), most likely first once sorted.
    scratch.resize(static_cast<std::size_t>(vocab));
    float max_logit = logits[argmax(logits, vocab)];
    const float inv_t = 1.0f / params.temperature;
    for (std::int64_t i = 0; i < vocab; ++i)
        scratch[i] = {std::exp((logits[i] - max_logit) * inv_t), static_cast<std::int32_t>(i)};
    auto by_prob = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::size_t n = scratch.size();
    if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n) {
        n = static_cast<std::size_t>(params.top_k);
        std::partial_sort(scratch.begin(), scratch.begin() + n, scratch.end(), by_prob);
    } else {
        std::sort(scratch.begin(), scratch.end(), by_prob);
    }
    double total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += scratch[i].first;

    if (params.top_p < 1.0f) {
        // Keep the smallest prefix whose mass reaches top_p (at least one token).
        double cumulative = 0.0;
        std::size_t keep = 0;
        while (keep < n) {
            cumulative += scratch[keep].first / total;
            ++keep;
            if (cumulative >= params.top_p) break;
        }
        n = keep;
    }
    if (params.min_p > 0.0f) {
        const float threshold = scratch[0].first * params.min_p;
        std::size_t keep = 1;
        while (keep < n && scratch[keep].first >= threshold) ++keep;
        n = keep;
    }
    total = 0.0;
    for (std::size_t i = 0; i < n; ++i) total += scratch[i].first;
    std::uniform_real_distribution<double> uniform(0.0, total);
    const double target = uniform(rng);
    double cumulative = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        cumulative += scratch[i].first;
        if (target < cumulative) return scratch[i].second;
    }
    return scratch[n - 1].second;
}

}  // namespace tessera::kernels
