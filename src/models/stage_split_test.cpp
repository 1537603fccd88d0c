// models/stage_split_test.cpp — a dense decoder split into pipeline stages computes the same
// logits as the whole model when the stages run in order, each over a KV cache of its own
// layers, each handing its hidden states to the next; and each stage holds only its part of
// the weights (the tied embedding stays on the first stage).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/process_group.h"
#include "dist/store.h"
#include "loader/safetensors.h"
#include "models/model.h"
#include "models/test_model_folder.h"

namespace tessera::models {
namespace {

namespace fs = std::filesystem;

using testing::kHeadDim;
using testing::kHidden;
using testing::kKvHeads;
using testing::kLayers;
using testing::kVocab;
using testing::write_model;

// Two sequences, each owning a block of KV rows of the shared cache (through `slots`).
constexpr std::int64_t kRowsPerSeq = 16;

struct Step {
    std::vector<std::int32_t> tokens;
    std::vector<SequenceInput> seqs;
};

class TwoSequences {
 public:
    TwoSequences() {
        for (int s = 0; s < 2; ++s)
            for (std::int64_t p = 0; p < kRowsPerSeq; ++p)
                slots_[s].push_back(static_cast<std::int32_t>(s * kRowsPerSeq + p));
    }
    // A prefill of 5 and 3 tokens (the first wants every row's logits), then one decode step
    // each over the K/V the prefill wrote.
    Step prefill() const {
        return {{3, 17, 150, 42, 9, 77, 0, 199},
                {{5, 0, slots_[0].data(), LogitsMode::kAll}, {3, 0, slots_[1].data(), LogitsMode::kLast}}};
    }
    Step decode() const {
        return {{123, 5}, {{1, 5, slots_[0].data(), LogitsMode::kLast}, {1, 3, slots_[1].data(), LogitsMode::kLast}}};
    }

 private:
    std::vector<std::int32_t> slots_[2];
};

// The stages of one model, each with its own KV cache sized from its kv_cache_shape().
struct Pipeline {
    std::vector<std::unique_ptr<Model>> stages;
    std::vector<kvcache::KvCache> caches;

    // Runs `step` through every stage in order; returns the last stage's logits.
    std::vector<float> run(const Step& step) {
        std::vector<float> hidden;
        std::vector<float> out;
        for (std::size_t i = 0; i < stages.size(); ++i) {
            BatchInput batch{step.tokens, step.seqs, hidden};
            const Status s = stages[i]->forward(batch, caches[i].view(), nullptr, &out);
            EXPECT_TRUE(s.ok()) << "stage " << i << ": " << s.to_string();
            if (i + 1 < stages.size()) {
                EXPECT_EQ(out.size(), step.tokens.size() * kHidden) << "stage " << i << " hands on hidden states";
                hidden = out;
            }
        }
        return out;
    }
};

class StageSplitTest : public ::testing::TestWithParam<std::string> {
 protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("tessera_stage_split_" + std::to_string(::getpid()) + "_" + GetParam());
        fs::remove_all(dir_);
        write_model(dir_, GetParam());
    }
    void TearDown() override { fs::remove_all(dir_); }

    LoadOptions options(int pp_rank, int pp_size, std::optional<std::string> partition = std::nullopt) const {
        LoadOptions o;
        o.model_path = dir_.string();
        o.dtype = "f32";
        o.pp_rank = pp_rank;
        o.pp_size = pp_size;
        o.layer_partition = std::move(partition);
        return o;
    }

    Pipeline load(int pp_size, std::optional<std::string> partition = std::nullopt) const {
        Pipeline p;
        for (int r = 0; r < pp_size; ++r) {
            auto m = load_model(options(r, pp_size, partition));
            EXPECT_TRUE(m.ok()) << m.status().to_string();
            if (!m.ok()) return {};
            p.caches.emplace_back((*m)->kv_cache_shape(), 2 * kRowsPerSeq);
            p.stages.push_back(std::move(m).value());
        }
        return p;
    }

