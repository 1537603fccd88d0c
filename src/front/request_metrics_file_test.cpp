#include "front/request_metrics_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera::front {
namespace {

namespace fs = std::filesystem;

std::string hour_name(std::chrono::system_clock::time_point t) {
    const std::time_t c = std::chrono::system_clock::to_time_t(t);
    std::tm local{};
    localtime_r(&c, &local);
    char buf[64];
    std::strftime(buf, sizeof(buf), "sglang-request-metrics-%Y%m%d_%H.log", &local);
    return buf;
}

std::vector<nlohmann::json> lines_of(const fs::path& file) {
    std::ifstream in(file);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
}

// A line per finished request, in the file of the local hour it finished in: the parameters as
// a JSON string, then the meta_info fields.
TEST(RequestMetricsFileTest, OneLinePerRequestInTheFileOfItsHour) {
    const fs::path dir = fs::temp_directory_path() / ("request_metrics_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ASSERT_TRUE(RequestMetricsFile::check_directory((dir / "metrics").string()).ok());
    auto now = std::chrono::system_clock::from_time_t(1'800'000'000);
    RequestMetricsFile file((dir / "metrics").string(), [&now] { return now; });
    server::GenerationInput input{.text = "hello"};
    server::GenerationParams params;
    params.max_new_tokens = 5;
    params.stop = {"\n"};
    const std::string parameters = RequestMetricsFile::parameters_json("r1", input, params);
    file.write(parameters, {.rid = "r1", .finish_reason = "length", .usage = {7, 5, 2}, .e2e_latency_s = 0.25});
    now += std::chrono::hours(1);
    file.write(parameters, {.rid = "r2", .finish_reason = "stop", .matched_stop = "\n", .usage = {7, 1, 0}});

    const auto first = lines_of(dir / "metrics" / hour_name(now - std::chrono::hours(1)));
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0]["id"], "r1");
    EXPECT_EQ(first[0]["finish_reason"], nlohmann::json({{"type", "length"}, {"length", 5}}));
    EXPECT_EQ(first[0]["prompt_tokens"], 7);
    EXPECT_EQ(first[0]["completion_tokens"], 5);
    EXPECT_EQ(first[0]["cached_tokens"], 2);
    EXPECT_DOUBLE_EQ(first[0]["e2e_latency"].get<double>(), 0.25);
    ASSERT_TRUE(first[0]["request_parameters"].is_string());
    const auto request = nlohmann::json::parse(first[0]["request_parameters"].get<std::string>());
    EXPECT_EQ(request["text"], "hello");
    EXPECT_EQ(request["rid"], "r1");
    EXPECT_EQ(request["sampling_params"]["max_new_tokens"], 5);
    EXPECT_EQ(request["sampling_params"]["stop"], nlohmann::json::array({"\n"}));

    const auto second = lines_of(dir / "metrics" / hour_name(now));
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0]["finish_reason"], nlohmann::json({{"type", "stop"}, {"matched", "\n"}}));
    fs::remove_all(dir);
}

TEST(RequestMetricsFileTest, ADirectoryThatCannotBeWrittenIsRefused) {
    const Status s = RequestMetricsFile::check_directory("/proc/no/such/dir");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--export-metrics-to-file-dir /proc/no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace tessera::front
