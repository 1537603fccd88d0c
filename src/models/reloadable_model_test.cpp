// models/reloadable_model_test.cpp — /update_weights_from_disk at the model: a control step
// with another folder of the same model swaps in its weights (the logits become that folder's),
// and every refusal (another model, no weights, a format that cannot update) keeps the weights
// that were served.

#include "models/reloadable_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "models/test_model_folder.h"

namespace tessera::models {
namespace {

namespace fs = std::filesystem;

class ReloadableModelTest : public ::testing::Test {
 protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("tessera_reloadable_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        testing::write_model(root_ / "step0", "qwen3", 1);
        testing::write_model(root_ / "step1", "qwen3", 2);
        testing::write_model(root_ / "deeper", "qwen3", 2, testing::kLayers + 1);
    }
    void TearDown() override { fs::remove_all(root_); }

    LoadOptions options(const std::string& folder) const {
        LoadOptions o;
        o.model_path = (root_ / folder).string();
        o.dtype = "f32";
        return o;
    }
    std::unique_ptr<Model> load(const std::string& folder) const {
        auto m = load_model(options(folder));
        EXPECT_TRUE(m.ok()) << m.status().to_string();
        return m.ok() ? std::move(m).value() : nullptr;
    }
    // The logits of a 4-token prompt over a fresh cache.
    static std::vector<float> logits(Model& m) {
        kvcache::KvCache cache(m.kv_cache_shape(), 16);
        const std::vector<std::int32_t> tokens = {3, 17, 150, 42};
        std::vector<float> out;
        EXPECT_TRUE(m.forward(ForwardInput{tokens, 0, false}, cache, nullptr, &out).ok());
        return out;
    }
    // The update's two steps, as the scheduler runs them: load, then commit or discard.
    static Status update(Model& m, const std::string& path, const std::string& format = "") {
        WeightsSource source{path, format};
        kvcache::KvCache cache(m.kv_cache_shape(), 16);
        const auto step = [&](WeightsPhase phase, bool* loaded) {
            source.phase = phase;
            BatchInput batch;
            batch.load_weights = &source;
            batch.weights_loaded = loaded;
            std::vector<float> out{1.0f};
            Status s = m.forward(batch, cache.view(), nullptr, &out);
            EXPECT_TRUE(out.empty()) << "a control step has no output";
            return s;
        };
        bool loaded = false;
        const Status s = step(WeightsPhase::kLoad, &loaded);
        EXPECT_EQ(loaded, s.ok());
        EXPECT_TRUE(step(s.ok() ? WeightsPhase::kCommit : WeightsPhase::kDiscard, nullptr).ok());
        return s;
    }

