#include "gateway/policy.h"

#include <gtest/gtest.h>

namespace tessera::gateway {
namespace {

WorkerState worker(const std::string& url, std::int64_t in_flight = 0) {
    WorkerState w;
    w.url = url;
    w.in_flight = in_flight;
    return w;
}

TEST(PolicyTest, ParsesGatewayAndDpNames) {
    EXPECT_EQ(parse_policy("cache_aware").value(), PolicyKind::kCacheAware);
    EXPECT_EQ(parse_policy("auto").value(), PolicyKind::kRoundRobin);
    EXPECT_EQ(parse_policy("shortest_queue").value(), PolicyKind::kTotalRequests);
    EXPECT_EQ(parse_policy("minimum_tokens").value(), PolicyKind::kTotalTokens);
    EXPECT_FALSE(parse_policy("follow_bootstrap_room").ok());
    EXPECT_NE(parse_policy("bogus").status().message().find("cache_aware"), std::string::npos);
}

TEST(PolicyTest, RoundRobinCyclesOverTheCandidates) {
    Router r(PolicyKind::kRoundRobin, {}, 1);
    std::vector<WorkerState> ws{worker("a"), worker("b"), worker("c")};
    EXPECT_EQ(r.pick(ws, ""), 0u);
    EXPECT_EQ(r.pick(ws, ""), 1u);
    EXPECT_EQ(r.pick(ws, ""), 2u);
    EXPECT_EQ(r.pick(ws, ""), 0u);
}

TEST(PolicyTest, TotalRequestsAndTokensPickTheLeastLoadedFirstOnTies) {
    Router req(PolicyKind::kTotalRequests, {}, 1);
    std::vector<WorkerState> ws{worker("a", 3), worker("b", 1), worker("c", 1)};
    EXPECT_EQ(req.pick(ws, ""), 1u);
    Router tok(PolicyKind::kTotalTokens, {}, 1);
    ws[0].in_flight_tokens = 10;
    ws[1].in_flight_tokens = 500;
    ws[2].in_flight_tokens = 40;
    EXPECT_EQ(tok.pick(ws, ""), 0u);
}

TEST(PolicyTest, PowerOfTwoPrefersReportedTokensOverRequestCounts) {
    // With two workers both are always drawn: the lower load wins.
    Router r(PolicyKind::kPowerOfTwo, {}, 7);
    std::vector<WorkerState> ws{worker("a", 1), worker("b", 5)};
    for (int i = 0; i < 10; ++i) EXPECT_EQ(r.pick(ws, ""), 0u);
    ws[0].tokens = 9000;  // both report tokens: tokens decide, not requests
    ws[1].tokens = 100;
    for (int i = 0; i < 10; ++i) EXPECT_EQ(r.pick(ws, ""), 1u);
    ws[1].tokens = -1;  // one does not report: back to requests
    for (int i = 0; i < 10; ++i) EXPECT_EQ(r.pick(ws, ""), 0u);
}

TEST(PolicyTest, CacheAwareFollowsThePrefixAboveTheThreshold) {
    Router r(PolicyKind::kCacheAware, {}, 1);
    std::vector<WorkerState> ws{worker("a"), worker("b")};
    const std::string doc(200, 'x');
    // First request: no match; least loaded (a, then the smaller tree).
    EXPECT_EQ(r.pick(ws, doc + " question one"), 0u);
    EXPECT_FALSE(r.last_was_cache_hit());
    ws[0].in_flight = 1;
    // Same 200-byte prefix: match rate 200/214 > 0.3 → a, though b is less loaded.
    EXPECT_EQ(r.pick(ws, doc + " question two"), 0u);
    EXPECT_TRUE(r.last_was_cache_hit());
    // A different text: low match → least loaded (b).
    EXPECT_EQ(r.pick(ws, "something else entirely"), 1u);
    EXPECT_FALSE(r.last_was_cache_hit());
}

TEST(PolicyTest, CacheAwareSwitchesToShortestQueueWhenImbalanced) {
    CacheAwareConfig c;
    c.balance_abs_threshold = 4;
    c.balance_rel_threshold = 1.5;
    Router r(PolicyKind::kCacheAware, c, 1);
    std::vector<WorkerState> ws{worker("a"), worker("b")};
    const std::string text = "the same prompt text";
    EXPECT_EQ(r.pick(ws, text), 0u);
    // a: 6, b: 1 → 6 - 1 > 4 and 6 > 1.5: imbalanced, the cache is ignored.
    ws[0].in_flight = 6;
    ws[1].in_flight = 1;
    EXPECT_EQ(r.pick(ws, text), 1u);
    EXPECT_FALSE(r.last_was_cache_hit());
    // a: 5, b: 1 → 5 - 1 = 4, not > 4: balanced, the cache wins over the lighter b.
    ws[0].in_flight = 5;
    EXPECT_EQ(r.pick(ws, "the same prompt text, again"), 1u) << "b holds the text most recently";
    Router fresh(PolicyKind::kCacheAware, c, 1);
    EXPECT_EQ(fresh.pick({worker("a"), worker("b")}, text), 0u);
    EXPECT_EQ(fresh.pick(ws, text), 0u) << "a holds the text; 5 vs 1 in flight is not imbalanced";
    EXPECT_TRUE(fresh.last_was_cache_hit());
}

TEST(PolicyTest, CacheHitOnAnOverloadedWorkerLosesToBalance) {
    Router r(PolicyKind::kCacheAware, {}, 1);
    std::vector<WorkerState> ws{worker("a"), worker("b"), worker("c")};
    const std::string text(300, 'p');
    EXPECT_EQ(r.pick(ws, text), 0u);
    // a's KV is 95% full: the hit goes to the least pressed worker (c: no queue, less KV).
    ws[0].kv_usage = 0.95;
    ws[1].kv_usage = 0.5;
    ws[2].kv_usage = 0.2;
    ws[0].waiting = ws[1].waiting = ws[2].waiting = 0;
    EXPECT_EQ(r.pick(ws, text), 2u);
    EXPECT_FALSE(r.last_was_cache_hit());
    // A long queue overloads too (4 more waiting than the shortest queue).
    Router q(PolicyKind::kCacheAware, {}, 1);
    std::vector<WorkerState> qs{worker("a"), worker("b")};
    EXPECT_EQ(q.pick(qs, text), 0u);
    qs[0].waiting = 4;
    qs[1].waiting = 0;
    EXPECT_TRUE(q.overloaded(qs[0], qs));
    EXPECT_EQ(q.pick(qs, text), 1u);
    qs[0].waiting = 3;  // 3 more than the shortest: still takes its cache hit
    EXPECT_FALSE(q.overloaded(qs[0], qs));
    // Request counts alone never overload: a has 40 in flight but reports no queue.
    qs[0].waiting = 0;
    qs[0].in_flight = 40;
    EXPECT_FALSE(q.overloaded(qs[0], qs));
}

TEST(PolicyTest, EstimatesTokensFromBytes) {
    EXPECT_EQ(estimate_tokens(""), 1);
    EXPECT_EQ(estimate_tokens(std::string(400, 'a')), 100);
}

}  // namespace
}  // namespace tessera::gateway
