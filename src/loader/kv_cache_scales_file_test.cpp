// --quantization-param-path: SGLang's KV cache scales JSON, its checks and their messages.
#include "loader/kv_cache_scales_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tessera::loader {
namespace {

namespace fs = std::filesystem;

class KvCacheScalesFileTest : public ::testing::Test {
 protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tessera_kv_scales_file_" + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& text) {
        const std::string path = (dir_ / "scales.json").string();
        std::ofstream(path) << text;
        return path;
    }
    // The message of reading `text` for TP rank `rank` of 2, 2 layers of a "qwen3".
    std::string error_of(const std::string& text, int rank = 0) {
        auto got = read_kv_cache_scales_file(write(text), {rank, 2, 2, "qwen3"});
        EXPECT_FALSE(got.ok());
        return got.ok() ? "" : got.status().message();
    }

    fs::path dir_;
};

constexpr const char* kTwoRanks = R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
    "scaling_factor": {"0": {"0": 0.5, "1": 2}, "1": {"0": 0.25, "1": 4.0}}}})";

TEST_F(KvCacheScalesFileTest, EachRankTakesItsLayers) {
    auto zero = read_kv_cache_scales_file(write(kTwoRanks), {0, 2, 2, "qwen3"});
    ASSERT_TRUE(zero.ok()) << zero.status().message();
    EXPECT_EQ(*zero, (std::vector<float>{0.5f, 2.0f}));
    auto one = read_kv_cache_scales_file(write(kTwoRanks), {1, 2, 2, "qwen3"});
    ASSERT_TRUE(one.ok()) << one.status().message();
    EXPECT_EQ(*one, (std::vector<float>{0.25f, 4.0f}));
}

TEST_F(KvCacheScalesFileTest, SglangChecksAndMessages) {
    const std::string path = (dir_ / "scales.json").string();
    EXPECT_EQ(error_of(R"({"model_type": "llama", "kv_cache": {"dtype": "float8_e4m3fn", "scaling_factor": {}}})"),
              "--quantization-param-path " + path +
                  ": Model type is qwen3 but loaded scaling factors belonging to different model type llama!");
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e5m2", "scaling_factor": {}}})")
                  .find("Loaded scaling factors intended for KV cache dtype = float8_e5m2 rather than float8_e4m3fn!"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"0": {"0": 1, "1": 1}}}})")
                  .find("Loaded dictionary has TP size 1 but LLM engine is currently running with TP size 2."),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"0": {"0": 1, "1": 1}, "2": {"0": 1, "1": 1}}}})")
                  .find("KV cache scales map for TP rank 1 not found."),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"0": {"0": 1}, "1": {"0": 1, "1": 1}}}})")
                  .find("KV cache scales map for TP rank 0 is malformed. Expected 2 layers, got 1."),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"0": {"0": 1, "1": 1}, "1": {"0": 1, "7": 1}}}})", 1)
                  .find("Could not find KV cache scales for layer 1 in TP rank 1."),
              std::string::npos);
}

TEST_F(KvCacheScalesFileTest, BadFilesStopTheLaunch) {
    auto missing = read_kv_cache_scales_file((dir_ / "none.json").string(), {0, 1, 2, "qwen3"});
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("none.json' not found."), std::string::npos);
    EXPECT_NE(error_of("{\"model_type\": ").find("Error decoding JSON in file"), std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"0": {"0": 1, "1": 0}, "1": {"0": 1, "1": 1}}}})")
                  .find("the scaling factor of layer 1 in TP rank 0 is 0: it must be a positive number"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3", "kv_cache": {"dtype": "float8_e4m3fn",
                           "scaling_factor": {"zero": {}}}})")
                  .find("has the key \"zero\": keys are integers from 0"),
              std::string::npos);
    EXPECT_NE(error_of(R"({"model_type": "qwen3"})").find("no \"kv_cache\" object"), std::string::npos);
}

}  // namespace
}  // namespace tessera::loader
