#include "loader/model_checksum.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/sha256.h"

namespace tessera::loader {
namespace {

namespace fs = std::filesystem;

class ModelChecksumTest : public ::testing::Test {
 protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tessera_checksum_" + std::to_string(getpid()));
        fs::create_directories(dir_);
        write("model.safetensors", "weights");
        write("config.json", "{}");
        write("README.md", "not listed");
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
    std::string manifest(const std::string& json) {
        const fs::path path = dir_ / "checksums.json";
        std::ofstream(path) << json;
        return path.string();
    }
    fs::path dir_;
};

// What `tessera checksum` writes, read back: every file but the README, and it verifies.
TEST_F(ModelChecksumTest, TheWrittenManifestVerifies) {
    auto written = model_files_manifest(dir_.string());
    ASSERT_TRUE(written.ok()) << written.status().message();
    EXPECT_EQ(written->find("README"), std::string::npos);
    EXPECT_NE(written->find("\"model.safetensors\""), std::string::npos);
    EXPECT_NE(written->find(sha256_hex("weights")), std::string::npos);
    const std::string path = manifest(*written);
    EXPECT_TRUE(verify_model_files(dir_.string(), path).ok());
    // The legacy form of the manifest, too.
    EXPECT_TRUE(verify_model_files(dir_.string(), manifest(R"({"checksums": {"config.json": ")" + sha256_hex("{}") +
                                                          "\"}}"))
                    .ok());
}

// A changed file, a missing one and a wrong size, in SGLang's words and all at once.
TEST_F(ModelChecksumTest, MismatchesAndMissingFilesAreNamed) {
    const std::string good = sha256_hex("weights");
    const std::string path = manifest(R"({"files": {"model.safetensors": {"sha256": ")" + good +
                                      R"(", "size": 7}, "config.json": {"sha256": ")" + sha256_hex("[]") +
                                      R"(", "size": 2}, "model-2.safetensors": {"sha256": ")" + good +
                                      R"(", "size": 99}}})");
    Status s = verify_model_files(dir_.string(), path);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_EQ(s.message(), "Integrity check failed: config.json: mismatch (expected=" + sha256_hex("[]").substr(0, 16) +
                               "... size=2, actual=" + sha256_hex("{}").substr(0, 16) +
                               "... size=2); model-2.safetensors: missing (expected size=99)");
    write("model.safetensors", "weightz");
    s = verify_model_files(dir_.string(), manifest(R"({"files": {"model.safetensors": {"sha256": ")" + good + "\"}}}"));
    EXPECT_NE(s.message().find("model.safetensors: mismatch (expected=" + good.substr(0, 16) + "... size=?, actual="),
              std::string::npos)
        << s.message();
}

TEST_F(ModelChecksumTest, BadManifestsAreRefusedWithTheirFlaw) {
    const auto refused = [&](const std::string& json, const std::string& flaw) {
        const Status s = verify_model_files(dir_.string(), manifest(json));
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << json;
        EXPECT_NE(s.message().find(flaw), std::string::npos) << s.message();
    };
    refused("[1, 2]", "not a JSON object");
    refused(R"({"other": {}})", "no \"files\" or \"checksums\"");
    refused(R"({"files": {}})", "lists no files");
    refused(R"({"files": {"a": {"size": 3}}})", "\"a\" has no \"sha256\" string");
    refused(R"({"checksums": {"a": "abc"}})", "is not a SHA-256 hex digest");
    refused(R"({"checksums": {"../x": ")" + sha256_hex("x") + "\"}}", "is not a file name inside the model folder");
    EXPECT_EQ(verify_model_files(dir_.string(), (dir_ / "none.json").string()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::loader
