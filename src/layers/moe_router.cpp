#include "layers/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace tessera::layers {

using loader::ScoringFunc;
using loader::TopkMethod;

RouterConfig RouterConfig::from(const loader::MoeConfig& moe) {
    RouterConfig c;
    c.num_experts = moe.num_experts;
    c.top_k = moe.num_experts_per_tok;
    c.scoring = moe.scoring_func;
    c.method = moe.topk_method;
    c.n_group = moe.n_group;
    c.topk_group = moe.topk_group;
    c.renormalize = moe.norm_topk_prob;
    c.routed_scaling_factor = moe.routed_scaling_factor;
    return c;
}

namespace {

// Indices of the k largest values, largest first; equal values keep the lower index first.
void top_k_indices(const float* values, std::int64_t n, std::int64_t k, std::int32_t* out,
                   std::vector<std::int32_t>& order) {
    order.resize(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
        return values[a] > values[b] || (values[a] == values[b] && a < b);
    });
    std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

void route_tokens(const float* logits, std::int64_t n_tokens, const RouterConfig& c,
                  const float* correction_bias, std::int32_t* ids, float* weights) {
    const std::int64_t E = c.num_experts;
    const std::int64_t per_group = E / c.n_group;
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    // Per calling thread and kept between calls (every element is written before it is read),
    // so that a decode step allocates nothing.
    thread_local std::vector<float> scores, choice, group_scores;
    thread_local std::vector<std::int32_t> order, kept_groups;
    scores.resize(static_cast<std::size_t>(E));
    choice.resize(static_cast<std::size_t>(E));
    group_scores.resize(static_cast<std::size_t>(c.n_group));
    kept_groups.resize(static_cast<std::size_t>(c.topk_group));
    for (std::int64_t t = 0; t < n_tokens; ++t) {
        const float* l = logits + t * E;
        if (c.scoring == ScoringFunc::kSoftmax) {
            const float max = *std::max_element(l, l + E);
            float sum = 0.0f;
            for (std::int64_t e = 0; e < E; ++e) sum += scores[e] = std::exp(l[e] - max);
            for (auto& s : scores) s /= sum;
        } else {
            for (std::int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-l[e]));
        }
        for (std::int64_t e = 0; e < E; ++e)
            choice[e] = scores[e] + (correction_bias != nullptr ? correction_bias[e] : 0.0f);
        if (c.method != TopkMethod::kGreedy && c.n_group > 1) {
            for (std::int64_t g = 0; g < c.n_group; ++g) {
                const float* s = choice.data() + g * per_group;
                if (c.method == TopkMethod::kNoauxTc) {
                    // The sum of the group's two best (one when a group has a single expert).
                    std::int32_t best[2] = {0, 0};
                    const std::int64_t k = std::min<std::int64_t>(2, per_group);
                    top_k_indices(s, per_group, k, best, order);
                    group_scores[g] = s[best[0]] + (k == 2 ? s[best[1]] : 0.0f);
                } else {
                    group_scores[g] = *std::max_element(s, s + per_group);
                }
            }
            top_k_indices(group_scores.data(), c.n_group, c.topk_group, kept_groups.data(), order);
            for (std::int64_t g = 0; g < c.n_group; ++g) {
                if (std::find(kept_groups.begin(), kept_groups.end(), g) != kept_groups.end()) continue;
                std::fill(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group, kMasked);
            }
        }
        std::int32_t* id = ids + t * c.top_k;
        float* w = weights + t * c.top_k;
        top_k_indices(choice.data(), E, c.top_k, id, order);
        float sum = 0.0f;
        for (std::int64_t j = 0; j < c.top_k; ++j) sum += w[j] = scores[id[j]];
        // DeepSeek adds 1e-20 to the sum; in f32 that changes nothing above ~1e-13.
        const float scale = static_cast<float>(c.routed_scaling_factor) / (c.renormalize ? sum : 1.0f);
        for (std::int64_t j = 0; j < c.top_k; ++j) w[j] *= scale;
    }
}

}  // namespace tessera::layers
