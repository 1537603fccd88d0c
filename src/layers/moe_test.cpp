// The MoE block against a plain per-token computation from the same f32 weights, with a
// DeepSeek-style ungated shared expert and a Qwen2-MoE-style gated one; and the masked-EP /
// moe_tp split: the partial outputs of every (ep_rank, moe_tp_rank) sum to the whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/thread_pool.h"
#include "layers/experts.h"
#include "layers/moe.h"
#include "loader/safetensors.h"
#include "loader/weight_source.h"

namespace tessera::layers {
namespace {

constexpr std::int64_t H = 16, E = 8, K = 2, I = 12, S = 20;  // S: shared expert width

class MoeLayerTest : public ::testing::Test {
 protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("tessera_moe_test_" + std::to_string(getpid()));
        std::filesystem::create_directories(dir_);
        add("mlp.gate.weight", {E, H}, 1.0);
        for (std::int64_t e = 0; e < E; ++e) add_mlp("mlp.experts." + std::to_string(e) + ".", I);
        add_mlp("mlp.shared_expert.", S);
        add("mlp.shared_expert_gate.weight", {1, H}, 0.5);
        add_mlp("mlp.shared_experts.", S);  // DeepSeek's name
        add("mlp.gate.e_score_correction_bias", {E}, 0.3 * std::sqrt(double(E)));
        ASSERT_TRUE(loader::write_safetensors((dir_ / "model.safetensors").string(), tensors_).ok());
        auto source = loader::WeightSource::open(dir_.string());
        ASSERT_TRUE(source.ok()) << source.status().message();
        source_ = std::move(*source);
        std::normal_distribution<float> normal;
        x_.resize(kTokens * H);
        for (auto& v : x_) v = normal(rng_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    void add(const std::string& name, std::vector<std::int64_t> shape, double scale) {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        std::normal_distribution<float> normal(0.0f, static_cast<float>(scale / std::sqrt(double(shape.back()))));
        std::vector<float> v(static_cast<std::size_t>(n));
        for (auto& f : v) f = normal(rng_);
        loader::TensorToWrite t{name, DType::kF32, shape, std::vector<std::byte>(v.size() * 4)};
        std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
        tensors_.push_back(std::move(t));
        values_[name] = std::move(v);
    }
    void add_mlp(const std::string& p, std::int64_t width) {
        add(p + "gate_proj.weight", {width, H}, 1.0);
        add(p + "up_proj.weight", {width, H}, 1.0);
        add(p + "down_proj.weight", {H, width}, 1.0);
    }

    // y = down(silu(gate x) * up x) with the checkpoint's f32 weights.
    std::vector<float> swiglu(const std::string& p, std::int64_t width, const float* x) {
        const auto& g = values_[p + "gate_proj.weight"];
        const auto& u = values_[p + "up_proj.weight"];
        const auto& d = values_[p + "down_proj.weight"];
        std::vector<float> act(static_cast<std::size_t>(width)), y(H, 0.0f);
        for (std::int64_t i = 0; i < width; ++i) {
            double gi = 0, ui = 0;
            for (std::int64_t j = 0; j < H; ++j) gi += g[i * H + j] * x[j], ui += u[i * H + j] * x[j];
            act[i] = static_cast<float>(gi / (1.0 + std::exp(-gi)) * ui);
        }
        for (std::int64_t o = 0; o < H; ++o)
            for (std::int64_t i = 0; i < width; ++i) y[o] += d[o * width + i] * act[i];
        return y;
    }

    // The block token by token: router, top-k, experts, shared expert.
    std::vector<float> expected(bool gated_shared, const RouterConfig& routing, const std::string& shared_name = "mlp.shared_expert.",
                                const float* bias = nullptr) {
        std::vector<float> out(x_.size(), 0.0f);
        for (std::int64_t t = 0; t < kTokens; ++t) {
            const float* x = x_.data() + t * H;
            std::vector<float> logits(E);
            for (std::int64_t e = 0; e < E; ++e)
                for (std::int64_t j = 0; j < H; ++j) logits[e] += values_["mlp.gate.weight"][e * H + j] * x[j];
            std::vector<std::int32_t> ids(K);
            std::vector<float> w(K);
            route_tokens(logits.data(), 1, routing, bias, ids.data(), w.data());
            for (std::int64_t j = 0; j < K; ++j) {
                auto y = swiglu("mlp.experts." + std::to_string(ids[j]) + ".", I, x);
                for (std::int64_t o = 0; o < H; ++o) out[t * H + o] += w[j] * y[o];
            }
            auto shared = swiglu(shared_name, S, x);
            float g = 1.0f;
            if (gated_shared) {
                float dot = 0;
                for (std::int64_t j = 0; j < H; ++j) dot += values_["mlp.shared_expert_gate.weight"][j] * x[j];
                g = 1.0f / (1.0f + std::exp(-dot));
            }
            for (std::int64_t o = 0; o < H; ++o) out[t * H + o] += g * shared[o];
        }
        return out;
    }

    MoeSpec spec(bool gated_shared) const {
        MoeSpec s;
        s.prefix = "mlp.";
        s.routing = {.num_experts = E, .top_k = K, .renormalize = true};
        s.experts = {.num_experts = E, .hidden = H, .intermediate = I};
        s.shared_intermediate = S;
        s.shared_gate = gated_shared;
        return s;
    }

    std::vector<float> run(const MoeSpec& s, const LayerParallel& par, ThreadPool* pool = nullptr) {
        auto moe = MoeLayer::load(*source_, s, par);
        EXPECT_TRUE(moe.ok()) << moe.status().message();
        std::vector<float> out(x_.size());
        Scratch scratch;
        EXPECT_TRUE(moe->forward(x_.data(), kTokens, out.data(), scratch, pool, par).ok());
        return out;
    }

    static constexpr std::int64_t kTokens = 9;
    std::filesystem::path dir_;
    std::mt19937 rng_{1234};
    std::vector<loader::TensorToWrite> tensors_;
    std::map<std::string, std::vector<float>> values_;
    std::unique_ptr<loader::WeightSource> source_;
    std::vector<float> x_;
};

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

TEST_F(MoeLayerTest, MatchesThePerTokenComputation) {
    for (bool gated : {false, true}) {
        SCOPED_TRACE(gated ? "Qwen2-MoE gated shared expert" : "DeepSeek ungated shared experts");
        expect_near(run(spec(gated), {}), expected(gated, spec(gated).routing), 1e-4f);
    }
}

// Two threads take whole experts (9 tokens reach more than two experts per thread); one
// thread runs them in turn.
TEST_F(MoeLayerTest, ThreadsTakingWholeExpertsMatchThePerTokenComputation) {
    for (int threads : {1, 2}) {
        SCOPED_TRACE(std::to_string(threads) + " threads");
        ThreadPool pool(threads);
        expect_near(run(spec(true), {}, &pool), expected(true, spec(true).routing), 1e-4f);
    }
}

// A batch longer than one pass's budget goes through the experts in passes of tokens, on
// one thread or with threads taking whole experts, and comes out as in one pass.
TEST_F(MoeLayerTest, PassesOfTokensMatchOnePass) {
    const ExpertsSpec spec{.prefix = "mlp.experts.", .num_experts = E, .hidden = H, .intermediate = I};
    auto experts = LocalExperts::load(*source_, spec, 0, {0, 1, 2, 3, 4, 5, 6, 7}, Range{0, I});
    ASSERT_TRUE(experts.ok()) << experts.status().message();
    std::vector<std::int32_t> ids(kTokens * K);
    std::vector<float> weights(kTokens * K);
    for (std::int64_t t = 0; t < kTokens; ++t) {
        for (std::int64_t j = 0; j < K; ++j) {
            ids[t * K + j] = static_cast<std::int32_t>((t * 3 + j * 5) % E);
            weights[t * K + j] = 0.25f + 0.5f * static_cast<float>(j);
        }
    }
    ids[4] = -1;  // another rank's expert
    const auto run = [&](std::int64_t pass_bytes, ThreadPool* pool) {
        experts->set_pass_bytes(pass_bytes);
        std::vector<float> out(kTokens * H, -1.0f);
        Scratch scratch;
        experts->forward(x_.data(), kTokens, ids.data(), weights.data(), K, out.data(), scratch, pool);
        return out;
    };
    const std::vector<float> one_pass = run(std::int64_t{1} << 20, nullptr);
    ThreadPool pool(2);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(p == nullptr ? "one thread" : "two threads");
        expect_near(run(2 * K * H * 4, p), one_pass, 1e-6f);  // passes of 2 tokens, the last of 1
    }
}

// DP-attention's max_len buffers pad slots with zero rows: they reach no expert, are not
// counted, and the real rows come out as without them.
TEST_F(MoeLayerTest, PaddingRowsReachNoExpertAndAreNotCounted) {
    const MoeSpec s = spec(false);
    const std::vector<float> whole = run(s, {});
    auto moe = MoeLayer::load(*source_, s, {});
    ASSERT_TRUE(moe.ok());
    std::vector<std::uint8_t> padding(kTokens, 0);
    padding[2] = padding[5] = 1;
    std::vector<float> padded_in = x_;
    for (std::int64_t t : {2, 5}) std::fill_n(padded_in.begin() + t * H, H, 0.0f);
    std::vector<float> out(x_.size());
    Scratch scratch;
    ASSERT_TRUE(moe->forward(padded_in.data(), kTokens, out.data(), scratch, nullptr, {}, padding).ok());
    for (std::int64_t t = 0; t < kTokens; ++t) {
        for (std::int64_t i = 0; i < H; ++i) {
            const float want = padding[t] ? 0.0f : whole[t * H + i];
            ASSERT_NEAR(out[t * H + i], want, 1e-5f) << "row " << t;
        }
    }
    const MoePassCounts& counts = moe->pass_counts();
    EXPECT_EQ(counts.tokens, kTokens - 2);
    std::int64_t routed = 0;
    for (std::int32_t c : counts.logical) routed += c;
    EXPECT_EQ(routed, (kTokens - 2) * K);
    EXPECT_FALSE(moe->forward(x_.data(), kTokens, out.data(), scratch, nullptr, {}, std::vector<std::uint8_t>(3)).ok())
        << "a mask of the wrong length";
}

TEST_F(MoeLayerTest, RoutingReachesSeveralExperts) {
    RouterConfig routing = spec(false).routing;
    std::vector<float> logits(kTokens * E, 0.0f);
    for (std::int64_t t = 0; t < kTokens; ++t)
        for (std::int64_t e = 0; e < E; ++e)
            for (std::int64_t j = 0; j < H; ++j) logits[t * E + e] += values_["mlp.gate.weight"][e * H + j] * x_[t * H + j];
    std::vector<std::int32_t> ids(kTokens * K);
    std::vector<float> w(kTokens * K);
    route_tokens(logits.data(), kTokens, routing, nullptr, ids.data(), w.data());
    std::set<std::int32_t> hit(ids.begin(), ids.end());
    EXPECT_GE(hit.size(), 5u) << "the test would not exercise the expert grouping";
}

// DeepSeek-V3's block: sigmoid scores, noaux_tc group-limited selection on the biased scores,
// unbiased renormalised weights × routed_scaling_factor, ungated mlp.shared_experts.
TEST_F(MoeLayerTest, DeepseekBlockWithCorrectionBias) {
    MoeSpec s = spec(false);
    s.routing = {.num_experts = E, .top_k = K, .scoring = loader::ScoringFunc::kSigmoid,
                 .method = loader::TopkMethod::kNoauxTc, .n_group = 4, .topk_group = 2, .renormalize = true,
                 .routed_scaling_factor = 2.5};
    s.correction_bias = true;
    s.shared = "shared_experts";
    const std::vector<float>& bias = values_["mlp.gate.e_score_correction_bias"];
    const std::vector<float> got = run(s, {});
    expect_near(got, expected(false, s.routing, "mlp.shared_experts.", bias.data()), 1e-4f);
    // The bias changes the selection: without it the result differs.
    const std::vector<float> unbiased = expected(false, s.routing, "mlp.shared_experts.", nullptr);
    float max_diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::abs(got[i] - unbiased[i]));
    EXPECT_GT(max_diff, 1e-2f) << "the correction bias never changed an expert choice; the test cannot see it";
}

// Masked EP (--moe-a2a-backend none) and moe_tp: every rank returns its partial sum (the TP
// all-reduce, absent here, adds them); the partials must add up to the one-rank result.
TEST_F(MoeLayerTest, EpAndMoeTpPartialsSumToTheWhole) {
    const std::vector<float> whole = run(spec(true), {});
    for (const auto& [ep, moe_tp] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}, {1, 2}}) {
        SCOPED_TRACE("ep " + std::to_string(ep) + " moe_tp " + std::to_string(moe_tp));
        std::vector<float> sum(whole.size(), 0.0f);
        const int tp = ep * moe_tp;
        for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
            LayerParallel par;
            par.tp = {tp_rank, tp};
            par.moe = {.ep_rank = tp_rank / moe_tp, .ep_size = ep, .moe_tp_rank = tp_rank % moe_tp,
                       .moe_tp_size = moe_tp};
            const std::vector<float> part = run(spec(true), par);
            for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
        }
        expect_near(sum, whole, 1e-4f);
    }
}

TEST_F(MoeLayerTest, ExpertsMustDivideOverEpRanks) {
    LayerParallel par;
    par.tp = {0, 3};
    par.moe = {.ep_rank = 0, .ep_size = 3};
    auto moe = MoeLayer::load(*source_, spec(false), par);
    ASSERT_FALSE(moe.ok());
    EXPECT_NE(moe.status().message().find("--ep-size 3 must divide the model's 8 experts"), std::string::npos)
        << moe.status().message();
}

}  // namespace
}  // namespace tessera::layers
