#include "kernels/sampling.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace tessera::kernels {
namespace {

std::map<int, int> histogram(const std::vector<float>& logits, const SamplingParams& p, int draws) {
    Rng rng(p.seed);
    std::vector<std::pair<float, std::int32_t>> scratch;
    std::map<int, int> h;
    for (int i = 0; i < draws; ++i)
        h[sample(logits.data(), static_cast<std::int64_t>(logits.size()), p, rng, scratch)]++;
    return h;
}

const std::vector<float> kLogits = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};

TEST(SamplingTest, GreedyPicksTheFirstMaximum) {
    EXPECT_EQ(argmax(kLogits.data(), 5), 1);
    auto h = histogram(kLogits, SamplingParams{}, 10);
    EXPECT_EQ(h.size(), 1u);
    EXPECT_EQ(h[1], 10);
}

TEST(SamplingTest, ArgmaxFindsTheFirstMaximumAcrossLanesAndTail) {
    for (const std::int64_t vocab : {1, 15, 16, 17, 37, 4099}) {
        std::vector<float> logits(static_cast<std::size_t>(vocab));
        for (std::int64_t i = 0; i < vocab; ++i) logits[i] = std::sin(static_cast<float>(i) * 1.7f);
        std::int64_t want = 0;
        for (std::int64_t i = 1; i < vocab; ++i)
            if (logits[i] > logits[want]) want = i;
        EXPECT_EQ(argmax(logits.data(), vocab), want) << vocab;
        // A maximum in the tail, and the same value again later and earlier in another lane.
        logits.back() = 5.0f;
        EXPECT_EQ(argmax(logits.data(), vocab), vocab - 1) << vocab;
        if (vocab > 3) {
            logits[2] = 5.0f;
            EXPECT_EQ(argmax(logits.data(), vocab), 2) << vocab;
        }
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> with_nan = {nan, -3.0f, 7.0f, nan, 1.0f};
    EXPECT_EQ(argmax(with_nan.data(), 5), 2);  // NaN is never the maximum
}

TEST(SamplingTest, TopKKeepsOnlyTheKMostLikely) {
    SamplingParams p{.temperature = 1.0f, .top_k = 2, .seed = 3};
    auto h = histogram(kLogits, p, 2000);
    EXPECT_EQ(h.size(), 2u);
    EXPECT_GT(h[1], 800);
    EXPECT_GT(h[3], 800);
}

TEST(SamplingTest, TopPAndMinPCutTheTail) {
    // Probabilities ∝ e^0, e^2, e^1, e^2, e^-1 → 0.053, 0.392, 0.144, 0.392, 0.020.
    SamplingParams top_p{.temperature = 1.0f, .top_p = 0.75f, .seed = 1};
    auto h = histogram(kLogits, top_p, 3000);
    EXPECT_EQ(h.size(), 2u) << "0.392 + 0.392 reaches 0.75";
    top_p.top_p = 0.8f;
    EXPECT_EQ(histogram(kLogits, top_p, 3000).size(), 3u) << "0.784 < 0.8 needs a third token";
    SamplingParams min_p{.temperature = 1.0f, .min_p = 0.3f, .seed = 1};
    h = histogram(kLogits, min_p, 3000);
    EXPECT_EQ(h.size(), 3u) << "0.144 >= 0.3 · 0.392 stays; 0.053 goes";
    EXPECT_EQ(h.count(0), 0u);
}

TEST(SamplingTest, TopPOverAFlatLargeVocabularyKeepsItsMass) {
    // 5000 equal logits: top_p 0.9 must keep 4500 candidates, beyond the first sorted head.
    std::vector<float> flat(5000, 0.0f);
    SamplingParams p{.temperature = 1.0f, .top_p = 0.9f, .seed = 7};
    auto h = histogram(flat, p, 40000);
    std::size_t beyond = 0;
    for (const auto& [token, count] : h) beyond += token >= 4500 ? 1 : 0;
    EXPECT_GT(h.size(), 4300u);
    EXPECT_EQ(beyond, 0u) << "ties are broken towards lower ids, so ids >= 4500 are cut";
}

TEST(SamplingTest, FrequenciesFollowTheSoftmaxAndSeedsRepeat) {
    SamplingParams p{.temperature = 1.0f, .seed = 42};
    auto a = histogram(kLogits, p, 20000);
    auto b = histogram(kLogits, p, 20000);
    EXPECT_EQ(a, b);
    EXPECT_NEAR(a[2] / 20000.0, 0.151, 0.015);
    // Lower temperature sharpens towards the two maxima.
    SamplingParams cold{.temperature = 0.2f, .seed = 42};
    auto c = histogram(kLogits, cold, 5000);
    EXPECT_GT(c[1] + c[3], 4900);
}

}  // namespace
}  // namespace tessera::kernels
