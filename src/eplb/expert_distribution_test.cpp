#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eplb/expert_distribution.h"

namespace tessera::eplb {
namespace {

TEST(Balancedness, IsMeanOverMaxOfRankLoads) {
    EXPECT_NEAR(balancedness({10, 10, 10, 10}), 1.0, 1e-12);
    EXPECT_NEAR(balancedness({40, 0, 0, 0}), (10 + 1e-5) / (40 + 1e-5), 1e-12);
    EXPECT_NEAR(balancedness({30, 10}), (20 + 1e-5) / (30 + 1e-5), 1e-12);
    EXPECT_NEAR(balancedness({0, 0}), 1.0, 1e-12);
}

PassRecord pass(std::int64_t id, std::vector<std::int32_t> counts, std::optional<double> b) {
    PassRecord p;
    p.pass_id = id;
    p.tokens = 1;
    p.logical_count = std::move(counts);
    p.balancedness = b;
    return p;
}

TEST(ExpertDistributionRecorder, StatKeepsACircularWindow) {
    ExpertDistributionRecorder r(RecorderMode::kStat, 2, 1, 3);
    r.record(pass(0, {1, 0, 0}, 0.5));
    EXPECT_EQ(r.buffered_passes(), 0) << "records only while recording";
    r.start();
    r.record(pass(1, {1, 0, 0}, 0.5));
    r.record(pass(2, {0, 2, 0}, std::nullopt));
    r.record(pass(3, {0, 0, 4}, 1.0));
    EXPECT_EQ(r.buffered_passes(), 2);
    EXPECT_EQ(r.logical_count_sum(), (std::vector<float>{0, 2, 4}));
    EXPECT_NEAR(*r.average_balancedness(), 1.0, 1e-12) << "passes without tokens do not count";
    const auto dump = nlohmann::json::parse(r.dump_json(0, {0, 1, 2, 0}));
    EXPECT_EQ(dump["last_physical_to_logical_map"], nlohmann::json::parse("[[0, 1, 2, 0]]"));
    EXPECT_EQ(dump["logical_count"], nlohmann::json::parse("[[[0, 2, 0]], [[0, 0, 4]]]"));
    EXPECT_EQ(dump["average_utilization_rate_over_window"].get<double>(), 1.0);
    r.stop();
    r.record(pass(4, {9, 9, 9}, 1.0));
    EXPECT_EQ(r.buffered_passes(), 2);
}

TEST(ExpertDistributionRecorder, PerPassKeepsEveryPassUnbounded) {
    ExpertDistributionRecorder r(RecorderMode::kPerPass, -1, 2, 2);
    r.start();
    for (int i = 0; i < 300; ++i) r.record(pass(i, {1, 0, 0, 1}, 0.5));
    EXPECT_EQ(r.buffered_passes(), 300);
    const auto dump = nlohmann::json::parse(r.dump_json(3, {0, 1, 0, 1}));
    EXPECT_EQ(dump["rank"], 3);
    ASSERT_EQ(dump["records"].size(), 300u);
    EXPECT_EQ(dump["records"][299]["forward_pass_id"], 299);
    EXPECT_EQ(dump["records"][0]["logical_count"], nlohmann::json::parse("[[1, 0], [0, 1]]"));
    EXPECT_FALSE(parse_recorder_mode("per_layer").ok());
    EXPECT_EQ(parse_recorder_mode("stat_approx").value(), RecorderMode::kStat);
}

}  // namespace
}  // namespace tessera::eplb
