#include "gateway/worker_registry.h"

#include <gtest/gtest.h>

namespace tessera::gateway {
namespace {

using std::chrono::milliseconds;

HealthConfig config() {
    HealthConfig c;
    c.failure_threshold = 3;
    c.success_threshold = 2;
    c.interval = milliseconds(10'000);
    c.first_backoff = milliseconds(1'000);
    return c;
}

TEST(WorkerRegistryTest, NewWorkerIsAdmittedOnItsFirstSuccessAndNotBefore) {
    WorkerRegistry r(config());
    const auto t0 = Clock::now();
    ASSERT_TRUE(r.add("http://127.0.0.1:1", t0).ok());
    EXPECT_FALSE(r.add("http://127.0.0.1:1", t0).ok()) << "a duplicate";
    EXPECT_FALSE(r.add("ftp://x", t0).ok());
    EXPECT_TRUE(r.routable({}).empty()) << "pending workers get no traffic";
    EXPECT_EQ(r.due_for_check(t0).size(), 1u) << "checked at once";
    EXPECT_EQ(r.report("http://127.0.0.1:1", true, "", t0), Transition::kBecameHealthy);
    EXPECT_EQ(r.routable({}).size(), 1u);
    EXPECT_TRUE(r.routable({"http://127.0.0.1:1"}).empty()) << "excluded after a failed attempt";
}

TEST(WorkerRegistryTest, OneFailureDoesNotEvictThresholdDoesThenBackoffAndReadmission) {
    WorkerRegistry r(config());
    const std::string u = "http://127.0.0.1:2";
    auto t = Clock::now();
    ASSERT_TRUE(r.add(u, t).ok());
    r.report(u, true, "", t);
    EXPECT_EQ(r.report(u, false, "refused", t), Transition::kNone);
    EXPECT_EQ(r.report(u, false, "refused", t), Transition::kNone);
    EXPECT_EQ(r.routable({}).size(), 1u) << "two failures: still healthy";
    EXPECT_EQ(r.report(u, false, "refused", t), Transition::kBecameUnhealthy);
    EXPECT_TRUE(r.routable({}).empty());
    // Probed after 1 s, then 2 s, 4 s ... (capped at the interval).
    r.due_for_check(t);
    EXPECT_TRUE(r.due_for_check(t + milliseconds(900)).empty());
    EXPECT_EQ(r.due_for_check(t + milliseconds(1'000)).size(), 1u);
    t += milliseconds(1'000);
    r.report(u, false, "refused", t);
    EXPECT_TRUE(r.due_for_check(t + milliseconds(1'900)).empty());
    EXPECT_EQ(r.due_for_check(t + milliseconds(2'000)).size(), 1u);
    // Back: two consecutive successes re-admit it; a passive success never does.
    t += milliseconds(2'000);
    EXPECT_EQ(r.report(u, true, "", t, /*passive=*/true), Transition::kNone);
    EXPECT_EQ(r.report(u, true, "", t), Transition::kNone);
    EXPECT_TRUE(r.routable({}).empty());
    EXPECT_EQ(r.report(u, true, "", t), Transition::kBecameHealthy);
    EXPECT_EQ(r.routable({}).size(), 1u);
}

TEST(WorkerRegistryTest, SuccessResetsTheFailureCount) {
    WorkerRegistry r(config());
    const std::string u = "http://127.0.0.1:3";
    const auto t = Clock::now();
    ASSERT_TRUE(r.add(u, t).ok());
    r.report(u, true, "", t);
    r.report(u, false, "x", t);
    r.report(u, false, "x", t);
    r.report(u, true, "", t, /*passive=*/true);  // a proxied request succeeded
    r.report(u, false, "x", t);
    r.report(u, false, "x", t);
    EXPECT_EQ(r.routable({}).size(), 1u);
}

TEST(WorkerRegistryTest, RemoveUnhealthyDropsTheWorker) {
    HealthConfig c = config();
    c.failure_threshold = 1;
    c.remove_unhealthy = true;
    WorkerRegistry r(c);
    const auto t = Clock::now();
    ASSERT_TRUE(r.add("http://127.0.0.1:4", t).ok());
    r.report("http://127.0.0.1:4", true, "", t);
    EXPECT_EQ(r.report("http://127.0.0.1:4", false, "gone", t), Transition::kRemoved);
    EXPECT_TRUE(r.urls().empty());
}

TEST(WorkerRegistryTest, InFlightCountsFollowRequests) {
    WorkerRegistry r(config());
    const auto t = Clock::now();
    ASSERT_TRUE(r.add("http://127.0.0.1:5", t).ok());
    r.report("http://127.0.0.1:5", true, "", t);
    r.begin_request("http://127.0.0.1:5", 30);
    r.begin_request("http://127.0.0.1:5", 10);
    auto w = r.routable({}).at(0);
    EXPECT_EQ(w.in_flight, 2);
    EXPECT_EQ(w.in_flight_tokens, 40);
    r.end_request("http://127.0.0.1:5", 30);
    w = r.routable({}).at(0);
    EXPECT_EQ(w.in_flight, 1);
    EXPECT_EQ(w.in_flight_tokens, 10);
    EXPECT_EQ(r.snapshot().at(0).requests, 2);
}

TEST(RetryDelayTest, GrowsByTheMultiplierUpToTheCapWithJitter) {
    RetryConfig c;  // 50 ms, x1.5, max 30 s, jitter 0.2
    EXPECT_EQ(retry_delay(c, 1, 0.5).count(), 50);
    EXPECT_EQ(retry_delay(c, 2, 0.5).count(), 75);
    EXPECT_EQ(retry_delay(c, 3, 0.5).count(), 113);  // 112.5 rounded
    EXPECT_EQ(retry_delay(c, 1, 0.0).count(), 40);   // -20%
    EXPECT_EQ(retry_delay(c, 1, 1.0).count(), 60);   // +20%
    EXPECT_EQ(retry_delay(c, 100, 0.5).count(), 30'000);
}

}  // namespace
}  // namespace tessera::gateway
