// Which running requests a waiting one preempts (SGLang's PrefillAdder.preempt_to_schedule).
#include "scheduler/priority_preemption.h"

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

using Victims = std::vector<std::size_t>;

TEST(PriorityPreemptionTest, WorstFirstLatestAmongEqualsAndOnlyBeyondTheThreshold) {
    const std::vector<PreemptionCandidate> running = {{.priority = 3, .queue_entry = 1, .remaining_tokens = 10},
                                                      {.priority = 0, .queue_entry = 2, .remaining_tokens = 10},
                                                      {.priority = 0, .queue_entry = 5, .remaining_tokens = 10},
                                                      {.priority = 20, .queue_entry = 0, .remaining_tokens = 10}};
    const PriorityOrder high_first{};
    // Room already (need <= 0): one victim, the worst and latest.
    EXPECT_EQ(choose_preemption({.priority = 11, .tokens_needed = -5}, running, high_first, 10, 1.0), Victims{2});
    // A gap of exactly the threshold does not preempt: 10 − 0 is not > 10.
    EXPECT_EQ(choose_preemption({.priority = 10, .tokens_needed = -5}, running, high_first, 10, 1.0), Victims{});
    // Tokens: each victim frees remaining · ratio (10 · 0.5); 12 needs three, but the third
    // (priority 3) is within the threshold of 13, so nothing is preempted.
    EXPECT_EQ(choose_preemption({.priority = 13, .tokens_needed = 12}, running, high_first, 10, 0.5), Victims{});
    EXPECT_EQ(choose_preemption({.priority = 14, .tokens_needed = 12}, running, high_first, 10, 0.5),
              (Victims{2, 1, 0}));
    EXPECT_EQ(choose_preemption({.priority = 14, .tokens_needed = 10}, running, high_first, 10, 0.5), (Victims{2, 1}));
}

TEST(PriorityPreemptionTest, LowValuesFirstReversesTheOrder) {
    const std::vector<PreemptionCandidate> running = {{.priority = 3, .queue_entry = 1, .remaining_tokens = 10},
                                                      {.priority = 20, .queue_entry = 0, .remaining_tokens = 10}};
    const PriorityOrder low_first{.low_values_first = true};
    EXPECT_EQ(choose_preemption({.priority = 5, .tokens_needed = 0}, running, low_first, 10, 1.0), Victims{1});
    EXPECT_EQ(choose_preemption({.priority = 10, .tokens_needed = 0}, running, low_first, 10, 1.0), Victims{});
}

TEST(PriorityPreemptionTest, RequestsWithoutAPriorityAreWorstAndCanBePreempted) {
    for (const bool low_first : {false, true}) {
        const PriorityOrder order{.low_values_first = low_first};
        const std::vector<PreemptionCandidate> running = {{.priority = order.worst(), .remaining_tokens = 4}};
        EXPECT_EQ(choose_preemption({.priority = 0, .tokens_needed = 1}, running, order, 10, 1.0), Victims{0});
        // An unprioritised newcomer preempts nothing.
        EXPECT_EQ(choose_preemption({.priority = order.worst(), .tokens_needed = 1}, running, order, 10, 1.0),
                  Victims{});
    }
}

}  // namespace
}  // namespace tessera::scheduler
