#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::kernels {

std::int32_t argmax(const float* logits, std::int64_t vocab) {
    // Two passes that vectorise: the largest value over independent lanes, then the first
    // index holding it. A single compare-and-select pass is one dependent chain of a few
    // cycles per logit, a visible part of a large batch's decode step.
    constexpr std::int64_t kLanes = 16;
    constexpr float kLowest = -std::numeric_limits<float>::infinity();
    float lane_max[kLanes];
    std::fill(lane_max, lane_max + kLanes, kLowest);
    std::int64_t i = 0;
    for (; i + kLanes <= vocab; i += kLanes)
        for (std::int64_t j = 0; j < kLanes; ++j) lane_max[j] = std::max(lane_max[j], logits[i + j]);
    float best = kLowest;
    for (const float m : lane_max) best = std::max(best, m);
    for (; i < vocab; ++i) best = std::max(best, logits[i]);
    for (i = 0; i < vocab; ++i)
        if (logits[i] == best) return static_cast<std::int32_t>(i);
    return 0;  // nothing above -inf (or only NaN)
}

std::int32_t sample(const float* logits, std::int64_t vocab, const SamplingParams& params, Rng& rng,
                    std::vector<std::pair<float, std::int32_t>>& scratch) {
    if (params.is_greedy()) return argmax(logits, vocab);

    // Candidates as (unnormalised probability, id).
    scratch.resize(static_cast<std::size_t>(vocab));
    const float max_logit = logits[argmax(logits, vocab)];
    const float inv_t = 1.0f / params.temperature;
    for (std::int64_t i = 0; i < vocab; ++i)
        scratch[i] = {std::exp((logits[i] - max_logit) * inv_t), static_cast<std::int32_t>(i)};
    auto by_prob = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    double total = 0.0;
    for (const auto& c : scratch) total += c.first;

    std::size_t n = scratch.size();
    const bool filtered = params.top_k > 0 || params.top_p < 1.0f || params.min_p > 0.0f;
    if (filtered) {
        // Only the head of the distribution needs ordering: sort the best `head` candidates
        // (top_k, or a guess for top_p that grows until its mass reaches top_p).
        std::size_t head = params.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(params.top_k), n)
                                            : std::min<std::size_t>(1024, n);
        while (true) {
            std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(head - 1), scratch.end(),
                             by_prob);
            std::sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(head), by_prob);
            if (params.top_k > 0 || params.top_p >= 1.0f || head == n) break;
            double mass = 0.0;
            for (std::size_t i = 0; i < head; ++i) mass += scratch[i].first;
            if (mass / total >= params.top_p) break;
            head = std::min(n, head * 8);
        }
        n = head;
        if (params.top_k > 0) {
            total = 0.0;
            for (std::size_t i = 0; i < n; ++i) total += scratch[i].first;
        }
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
    }
    // Inverse CDF over the kept candidates (in vocabulary order when nothing was filtered).
    std::uniform_real_distribution<double> uniform(0.0, total);
    const double target = uniform(rng);
    double cumulative = 0.0;
    std::size_t last_possible = 0;
    for (std::size_t i = 0; i < n; ++i) {
        cumulative += scratch[i].first;
        if (target < cumulative) return scratch[i].second;
        if (scratch[i].first > 0.0f) last_possible = i;
    }
    // Rounding left the target past the sum: the last candidate that could be drawn, never a
    // banned (-inf, probability 0) one.
    return scratch[last_possible].second;
}

}  // namespace tessera::kernels
