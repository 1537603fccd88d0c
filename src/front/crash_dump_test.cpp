#include "front/crash_dump.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera::front {
namespace {

namespace fs = std::filesystem;

server::GenerationEvent event(std::string text, std::vector<std::int32_t> ids, const char* finish = nullptr) {
    server::GenerationEvent e;
    e.text = std::move(text);
    e.token_ids = std::move(ids);
    e.usage = {3, static_cast<std::int64_t>(e.token_ids.size()), 0};
    if (finish) e.finish_reason = finish;
    return e;
}

// The requests finished in the last five minutes and the running ones, with what they wrote,
// once; nothing when there is nothing to write.
TEST(CrashDumpTest, WritesRecentAndRunningRequestsOnce) {
    const fs::path dir = fs::temp_directory_path() / ("crash_dump_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ASSERT_TRUE(CrashDump::check_folder(dir.string()).ok());
    auto now = std::chrono::system_clock::from_time_t(1'800'000'000);
    CrashDump dump(dir.string(), R"({"tp_size": 2})", [&now] { return now; });
    EXPECT_EQ(dump.write("nothing yet").value(), "");

    dump.received("old", R"({"rid": "old", "text": "a"})");
    dump.on_event("old", event("x", {1}, "length"));
    now += std::chrono::minutes(6);  // finished more than five minutes before the dump: left out
    dump.received("done", R"({"rid": "done", "text": "b"})");
    dump.on_event("done", event("he", {2}));
    dump.on_event("done", event("llo", {3}, "stop"));
    dump.received("running", R"({"rid": "running", "input_ids": [5]})");
    dump.on_event("running", event("par", {4}));

    const auto path = dump.write("ranks lost");
    ASSERT_TRUE(path.ok());
    ASSERT_FALSE(path.value().empty());
    EXPECT_NE(path.value().find("/crash_dump_"), std::string::npos);
    std::ifstream in(path.value());
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["reason"], "ranks lost");
    EXPECT_EQ(j["server_args"]["tp_size"], 2);
    ASSERT_EQ(j["requests"].size(), 2u);
    EXPECT_EQ(j["requests"][0]["request"]["rid"], "done");
    EXPECT_EQ(j["requests"][0]["output"]["text"], "hello");
    EXPECT_EQ(j["requests"][0]["output"]["output_ids"], nlohmann::json::array({2, 3}));
    EXPECT_EQ(j["requests"][0]["output"]["meta_info"]["finish_reason"]["type"], "stop");
    EXPECT_EQ(j["requests"][1]["request"]["rid"], "running");
    EXPECT_TRUE(j["requests"][1]["output"]["meta_info"]["finish_reason"].is_null());
    EXPECT_TRUE(j["requests"][1]["finished_time"].is_null());
    EXPECT_EQ(dump.write("again").value(), path.value()) << "written once";
    fs::remove_all(dir);
}

TEST(CrashDumpTest, AFolderThatCannotBeWrittenIsRefused) {
    const Status s = CrashDump::check_folder("/proc/no/such");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--crash-dump-folder /proc/no/such"), std::string::npos);
}

}  // namespace
}  // namespace tessera::front
