#include "scheduler/schedule_policy.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

std::vector<std::size_t> order(SchedulePolicy p, const std::vector<WaitingReqView>& q,
                               PolicyOptions opts = {}) {
    PolicyRng rng(7);
    return order_waiting_queue(p, q, opts, rng);
}

TEST(SchedulePolicyTest, ParsesSglangNamesAndRejectsUnimplemented) {
    EXPECT_EQ(parse_schedule_policy("lpm").value(), SchedulePolicy::kLpm);
    EXPECT_EQ(parse_schedule_policy("fcfs").value(), SchedulePolicy::kFcfs);
    EXPECT_EQ(parse_schedule_policy("lof").value(), SchedulePolicy::kLof);
    EXPECT_EQ(parse_schedule_policy("random").value(), SchedulePolicy::kRandom);
    EXPECT_EQ(parse_schedule_policy("priority").value(), SchedulePolicy::kPriority);
    for (const char* name : {"dfs-weight", "routing-key"}) {
        auto p = parse_schedule_policy(name);
        ASSERT_FALSE(p.ok());
        EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
        EXPECT_NE(p.status().message().find(name), std::string::npos);
    }
    EXPECT_EQ(parse_schedule_policy("sjf").status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulePolicyTest, LpmSortsByPrefixAndKeepsQueueOrderOnTies) {
    std::vector<WaitingReqView> q = {{.queue_entry = 0, .prefix_len = 4}, {.queue_entry = 1, .prefix_len = 16},
                                     {.queue_entry = 2, .prefix_len = 4}, {.queue_entry = 3, .prefix_len = 32}};
    EXPECT_EQ(order(SchedulePolicy::kLpm, q), (std::vector<std::size_t>{3, 1, 0, 2}));
}

TEST(SchedulePolicyTest, LpmFallsBackToFcfsWithoutCacheOrWithALongQueue) {
    std::vector<WaitingReqView> q = {{.prefix_len = 1}, {.prefix_len = 9}};
    EXPECT_EQ(order(SchedulePolicy::kLpm, q, {.radix_cache_enabled = false}),
              (std::vector<std::size_t>{0, 1}));
    std::vector<WaitingReqView> long_q(kLpmMaxQueueLen + 1);
    long_q.back().prefix_len = 100;
    EXPECT_EQ(order(SchedulePolicy::kLpm, long_q).front(), 0u);
    long_q.pop_back();
    long_q.back().prefix_len = 100;
    EXPECT_EQ(order(SchedulePolicy::kLpm, long_q).front(), kLpmMaxQueueLen - 1);
    EXPECT_EQ(effective_policy(SchedulePolicy::kLof, 1000, false), SchedulePolicy::kLof);
}

TEST(SchedulePolicyTest, LofPriorityAndRandom) {
    std::vector<WaitingReqView> q = {{.queue_entry = 0, .max_new_tokens = 8, .priority = 1},
                                     {.queue_entry = 1, .max_new_tokens = 64, .priority = 5},
                                     {.queue_entry = 2, .max_new_tokens = 16, .priority = 5}};
    EXPECT_EQ(order(SchedulePolicy::kLof, q), (std::vector<std::size_t>{1, 2, 0}));
    EXPECT_EQ(order(SchedulePolicy::kPriority, q), (std::vector<std::size_t>{1, 2, 0}));
    EXPECT_EQ(order(SchedulePolicy::kPriority, q, {.low_priority_values_first = true}),
              (std::vector<std::size_t>{0, 1, 2}));
    auto r1 = order(SchedulePolicy::kRandom, std::vector<WaitingReqView>(20));
    auto r2 = order(SchedulePolicy::kRandom, std::vector<WaitingReqView>(20));
    EXPECT_EQ(r1, r2);  // seeded
    std::sort(r1.begin(), r1.end());
    for (std::size_t i = 0; i < r1.size(); ++i) EXPECT_EQ(r1[i], i);
}

TEST(SchedulePolicyTest, PrioritySchedulingOrdersFcfsAndLofByPriorityFirst) {
    // Entry 3 rejoined the queue last (a retracted request), entry 0 is the oldest.
    std::vector<WaitingReqView> q = {{.queue_entry = 3, .max_new_tokens = 8, .priority = 5},
                                     {.queue_entry = 0, .max_new_tokens = 16, .priority = 1},
                                     {.queue_entry = 1, .max_new_tokens = 64, .priority = 5},
                                     {.queue_entry = 2, .max_new_tokens = 32, .priority = 1}};
    const PolicyOptions on{.priority_scheduling = true};
    EXPECT_EQ(order(SchedulePolicy::kFcfs, q), (std::vector<std::size_t>{0, 1, 2, 3}));  // off: queue order
    EXPECT_EQ(order(SchedulePolicy::kFcfs, q, on), (std::vector<std::size_t>{2, 0, 1, 3}));
    EXPECT_EQ(order(SchedulePolicy::kLof, q, on), (std::vector<std::size_t>{2, 0, 3, 1}));
    const PolicyOptions low_first{.low_priority_values_first = true, .priority_scheduling = true};
    EXPECT_EQ(order(SchedulePolicy::kFcfs, q, low_first), (std::vector<std::size_t>{1, 3, 2, 0}));
    EXPECT_EQ(order(SchedulePolicy::kLof, q, low_first), (std::vector<std::size_t>{3, 1, 2, 0}));
}

}  // namespace
}  // namespace tessera::scheduler
