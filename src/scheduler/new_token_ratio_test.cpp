#include "scheduler/new_token_ratio.h"

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

TEST(NewTokenRatioTest, InitMinDecayAndReset) {
    NewTokenRatio r({});
    EXPECT_DOUBLE_EQ(r.init(), 0.7);
    EXPECT_DOUBLE_EQ(r.min(), 0.7 * 0.14);
    EXPECT_DOUBLE_EQ(r.decay(), (0.7 - 0.098) / 600);
    for (int i = 0; i < 300; ++i) r.on_decode_step();
    EXPECT_NEAR(r.value(), 0.7 - 300 * r.decay(), 1e-12);
    for (int i = 0; i < 1000; ++i) r.on_decode_step();
    EXPECT_DOUBLE_EQ(r.value(), r.min());
    r.on_idle();
    EXPECT_DOUBLE_EQ(r.value(), 0.7);

    NewTokenRatio loose({.schedule_conservativeness = 0.3});
    EXPECT_NEAR(loose.init(), 0.21, 1e-12);
    NewTokenRatio strict({.schedule_conservativeness = 2.0});
    EXPECT_DOUBLE_EQ(strict.init(), 1.0);  // capped
    EXPECT_DOUBLE_EQ(strict.min(), 0.14);
}

TEST(NewTokenRatioTest, RatioAfterRetraction) {
    // (30 decoded + 20 · 2 remaining) / (200 + 1)
    EXPECT_DOUBLE_EQ(ratio_after_retraction(30, 200, 2), 70.0 / 201.0);
    EXPECT_DOUBLE_EQ(ratio_after_retraction(500, 100, 3), 1.0);
}

TEST(NewTokenRatioTest, RetractsShortestOutputThenLongestInputFirst) {
    std::vector<RetractCandidate> running = {
        {.output_len = 10, .input_len = 5},  // 0
        {.output_len = 2, .input_len = 5},   // 1
        {.output_len = 2, .input_len = 50},  // 2
        {.output_len = 7, .input_len = 5},   // 3
        {.output_len = 2, .input_len = 50},  // 4: exact tie with 2 — the later one goes first
    };
    EXPECT_EQ(retraction_order(running), (std::vector<std::size_t>{4, 2, 1, 3, 0}));
}

TEST(NewTokenRatioTest, PriorityRetractionTakesTheWorstPriorityFirstThenLength) {
    std::vector<RetractCandidate> running = {
        {.output_len = 10, .input_len = 5, .priority = 1},  // 0
        {.output_len = 2, .input_len = 5, .priority = 9},   // 1
        {.output_len = 2, .input_len = 50, .priority = 1},  // 2
        {.output_len = 7, .input_len = 5, .priority = 1},   // 3
    };
    EXPECT_EQ(retraction_order(running, PriorityOrder{}), (std::vector<std::size_t>{2, 3, 0, 1}));
    EXPECT_EQ(retraction_order(running, PriorityOrder{.low_values_first = true}),
              (std::vector<std::size_t>{1, 2, 3, 0}));
}

}  // namespace
}  // namespace tessera::scheduler
