// Routing by hand-computed cases: each picks a case where the rule under test changes the
// answer (renormalisation, tie order, group limits, the selection-only correction bias).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "layers/moe_router.h"

namespace tessera::layers {
namespace {

using loader::ScoringFunc;
using loader::TopkMethod;

struct Routed {
    std::vector<std::int32_t> ids;
    std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, const RouterConfig& c, const float* bias = nullptr) {
    Routed r{std::vector<std::int32_t>(c.top_k), std::vector<float>(c.top_k)};
    route_tokens(logits.data(), 1, c, bias, r.ids.data(), r.weights.data());
    return r;
}

TEST(MoeRouterTest, SoftmaxTopKWithAndWithoutRenormalisation) {
    RouterConfig c{.num_experts = 4, .top_k = 2};
    // softmax = [1/8, 2/8, 4/8, 1/8]
    const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f), 0.0f};
    Routed plain = route(logits, c);
    EXPECT_EQ(plain.ids, (std::vector<std::int32_t>{2, 1}));
    EXPECT_NEAR(plain.weights[0], 0.5f, 1e-6f);
    EXPECT_NEAR(plain.weights[1], 0.25f, 1e-6f);
    c.renormalize = true;
    Routed renorm = route(logits, c);
    EXPECT_NEAR(renorm.weights[0], 2.0f / 3.0f, 1e-6f);
    EXPECT_NEAR(renorm.weights[1], 1.0f / 3.0f, 1e-6f);
}

TEST(MoeRouterTest, TiesGoToTheLowerExpert) {
    RouterConfig c{.num_experts = 4, .top_k = 2};
    EXPECT_EQ(route({1.0f, 2.0f, 2.0f, 2.0f}, c).ids, (std::vector<std::int32_t>{1, 2}));
}

TEST(MoeRouterTest, GroupLimitedGreedyKeepsOnlyTheBestGroups) {
    // Groups {0..3} and {4..7}: the best expert is 0, the second best 4, but only one group
    // may be used, so the second pick is 1 from expert 0's group.
    const std::vector<float> logits = {3.0f, 1.0f, 0.5f, 0.0f, 2.99f, 2.98f, 0.0f, 0.0f};
    RouterConfig c{.num_experts = 8, .top_k = 2};
    EXPECT_EQ(route(logits, c).ids, (std::vector<std::int32_t>{0, 4})) << "plain greedy";
    c.method = TopkMethod::kGroupLimitedGreedy;
    c.n_group = 2;
    c.topk_group = 1;
    EXPECT_EQ(route(logits, c).ids, (std::vector<std::int32_t>{0, 1}));
}

TEST(MoeRouterTest, NoauxTcSelectsWithTheBiasButWeighsWithoutIt) {
    RouterConfig c{.num_experts = 8, .top_k = 2, .scoring = ScoringFunc::kSigmoid, .method = TopkMethod::kNoauxTc,
                   .n_group = 2, .topk_group = 1, .renormalize = true, .routed_scaling_factor = 2.5};
    std::vector<float> logits(8, 0.0f);  // sigmoid 0.5 everywhere
    logits[5] = std::log(3.0f);          // sigmoid 0.75
    logits[0] = 2.0f;                    // the best unbiased score, in the group the bias loses
    const std::vector<float> bias = {0, 0, 0, 0, 1.0f, 0.5f, 0, 0};
    Routed r = route(logits, c, bias.data());
    // Group {4..7} wins on the sum of its two best biased scores (1.5 + 1.25 > 0.88 + 0.5).
    EXPECT_EQ(r.ids, (std::vector<std::int32_t>{4, 5}));
    // Weights are the unbiased sigmoids 0.5 and 0.75, renormalised, times 2.5.
    EXPECT_NEAR(r.weights[0], 1.0f, 1e-5f);
    EXPECT_NEAR(r.weights[1], 1.5f, 1e-5f);
}

TEST(MoeRouterTest, RoutedScalingFactorWithoutRenormalisation) {
    // DeepSeek-V2 style: softmax, greedy, no renormalisation, weights × routed_scaling_factor.
    RouterConfig c{.num_experts = 4, .top_k = 1, .routed_scaling_factor = 16.0};
    Routed r = route({0.0f, std::log(2.0f), std::log(4.0f), 0.0f}, c);
    EXPECT_EQ(r.ids[0], 2);
    EXPECT_NEAR(r.weights[0], 8.0f, 1e-5f);
}

}  // namespace
}  // namespace tessera::layers
