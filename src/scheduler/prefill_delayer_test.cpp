#include "scheduler/prefill_delayer.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::scheduler {
namespace {

using Intent = executor::BatchRunner::PrefillIntent;

Intent wants(std::int64_t running = 0, std::int64_t max_batch = 0, std::int64_t waiting = 1) {
    return {.prefillable = 1, .below_watermark = 0, .running = running, .max_prefill_batch = max_batch,
            .waiting = waiting};
}
Intent idle(std::int64_t running = 0) { return {.running = running}; }

PrefillDelayerConfig dpa(int max_passes = 30) {
    return {.max_delay_passes = max_passes, .dp_attention = true, .dp_size = 2};
}

TEST(PrefillDelayerTest, NoGroupToAdmitAllowsAndEndsAStreak) {
    PrefillDelayer d(dpa());
    EXPECT_FALSE(d.decide(std::vector<Intent>{wants(), idle()}, 64, 0.0).allow);
    const PrefillDecision none = d.decide(std::vector<Intent>{idle(), idle()}, 64, 1.0);
    EXPECT_TRUE(none.allow);
    EXPECT_EQ(none.estimation, PrefillEstimation::kNone);
    EXPECT_STREQ(prefill_delay_reason_name(none.reason), "");
    EXPECT_EQ(none.wait_passes, 1);
    // The streak ended: a new one counts from zero.
    EXPECT_FALSE(d.decide(std::vector<Intent>{wants(), idle()}, 64, 2.0).allow);
    EXPECT_EQ(d.decide(std::vector<Intent>{idle(), idle()}, 64, 2.5).wait_passes, 1);
}

TEST(PrefillDelayerTest, MixedGroupsWaitAtMostMaxDelayPassesMinusOne) {
    PrefillDelayer d(dpa(4));
    const std::vector<Intent> mixed{wants(), idle()};
    for (int pass = 0; pass < 3; ++pass) {
        const PrefillDecision held = d.decide(mixed, 64, 10.0 + pass);
        EXPECT_FALSE(held.allow) << pass;
        EXPECT_EQ(held.estimation, PrefillEstimation::kMixed);
        EXPECT_EQ(held.reason, PrefillDelayReason::kDelay);
        EXPECT_EQ(held.wait_passes, 0);  // only an allow carries the wait
    }
    const PrefillDecision timeout = d.decide(mixed, 64, 13.5);
    EXPECT_TRUE(timeout.allow);
    EXPECT_EQ(timeout.reason, PrefillDelayReason::kWaitTimeout);
    EXPECT_EQ(timeout.wait_passes, 3);
    EXPECT_DOUBLE_EQ(timeout.wait_seconds, 3.5);
}

TEST(PrefillDelayerTest, TheOthersArrivingEndsTheWaitWithSuccess) {
    PrefillDelayer d(dpa());
    EXPECT_FALSE(d.decide(std::vector<Intent>{wants(), idle()}, 64, 0.0).allow);
    EXPECT_FALSE(d.decide(std::vector<Intent>{wants(), idle()}, 64, 0.1).allow);
    const PrefillDecision both = d.decide(std::vector<Intent>{wants(), wants()}, 64, 0.2);
    EXPECT_TRUE(both.allow);
    EXPECT_EQ(both.estimation, PrefillEstimation::kAll);
    EXPECT_EQ(both.reason, PrefillDelayReason::kWaitSuccess);
    EXPECT_EQ(both.wait_passes, 2);
}

TEST(PrefillDelayerTest, AGroupUnderTheLowWatermarkReleasesEveryone) {
    PrefillDelayerConfig c = dpa();
    c.token_usage_low_watermark = 0.5;
    PrefillDelayer d(c);
    const Intent low = d.intent(true, 0.2, 0, 0, 1);
    const Intent high = d.intent(true, 0.8, 0, 0, 1);
    EXPECT_EQ(low.below_watermark, 1);
    EXPECT_EQ(high.below_watermark, 0);
    EXPECT_EQ(d.intent(false, 0.2, 0, 0, 0).below_watermark, 0);  // only with a request to admit
    const PrefillDecision mixed = d.decide(std::vector<Intent>{low, idle()}, 64, 0.0);
    EXPECT_TRUE(mixed.allow);
    EXPECT_EQ(mixed.reason, PrefillDelayReason::kTokenWatermark);
    EXPECT_FALSE(d.decide(std::vector<Intent>{high, idle()}, 64, 0.0).allow);
    // Without a watermark nothing is below it.
    EXPECT_EQ(PrefillDelayer(dpa()).intent(true, 0.0, 0, 0, 1).below_watermark, 0);
}

TEST(PrefillDelayerTest, FewFreeSlotsHoldAdmissionsUntilABatchFitsAfterOneSkip) {
    PrefillDelayer d(dpa());
    // 16 slots, 14 running in the fullest group, a prefill once admitted 4: 2 free < 4.
    const std::vector<Intent> full{wants(14, 4), wants(3, 2)};
    const PrefillDecision first = d.decide(full, 16, 0.0);
    EXPECT_TRUE(first.allow);  // SGLang skips the first delay
    EXPECT_EQ(first.reason, PrefillDelayReason::kNoWait);
    for (int pass = 0; pass < 40; ++pass) EXPECT_FALSE(d.decide(full, 16, pass).allow) << pass;  // no pass cap here
    const PrefillDecision room = d.decide(std::vector<Intent>{wants(12, 4), wants(3, 2)}, 16, 50.0);
    EXPECT_TRUE(room.allow);
    EXPECT_EQ(room.reason, PrefillDelayReason::kWaitSuccess);
    EXPECT_EQ(room.wait_passes, 40);
}

TEST(PrefillDelayerTest, WithoutDpAttentionTheRunningCapIsSharedByTheReplicas) {
    PrefillDelayer d({.dp_attention = false, .dp_size = 2});
    const std::vector<Intent> one{wants(2, 3)};
    EXPECT_TRUE(d.decide(one, 9, 0.0).allow);  // ceil(9 / 2) - 2 = 3 free slots: not fewer than 3
    const PrefillDecision skipped = d.decide(one, 8, 0.0);  // 4 - 2 < 3: the first delay is skipped
    EXPECT_TRUE(skipped.allow);
    EXPECT_EQ(skipped.reason, PrefillDelayReason::kNoWait);
    EXPECT_FALSE(d.decide(one, 8, 0.0).allow);
    // Under DP attention the cap is the group's own: 8 - 2 free slots.
    PrefillDelayer own({.dp_attention = true, .dp_size = 2});
    EXPECT_TRUE(own.decide(one, 8, 0.0).allow);
    EXPECT_TRUE(own.decide(one, 8, 0.0).allow);
}

TEST(PrefillDelayerTest, QueueTriggerWaitsForALongerQueueUpToMaxDelayMs) {
    PrefillDelayerConfig c = dpa();
    c.queue_min_ratio = 0.5;
    c.max_delay_ms = 1000.0;
    PrefillDelayer d(c);
    // Running 10 → wanted queue min(5, 4) = 4; the longest is 2. Slots are plenty.
    const std::vector<Intent> short_queues{wants(10, 4, 2), wants(1, 1, 1)};
    EXPECT_TRUE(d.decide(short_queues, 64, 0.0).allow);  // the skipped first delay
    EXPECT_FALSE(d.decide(short_queues, 64, 0.0).allow);
    EXPECT_FALSE(d.decide(short_queues, 64, 0.9).allow);
    const PrefillDecision capped = d.decide(short_queues, 64, 1.0);  // 1000 ms since the first delay
    EXPECT_TRUE(capped.allow);
    EXPECT_EQ(capped.reason, PrefillDelayReason::kWaitSuccess);
    EXPECT_EQ(capped.wait_passes, 2);
    EXPECT_FALSE(d.decide(short_queues, 64, 2.0).allow);  // a new streak
    EXPECT_TRUE(d.decide(std::vector<Intent>{wants(10, 4, 4), wants(1, 1, 1)}, 64, 2.1).allow);
    // Off without the ratio.
    PrefillDelayer off(dpa());
    EXPECT_TRUE(off.decide(short_queues, 64, 0.0).allow);
    EXPECT_TRUE(off.decide(short_queues, 64, 0.0).allow);
}

TEST(PrefillDelayerTest, BucketsAsSglangResolvesThem) {
    PrefillDelayerConfig c = dpa();
    EXPECT_EQ(prefill_delayer_passes_buckets(c), (std::vector<double>{0, 5, 20, 29}));
    EXPECT_EQ(prefill_delayer_seconds_buckets(c), (std::vector<double>{0, 1, 2, 5, 10, 20, 50, 100, 200, 500}));
    c.max_delay_passes = 8;
    c.forward_passes_buckets = {3, 7, 9};
    c.wait_seconds_buckets = {0.5, 0.1};
    EXPECT_EQ(prefill_delayer_passes_buckets(c), (std::vector<double>{0, 3, 7}));
    EXPECT_EQ(prefill_delayer_seconds_buckets(c), (std::vector<double>{0, 0.1, 0.5}));
}

TEST(PrefillDelayerTest, OutcomesCountEveryPassAndWaitsOnlyPrefillsThatRan) {
    PrefillDelayer d(dpa(3));
    const std::vector<Intent> mixed{wants(), idle()};
    d.record(d.decide(mixed, 64, 0.0), false);
    d.record(d.decide(mixed, 64, 0.5), false);
    d.record(d.decide(mixed, 64, 1.5), true);  // wait_timeout after 2 passes, 1.5 s
    d.record(d.decide(std::vector<Intent>{idle(), idle()}, 64, 2.0), false);
    const std::string text = d.stats().prometheus("model_name=\"m\"");
    EXPECT_NE(text.find("sglang:prefill_delayer_outcomes_total{model_name=\"m\",input_estimation=\"mixed\","
                        "output_allow=\"false\",output_reason=\"delay\",actual_execution=\"false\"} 2.0"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("input_estimation=\"mixed\",output_allow=\"true\",output_reason=\"wait_timeout\","
                        "actual_execution=\"true\"} 1.0"),
              std::string::npos);
    EXPECT_NE(text.find("input_estimation=\"none\",output_allow=\"true\",output_reason=\"\","
                        "actual_execution=\"false\"} 1.0"),
              std::string::npos);
    EXPECT_NE(text.find("sglang:prefill_delayer_wait_forward_passes_bucket{model_name=\"m\",le=\"0.0\"} 0.0"),
              std::string::npos);
    EXPECT_NE(text.find("sglang:prefill_delayer_wait_forward_passes_bucket{model_name=\"m\",le=\"2.0\"} 1.0"),
              std::string::npos);
    EXPECT_NE(text.find("sglang:prefill_delayer_wait_seconds_sum{model_name=\"m\"} 1.5"), std::string::npos);
    EXPECT_NE(text.find("sglang:prefill_delayer_wait_seconds_count{model_name=\"m\"} 1.0"), std::string::npos);
}

TEST(PrefillDelayerTest, DescribesItselfAsSglangLogsIt) {
    PrefillDelayerConfig c = dpa();
    c.queue_min_ratio = 0.25;
    EXPECT_EQ(PrefillDelayer(c).describe(),
              "PrefillDelayer initialized with max_delay_passes=30 token_usage_low_watermark=None "
              "queue_min_ratio=0.25 max_delay_ms=5000 queue_trigger_enabled=True");
}

}  // namespace
}  // namespace tessera::scheduler