    fs::path root_;
};

TEST_F(ReloadableModelTest, AnotherFolderOfTheSameModelSwapsItsWeightsIn) {
    ReloadableModel served(load("step0"), options("step0"));
    const std::vector<float> before = logits(served);
    const std::vector<float> want = logits(*load("step1"));
    ASSERT_NE(before, want);

    const Status s = update(served, (root_ / "step1").string(), "safetensors");
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(logits(served), want);
    // And back, with the launch's load format.
    ASSERT_TRUE(update(served, (root_ / "step0").string()).ok());
    EXPECT_EQ(logits(served), before);
}

TEST_F(ReloadableModelTest, RefusalsKeepTheServedWeights) {
    ReloadableModel served(load("step0"), options("step0"));
    const std::vector<float> before = logits(served);
    struct Case {
        std::string path, format, cause;
    };
    const std::vector<Case> cases = {
        {(root_ / "deeper").string(), "", "another model: its num_hidden_layers is 5, the served model's is 4"},
        {(root_ / "missing").string(), "", "config.json"},
        {(root_ / "step1").string(), "dummy", "load_format dummy cannot update weights: use auto or safetensors"},
    };
    for (const Case& c : cases) {
        const Status s = update(served, c.path, c.format);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.path;
        EXPECT_NE(s.message().find(c.cause), std::string::npos) << s.message();
        EXPECT_EQ(logits(served), before) << c.path;
    }
}

// Under pipeline parallelism a stage after a failed one does not load, and the served weights
// stay until the commit.
TEST_F(ReloadableModelTest, LoadedWeightsServeOnlyAfterTheCommit) {
    ReloadableModel served(load("step0"), options("step0"));
    const std::vector<float> before = logits(served);
    WeightsSource source{(root_ / "step1").string(), ""};
    source.earlier_stages_loaded = false;
    kvcache::KvCache cache(served.kv_cache_shape(), 16);
    std::vector<float> out;
    bool loaded = true;
    BatchInput batch;
    batch.load_weights = &source;
    batch.weights_loaded = &loaded;
    const Status skipped = served.forward(batch, cache.view(), nullptr, &out);
    EXPECT_NE(skipped.message().find("an earlier pipeline stage could not load"), std::string::npos)
        << skipped.message();
    EXPECT_FALSE(loaded);
    source.earlier_stages_loaded = true;
    ASSERT_TRUE(served.forward(batch, cache.view(), nullptr, &out).ok());
    EXPECT_TRUE(loaded);
    EXPECT_EQ(logits(served), before) << "loaded, not committed";
    source.phase = WeightsPhase::kCommit;
    ASSERT_TRUE(served.forward(batch, cache.view(), nullptr, &out).ok());
    EXPECT_NE(logits(served), before);
    EXPECT_EQ(served.forward(batch, cache.view(), nullptr, &out).code(), StatusCode::kInternal)
        << "a second commit has nothing to commit";
}

// /release_memory_occupation's step drops the weights and empties the KV pages; the model still
// says what it is, refuses to compute, and the served folder's kLoad and kCommit bring the same
// logits back; another model is still refused.
TEST_F(ReloadableModelTest, ReleasedWeightsComeBackFromTheServedFolder) {
    ReloadableModel served(load("step0"), options("step0"));
    const std::vector<float> before = logits(served);
    const std::size_t weight_bytes = served.weight_bytes();
    kvcache::KvCache cache(served.kv_cache_shape(), (std::int64_t{1} << 21) / served.kv_cache_shape().row_bytes() + 64);
    const kvcache::KvView kv = cache.view();
    ASSERT_GE(kv.layer_bytes, std::size_t{1} << 21) << "a buffer of whole pages";
    static_cast<float*>(kv.k[0])[1000] = 1.5f;
    BatchInput release;
    release.release_memory = {.weights = true, .kv_cache = true};
    std::vector<float> out{1.0f};
    ASSERT_TRUE(served.forward(release, kv, nullptr, &out).ok());
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(served.weights_released());
    EXPECT_EQ(static_cast<float*>(kv.k[0])[1000], 0.0f) << "the KV pages were given back";
    EXPECT_EQ(served.weight_bytes(), weight_bytes);
    EXPECT_EQ(served.config().num_hidden_layers, testing::kLayers);
    const std::vector<std::int32_t> tokens = {3, 17};
    BatchInput batch{tokens, {{2, 0, nullptr, LogitsMode::kLast}}};
    EXPECT_EQ(served.forward(batch, kv, nullptr, &out).code(), StatusCode::kInternal);

    EXPECT_NE(update(served, (root_ / "deeper").string()).message().find("another model"), std::string::npos);
    EXPECT_TRUE(served.weights_released());
    ASSERT_TRUE(update(served, (root_ / "step0").string()).ok());
    EXPECT_FALSE(served.weights_released());
    EXPECT_EQ(logits(served), before);
}

TEST_F(ReloadableModelTest, MismatchNamesTheFirstFieldThatDiffers) {
    EXPECT_EQ(weights_mismatch(*load("step0"), *load("step1")), "");
    EXPECT_EQ(weights_mismatch(*load("step0"), *load("deeper")),
              "the new folder is another model: its num_hidden_layers is 5, the served model's is 4");
}

}  // namespace
}  // namespace tessera::models
