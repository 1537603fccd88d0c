#include "gateway/session_routes.h"

#include <gtest/gtest.h>

namespace tessera::gateway {
namespace {

using Clock = SessionRoutes::Clock;
using std::chrono::seconds;

TEST(SessionRoutesTest, ASessionStaysOnItsWorkerUntilClosedOrIdlePastItsTimeout) {
    SessionRoutes routes;
    const Clock::time_point t0 = Clock::now();
    routes.opened("a", "http://w1", std::nullopt, t0);
    routes.opened("b", "http://w2", 10.0, t0);
    EXPECT_EQ(routes.worker("a", t0 + seconds(100'000)), "http://w1") << "no timeout: kept until closed";
    EXPECT_EQ(routes.worker("b", t0 + seconds(60)), "http://w2") << "within the timeout and the grace";
    EXPECT_EQ(routes.worker("b", t0 + seconds(60) + seconds(10) + SessionRoutes::kGrace), "http://w2")
        << "a use starts the idle time again";
    routes.expire(t0 + seconds(300));
    EXPECT_EQ(routes.worker("b", t0 + seconds(300)), std::nullopt);
    EXPECT_EQ(routes.closed("a"), "http://w1");
    EXPECT_EQ(routes.closed("a"), std::nullopt);
    EXPECT_EQ(routes.worker("never", t0), std::nullopt);
    EXPECT_EQ(routes.size(), 0u);
}

TEST(SessionRoutesTest, AWorkerThatLeavesTakesItsSessions) {
    SessionRoutes routes;
    const Clock::time_point t0 = Clock::now();
    routes.opened("a", "http://w1", std::nullopt, t0);
    routes.opened("b", "http://w2", std::nullopt, t0);
    routes.opened("c", "http://w1", std::nullopt, t0);
    routes.forget_worker("http://w1");
    EXPECT_EQ(routes.size(), 1u);
    EXPECT_EQ(routes.worker("b", t0), "http://w2");
    EXPECT_EQ(routes.worker("a", t0), std::nullopt);
}

}  // namespace
}  // namespace tessera::gateway
