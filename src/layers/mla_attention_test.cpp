// MLA's two forms on the same weights and cache: the absorbed form (W_UK folded into the
// query, attention over the latent rows, W_UV after) equals the naive one (K and V per head
// from kv_b_proj) within 1e-4 on an f32 cache (bf16: within the rounding of K and V), with
// and without q compression, over a prefill run and decode steps, and split over threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/thread_pool.h"
#include "kernels/batch_invariance.h"
#include "kernels/ops.h"
#include "layers/mla_attention.h"
#include "loader/safetensors.h"
#include "loader/weight_source.h"

namespace tessera::layers {
namespace {

constexpr std::int64_t H = 32, kHeads = 4, kQLora = 24, kR = 16, kNope = 8, kRope = 8, kV = 12;

class MlaAttentionTest : public ::testing::TestWithParam<bool> {  // param: q_lora_rank set
 protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("tessera_mla_test_" + std::to_string(getpid()));
        std::filesystem::create_directories(dir_);
        const std::string p = "attn.";
        if (GetParam()) {
            add(p + "q_a_proj.weight", {kQLora, H});
            add(p + "q_a_layernorm.weight", {kQLora}, 1.0);
            add(p + "q_b_proj.weight", {kHeads * (kNope + kRope), kQLora});
        } else {
            add(p + "q_proj.weight", {kHeads * (kNope + kRope), H});
        }
        add(p + "kv_a_proj_with_mqa.weight", {kR + kRope, H});
        add(p + "kv_a_layernorm.weight", {kR}, 1.0);
        add(p + "kv_b_proj.weight", {kHeads * (kNope + kV), kR});
        add(p + "o_proj.weight", {H, kHeads * kV});
        ASSERT_TRUE(loader::write_safetensors((dir_ / "model.safetensors").string(), tensors_).ok());
        auto source = loader::WeightSource::open(dir_.string());
        ASSERT_TRUE(source.ok()) << source.status().message();
        source_ = std::move(*source);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    // Gaussian values (mean `mean` for norm weights).
    void add(const std::string& name, std::vector<std::int64_t> shape, double mean = 0.0) {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        const float std = mean != 0.0 ? 0.1f : static_cast<float>(1.0 / std::sqrt(double(shape.back())));
        std::normal_distribution<float> normal(static_cast<float>(mean), std);
        std::vector<float> v(static_cast<std::size_t>(n));
        for (auto& f : v) f = normal(rng_);
        loader::TensorToWrite t{name, DType::kF32, shape, std::vector<std::byte>(v.size() * 4)};
        std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
        tensors_.push_back(std::move(t));
    }

    MlaSpec spec() const {
        MlaSpec s;
        s.prefix = "attn.";
        s.hidden = H;
        s.heads = kHeads;
        s.mla = {GetParam() ? kQLora : 0, kR, kNope, kRope, kV};
        s.scale = 1.0f / std::sqrt(static_cast<float>(kNope + kRope)) * 1.3f;
        s.rope_magnitude = 0.9f;
        return s;
    }

    // Runs `n` tokens at `start` (one sequence, positions are cache rows) in `form`.
    std::vector<float> run(const MlaAttention& mla, std::vector<std::uint8_t>& cache, DType cache_dtype,
                           const std::vector<float>& x, std::int64_t start, std::int64_t n, MlaForm form,
                           ThreadPool* pool) {
        std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
        std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) positions[i] = static_cast<std::int32_t>(start + i), rows[i] = start + i;
        std::vector<float> inv(kRope / 2), cos(n * kRope / 2), sin(n * kRope / 2);
        for (std::int64_t i = 0; i < kRope / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / kRope);
        kernels::rope_angles(positions.data(), n, inv.data(), kRope / 2, cos.data(), sin.data());
        const SeqSpan seq{n, start, nullptr};
        const LayerBatch batch{n, rows.data(), cos.data(), sin.data(), {&seq, 1}, pool};
        std::vector<float> out(static_cast<std::size_t>(n * H));
        Scratch scratch;
        const LayerInput input{.x = x.data() + start * H};
        EXPECT_TRUE(mla.forward(input, batch, cache.data(), cache_dtype, out.data(), scratch, {}, form).ok());
        return out;
    }

