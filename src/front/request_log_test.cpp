#include "front/request_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::front {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> json_lines(const fs::path& file) {
    std::ifstream in(file);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
}

// The one file of `dir` (empty when there is none or several).
fs::path only_file(const fs::path& dir) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
    return files.size() == 1 ? files[0] : fs::path();
}

class RequestLogTargetTest : public ::testing::Test {
 protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("request_log_test_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

// json lines go to <dir>/<host>_<rank>.log (and stdout), not the log; an hour later the file
// is renamed after the hour it began in and a new one takes the next lines.
TEST_F(RequestLogTargetTest, JsonLinesGoToStdoutAndHourlyFiles) {
    auto now = std::chrono::system_clock::from_time_t(1'800'000'000);
    RequestLogOptions options{
        .enabled = true, .level = 0, .json = true, .targets = {"stdout", (dir_ / "logs").string()}, .rank = 3};
    options.clock = [&now] { return now; };
    ASSERT_TRUE(check_request_log_targets(options).ok());
    const RequestLog log(options);
    server::GenerationInput input;
    input.text = "hello";
    testing::internal::CaptureStdout();
    log.received("r1", input, server::GenerationParams{}, 5);
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(nlohmann::json::parse(out)["rid"], "r1");

    const fs::path file = only_file(dir_ / "logs");
    EXPECT_NE(file.filename().string().find("_3.log"), std::string::npos) << file;
    auto lines = json_lines(file);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["event"], "receive");
    EXPECT_EQ(lines[0]["prompt_tokens"], 5);
    EXPECT_FALSE(lines[0].contains("text")) << "level 0 leaves the input out";

    now += std::chrono::minutes(61);
    testing::internal::CaptureStdout();
    log.finished("r1", "stop", server::Usage{.prompt_tokens = 5, .completion_tokens = 2}, "ok");
    testing::internal::GetCapturedStdout();
    lines = json_lines(file);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0]["event"], "finish");
    EXPECT_EQ(lines[0]["completion_tokens"], 2);
    std::time_t began = 1'800'000'000;
    std::tm local{};
    localtime_r(&began, &local);
    char suffix[32];
    std::strftime(suffix, sizeof(suffix), "%Y-%m-%d_%H", &local);
    const fs::path rotated = file.string() + "." + suffix;
    ASSERT_TRUE(fs::exists(rotated)) << rotated;
    EXPECT_EQ(json_lines(rotated).at(0)["event"], "receive");
}

TEST_F(RequestLogTargetTest, UnwritableTargetIsRefusedNamingIt) {
    fs::create_directories(dir_);
    std::ofstream(dir_ / "plain_file") << "x";
    const std::string target = (dir_ / "plain_file" / "logs").string();
    const Status s = check_request_log_targets({.enabled = true, .level = 0, .json = true, .targets = {target}});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--log-requests-target " + target + ": cannot write"), std::string::npos)
        << s.message();
    EXPECT_TRUE(check_request_log_targets({.enabled = true, .level = 0, .json = true, .targets = {"stdout"}}).ok());
}

// /configure_logging: request logging turned on, its level and format changed, and off again,
// while the log object serves; json lines then go to the launch's targets.
TEST_F(RequestLogTargetTest, ConfigureChangesLoggingWhileServing) {
    RequestLog log({.enabled = false, .level = 2, .json = false, .targets = {"stdout"}});
    server::GenerationInput input;
    input.text = "hello there";
    const auto received = [&] {
        testing::internal::CaptureStdout();
        log.received("r1", input, server::GenerationParams{}, 5);
        return testing::internal::GetCapturedStdout();
    };
    EXPECT_FALSE(log.on());
    EXPECT_EQ(received(), "") << "off";
    log.configure(true, 1, true);
    EXPECT_TRUE(log.on());
    const std::string line = received();
    ASSERT_FALSE(line.empty()) << "on, json to the launch's stdout target";
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_TRUE(j.contains("sampling_params")) << "level 1";
    EXPECT_FALSE(j.contains("text")) << "level 1 leaves the input out";
    EXPECT_EQ(log.output_chars(), 0u);
    log.configure(std::nullopt, 3, std::nullopt);
    EXPECT_EQ(log.output_chars(), std::string::npos) << "level 3: all of it";
    EXPECT_TRUE(nlohmann::json::parse(received()).contains("text"));
    log.configure(false, std::nullopt, std::nullopt);
    EXPECT_EQ(received(), "");
}

}  // namespace
}  // namespace tessera::front