    fs::path dir_;
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0.0f;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
}

TEST_P(StageSplitTest, StagesInOrderGiveTheWholeModelsLogits) {
    const TwoSequences seqs;
    Pipeline whole = load(1);
    ASSERT_EQ(whole.stages.size(), 1u);
    const std::vector<float> want_prefill = whole.run(seqs.prefill());
    const std::vector<float> want_decode = whole.run(seqs.decode());
    // kAll for the 5-token sequence plus kLast for the other; then one row each.
    ASSERT_EQ(want_prefill.size(), static_cast<std::size_t>(6 * kVocab));
    ASSERT_EQ(want_decode.size(), static_cast<std::size_t>(2 * kVocab));

    struct Split {
        int pp_size;
        std::optional<std::string> partition;
        std::vector<std::pair<int, int>> ranges;
    };
    const std::vector<Split> splits = {
        {2, std::nullopt, {{0, 2}, {2, 4}}},
        // The default split gives the spare layer to the last stage.
        {3, std::nullopt, {{0, 1}, {1, 2}, {2, 4}}},
        {2, "1,3", {{0, 1}, {1, 4}}},
        {4, "1,1,1,1", {{0, 1}, {1, 2}, {2, 3}, {3, 4}}},
    };
    for (const Split& split : splits) {
        SCOPED_TRACE("pp_size " + std::to_string(split.pp_size) + " partition " + split.partition.value_or("default"));
        Pipeline p = load(split.pp_size, split.partition);
        ASSERT_EQ(p.stages.size(), static_cast<std::size_t>(split.pp_size));
        for (int r = 0; r < split.pp_size; ++r) {
            const StageInfo st = p.stages[r]->stage();
            EXPECT_EQ(st.layer_begin, split.ranges[r].first) << "stage " << r;
            EXPECT_EQ(st.layer_end, split.ranges[r].second) << "stage " << r;
            EXPECT_EQ(st.first, r == 0) << "stage " << r;
            EXPECT_EQ(st.last, r == split.pp_size - 1) << "stage " << r;
            EXPECT_EQ(p.stages[r]->kv_cache_shape().n_layers, st.num_layers()) << "stage " << r;
        }
        EXPECT_LE(max_abs_diff(p.run(seqs.prefill()), want_prefill), 1e-5f);
        EXPECT_LE(max_abs_diff(p.run(seqs.decode()), want_decode), 1e-5f);
    }
}

TEST_P(StageSplitTest, EachStageHoldsAndCostsOnlyItsPart) {
    Pipeline whole = load(1);
    Pipeline p = load(3);
    ASSERT_EQ(whole.stages.size(), 1u);
    ASSERT_EQ(p.stages.size(), 3u);
    const Model& w = *whole.stages[0];
    std::size_t bytes = 0, bytes_per_token = 0;
    double linear_flops = 0, attention_flops = 0;
    for (const auto& s : p.stages) {
        bytes += s->weight_bytes();
        bytes_per_token += s->weight_bytes_per_token();
        linear_flops += s->linear_flops_per_token();
        attention_flops += s->attention_flops_at(9);
    }
    // The pieces add up to the whole only when no stage keeps weights another stage owns (a
    // tied last stage keeping an embedding table as well as its lm_head would count it twice).
    EXPECT_EQ(bytes, w.weight_bytes());
    EXPECT_EQ(bytes_per_token, w.weight_bytes_per_token());
    EXPECT_DOUBLE_EQ(linear_flops, w.linear_flops_per_token());
    EXPECT_DOUBLE_EQ(attention_flops, w.attention_flops_at(9));
    // Stages 0 and 1 run one layer each; only stage 0 also holds the embedding.
    const Model& first = *p.stages[0];
    const Model& middle = *p.stages[1];
    const Model& last = *p.stages[2];
    EXPECT_GT(first.weight_bytes(), middle.weight_bytes());
    EXPECT_EQ(first.weight_bytes_per_token(), middle.weight_bytes_per_token());
    EXPECT_EQ(middle.weight_bytes(), middle.weight_bytes_per_token()) << "the middle stage holds no embedding";
    EXPECT_EQ(last.weight_bytes(), last.weight_bytes_per_token()) << "the last stage holds no embedding";
    EXPECT_DOUBLE_EQ(2 * middle.attention_flops_at(9), last.attention_flops_at(9));
    EXPECT_DOUBLE_EQ(2 * middle.linear_flops_per_token(), last.linear_flops_per_token());
}

TEST_P(StageSplitTest, BadStagesAreRejected) {
    const auto error = [&](const LoadOptions& o) {
        auto m = load_model(o);
        EXPECT_FALSE(m.ok());
        return m.ok() ? Status::Ok() : m.status();
    };
    for (const char* partition : {"1,1", "a,b", "1,2,1", "0,4"}) {
        const Status s = error(options(0, 2, partition));
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << partition;
        EXPECT_NE(s.message().find("SGLANG_PP_LAYER_PARTITION"), std::string::npos) << s.message();
    }
    for (int rank : {2, -1}) {
        const Status s = error(options(rank, 2));
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(s.message().find("pp_rank " + std::to_string(rank)), std::string::npos) << s.message();
    }
    const Status zero = error(options(0, 0));
    EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(zero.message().find("pp_size"), std::string::npos) << zero.message();
    // More stages than layers leaves a stage without a layer.
    EXPECT_EQ(error(options(0, kLayers + 1)).code(), StatusCode::kInvalidArgument);
}

TEST_P(StageSplitTest, HiddenInMustMatchTheStage) {
    Pipeline p = load(2);
    ASSERT_EQ(p.stages.size(), 2u);
    const TwoSequences seqs;  // owns the slots `step` points into
    const Step step = seqs.prefill();
    std::vector<float> out;
    const std::vector<float> hidden(step.tokens.size() * kHidden, 0.5f);

    // The first stage embeds; hidden states given to it are a wiring mistake.
    Status s = p.stages[0]->forward(BatchInput{step.tokens, step.seqs, hidden}, p.caches[0].view(), nullptr, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();

    const std::vector<float> short_hidden(hidden.size() - kHidden, 0.5f);
    s = p.stages[1]->forward(BatchInput{step.tokens, step.seqs, short_hidden}, p.caches[1].view(), nullptr, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(std::to_string(short_hidden.size())), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::to_string(hidden.size())), std::string::npos) << s.message();

    s = p.stages[1]->forward(BatchInput{step.tokens, step.seqs, {}}, p.caches[1].view(), nullptr, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

    // A KV cache sized for the whole model does not fit a stage.
    kvcache::KvCache whole_cache({kLayers, kKvHeads, kHeadDim, DType::kF32}, 2 * kRowsPerSeq);
    s = p.stages[1]->forward(BatchInput{step.tokens, step.seqs, hidden}, whole_cache.view(), nullptr, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

    // Later stages never index the embedding, so they do not reject token ids.
    std::vector<std::int32_t> odd_tokens = step.tokens;
    odd_tokens[0] = static_cast<std::int32_t>(kVocab + 5);
    s = p.stages[1]->forward(BatchInput{odd_tokens, step.seqs, hidden}, p.caches[1].view(), nullptr, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(out.size(), static_cast<std::size_t>(6 * kVocab));
}

// Tensor parallelism inside every stage: tp 2 × pp 2 (ranks as threads over Gloo) gives the
// logits of tp 2 alone.
TEST_P(StageSplitTest, TensorParallelInsideStages) {
    constexpr int kTp = 2;
    auto store = dist::make_hash_store();
    std::vector<std::unique_ptr<dist::ProcessGroup>> groups(kTp);
    {
        std::vector<std::thread> threads;
        for (int r = 0; r < kTp; ++r) {
            threads.emplace_back([&, r] {
                dist::ProcessGroupOptions o;
                o.name = "tp";
                o.rank = r;
                o.size = kTp;
                o.timeout = std::chrono::milliseconds(60'000);
                auto g = dist::make_gloo_group(*store, o);
                EXPECT_TRUE(g.ok()) << g.status().to_string();
                if (g.ok()) groups[r] = std::move(g).value();
            });
        }
        for (auto& t : threads) t.join();
    }
    ASSERT_TRUE(groups[0] && groups[1]);

    // pipelines[tp_rank]; each rank's stages share its one TP group, used in stage order.
    const auto load_tp = [&](int pp_size) {
        std::vector<Pipeline> pipelines(kTp);
        for (int t = 0; t < kTp; ++t) {
            for (int r = 0; r < pp_size; ++r) {
                LoadOptions o = options(r, pp_size);
                o.tp_rank = t;
                o.tp_size = kTp;
                o.tp_group = groups[t].get();
                auto m = load_model(o);
                EXPECT_TRUE(m.ok()) << m.status().to_string();
                if (!m.ok()) return std::vector<Pipeline>{};
                pipelines[t].caches.emplace_back((*m)->kv_cache_shape(), 2 * kRowsPerSeq);
                pipelines[t].stages.push_back(std::move(m).value());
            }
        }
        return pipelines;
    };
    const auto run_tp = [&](std::vector<Pipeline>& pipelines, const Step& step) {
        std::vector<std::vector<float>> logits(kTp);
        std::vector<std::thread> threads;
        for (int t = 0; t < kTp; ++t)
            threads.emplace_back([&, t] { logits[t] = pipelines[t].run(step); });
        for (auto& th : threads) th.join();
        EXPECT_LE(max_abs_diff(logits[0], logits[1]), 0.0f) << "TP ranks agree";
        return logits[0];
    };

    const TwoSequences seqs;
    std::vector<Pipeline> tp_only = load_tp(1);
    std::vector<Pipeline> tp_pp = load_tp(2);
    ASSERT_EQ(tp_only.size(), static_cast<std::size_t>(kTp));
    ASSERT_EQ(tp_pp.size(), static_cast<std::size_t>(kTp));
    EXPECT_EQ(tp_pp[1].stages[1]->kv_cache_shape().n_kv_heads, kKvHeads / kTp);
    for (const Step& step : {seqs.prefill(), seqs.decode()}) {
        const std::vector<float> want = run_tp(tp_only, step);
        ASSERT_FALSE(want.empty());
        EXPECT_LE(max_abs_diff(run_tp(tp_pp, step), want), 1e-5f);
    }
}

INSTANTIATE_TEST_SUITE_P(models, StageSplitTest, ::testing::Values("qwen3", "qwen2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessera::models