    std::filesystem::path dir_;
    std::mt19937 rng_{99};
    std::vector<loader::TensorToWrite> tensors_;
    std::unique_ptr<loader::WeightSource> source_;
};

TEST_P(MlaAttentionTest, AbsorbedEqualsNaive) {
    auto mla = MlaAttention::load(*source_, spec(), {});
    ASSERT_TRUE(mla.ok()) << mla.status().message();
    // Past 512 keys a decode query is split over the two threads and merged.
    constexpr std::int64_t kPrompt = 530, kTotal = 533;
    std::normal_distribution<float> normal;
    std::vector<float> x(kTotal * H);
    for (auto& v : x) v = normal(rng_);
    ThreadPool pool(2);
    for (DType cache_dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
        SCOPED_TRACE(std::string(dtype_name(cache_dtype)) + " cache");
        const bool bf16 = cache_dtype == DType::kBF16;
        const std::size_t cache_size = kTotal * (kR + kRope) * dtype_size(cache_dtype);
        std::vector<std::uint8_t> cache_naive(cache_size), cache_absorbed(cache_size);
        // The prompt in one run, then the decode tokens one at a time, in each form.
        std::vector<float> naive = run(*mla, cache_naive, cache_dtype, x, 0, kPrompt, MlaForm::kNaive, nullptr);
        std::vector<float> absorbed = run(*mla, cache_absorbed, cache_dtype, x, 0, kPrompt, MlaForm::kAbsorbed, &pool);
        for (std::int64_t pos = kPrompt; pos < kTotal; ++pos) {
            auto a = run(*mla, cache_naive, cache_dtype, x, pos, 1, MlaForm::kNaive, &pool);
            auto b = run(*mla, cache_absorbed, cache_dtype, x, pos, 1, MlaForm::kAbsorbed, nullptr);
            naive.insert(naive.end(), a.begin(), a.end());
            absorbed.insert(absorbed.end(), b.begin(), b.end());
        }
        float max_diff = 0.0f, max_abs = 0.0f;
        for (std::size_t i = 0; i < naive.size(); ++i) {
            max_diff = std::max(max_diff, std::abs(naive[i] - absorbed[i]));
            max_abs = std::max(max_abs, std::abs(naive[i]));
        }
        // With a bf16 cache the naive form's per-head K and V are rounded to bf16 too (as a
        // GQA model's bf16 cache is), the absorbed form keeps W_UK / W_UV products in f32. An
        // fp8 cache's values are exact in f32, so both forms read the same numbers.
        EXPECT_LT(max_diff, bf16 ? 5e-3f * max_abs : 1e-4f) << "outputs up to " << max_abs;
        EXPECT_GT(max_abs, 0.1f) << "the test input produces no signal";
        EXPECT_EQ(cache_naive, cache_absorbed);
    }
}

// Deterministic inference: with batch-invariant kernels the automatic form gives the same bits
// for a token whether it was prefilled in one run, in chunks after a cached prefix, or decoded.
TEST_P(MlaAttentionTest, BatchInvariantPrefillEqualsChunksAndDecode) {
    struct Invariant {
        Invariant() { kernels::set_batch_invariant(true); }
        ~Invariant() { kernels::set_batch_invariant(false); }
    } invariant;
    auto mla = MlaAttention::load(*source_, spec(), {});
    ASSERT_TRUE(mla.ok()) << mla.status().message();
    constexpr std::int64_t kTotal = 533;
    std::normal_distribution<float> normal;
    std::vector<float> x(kTotal * H);
    for (auto& v : x) v = normal(rng_);
    ThreadPool pool(2);
    const DType cache_dtype = DType::kBF16;
    const std::size_t cache_size = kTotal * (kR + kRope) * dtype_size(cache_dtype);
    std::vector<std::uint8_t> cache_whole(cache_size), cache_parts(cache_size);
    const std::vector<float> whole = run(*mla, cache_whole, cache_dtype, x, 0, kTotal, MlaForm::kAuto, &pool);
    std::vector<float> parts;
    for (auto [start, n] : {std::pair<std::int64_t, std::int64_t>{0, 300}, {300, 230}, {530, 1}, {531, 1}, {532, 1}}) {
        const std::vector<float> out = run(*mla, cache_parts, cache_dtype, x, start, n, MlaForm::kAuto, &pool);
        parts.insert(parts.end(), out.begin(), out.end());
    }
    ASSERT_EQ(parts.size(), whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(parts[i], whole[i]) << "position " << i / H;
}

INSTANTIATE_TEST_SUITE_P(QLora, MlaAttentionTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "compressed_q" : "plain_q"; });

}  // namespace
}  // namespace tessera::layers
