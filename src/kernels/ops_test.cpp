#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/thread_pool.h"

namespace tessera::kernels {
namespace {

std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

TEST(OpsTest, RmsNormMatchesTheFormulaOnOddSizes) {
    ThreadPool pool(2);
    for (std::int64_t dim : {1, 7, 33, 130}) {
        const std::int64_t rows = 11;
        auto x = random_vector(rows * dim, 1);
        auto w = random_vector(dim, 2);
        std::vector<float> y(x.size());
        rms_norm(x.data(), w.data(), y.data(), rows, dim, 1e-6f, &pool);
        for (std::int64_t r = 0; r < rows; ++r) {
            double ss = 0;
            for (std::int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
            const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
            for (std::int64_t i = 0; i < dim; ++i)
                ASSERT_NEAR(y[r * dim + i], x[r * dim + i] * inv * w[i], 1e-5) << dim;
        }
    }
}

// The residual add fused into the norm, and the add split over workers, give the bits of the
// plain add followed by the norm: a decode batch (on the caller) and a prefill's rows (split).
TEST(OpsTest, AddRmsNormEqualsTheAddThenTheNorm) {
    ThreadPool pool(2);
    for (std::int64_t rows : {3, 16, 300}) {
        const std::int64_t dim = 1024;
        const auto x0 = random_vector(rows * dim, 3);
        const auto branch = random_vector(rows * dim, 4);
        const auto w = random_vector(dim, 5);
        std::vector<float> x_plain = x0, y_plain(x0.size());
        add_inplace(x_plain.data(), branch.data(), rows * dim);
        rms_norm(x_plain.data(), w.data(), y_plain.data(), rows, dim, 1e-6f);
        for (ThreadPool* workers : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> x_fused = x0, y_fused(x0.size(), NAN), x_split = x0;
            add_rms_norm(x_fused.data(), branch.data(), w.data(), y_fused.data(), rows, dim, 1e-6f, workers);
            add_inplace(x_split.data(), branch.data(), rows * dim, workers);
            for (std::size_t i = 0; i < x0.size(); ++i) {
                ASSERT_EQ(x_fused[i], x_plain[i]) << rows << " rows at " << i;
                ASSERT_EQ(y_fused[i], y_plain[i]) << rows << " rows at " << i;
                ASSERT_EQ(x_split[i], x_plain[i]) << rows << " rows at " << i;
            }
        }
    }
}

TEST(OpsTest, L2NormalizeGivesUnitRowsAndKeepsZero) {
    std::vector<float> x = {3.0f, -4.0f, 0.0f};
    l2_normalize(x.data(), 3);
    EXPECT_FLOAT_EQ(x[0], 0.6f);
    EXPECT_FLOAT_EQ(x[1], -0.8f);
    EXPECT_FLOAT_EQ(x[2], 0.0f);
    std::vector<float> zero(5, 0.0f);
    l2_normalize(zero.data(), 5);
    for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(OpsTest, RopeNeoxRotatesHalvesAndKeepsNorm) {
    const std::int64_t head_dim = 6, heads = 2, tokens = 3;
    auto x = random_vector(tokens * heads * head_dim, 3);
    auto original = x;
    std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
    std::vector<std::int32_t> pos = {0, 5, 17};
    rope(x.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), /*neox=*/true);
    for (std::int64_t t = 0; t < tokens; ++t) {
        for (std::int64_t h = 0; h < heads; ++h) {
            const float* o = original.data() + (t * heads + h) * head_dim;
            const float* r = x.data() + (t * heads + h) * head_dim;
            for (int i = 0; i < 3; ++i) {
                const double a = double(pos[t]) * inv_freq[i];
                EXPECT_NEAR(r[i], o[i] * std::cos(a) - o[i + 3] * std::sin(a), 1e-5);
                EXPECT_NEAR(r[i + 3], o[i + 3] * std::cos(a) + o[i] * std::sin(a), 1e-5);
            }
        }
    }
}

TEST(OpsTest, RopeInterleavedRotatesAdjacentPairs) {
    std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f};
    std::vector<float> inv_freq = {1.0f, 0.5f};
    std::int32_t pos = 2;
    rope(x.data(), 1, 1, 4, &pos, inv_freq.data(), /*neox=*/false);
    EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
    EXPECT_NEAR(x[1], std::sin(2.0), 1e-6);
    EXPECT_NEAR(x[2], -std::sin(1.0), 1e-6);
    EXPECT_NEAR(x[3], std::cos(1.0), 1e-6);
}

TEST(OpsTest, SiluAndMul) {
    std::vector<float> gate_up = {1.0f, -2.0f, 3.0f, 0.5f};  // one row, dim 2
    std::vector<float> out(2);
    silu_and_mul(gate_up.data(), out.data(), 1, 2);
    EXPECT_NEAR(out[0], 1.0 / (1 + std::exp(-1.0)) * 3.0, 1e-6);
    EXPECT_NEAR(out[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-6);
}

// Rows long enough for the 8-lane path (and a scalar tail), over a wide range of gates:
// large negative gates must give -0-ish values, not NaN from an overflowing exp.
TEST(OpsTest, SiluAndMulVectorPathMatchesScalarFormula) {
    const std::int64_t rows = 9, dim = 37;
    std::vector<float> gate_up(rows * 2 * dim), out(rows * dim);
    for (std::int64_t i = 0; i < rows * 2 * dim; ++i)
        gate_up[i] = static_cast<float>((i * 7919) % 401 - 200) * 0.5f;  // -100 .. 100
    ThreadPool pool(2);
    silu_and_mul(gate_up.data(), out.data(), rows, dim, &pool);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < dim; ++i) {
            const double g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
            const double expected = g / (1.0 + std::exp(-g)) * u;
            ASSERT_TRUE(std::isfinite(out[r * dim + i])) << r << "," << i;
            ASSERT_NEAR(out[r * dim + i], expected, 1e-6 * std::max(1.0, std::abs(expected))) << r << "," << i;
        }
}

TEST(OpsTest, EmbeddingLookupConvertsRows) {
    std::vector<std::uint16_t> table = {f32_to_bf16(1.0f), f32_to_bf16(2.0f), f32_to_bf16(-3.0f),
                                        f32_to_bf16(4.5f)};
    std::vector<std::int32_t> ids = {1, 0, 1};
    std::vector<float> out(6);
    embedding_lookup(table.data(), DType::kBF16, ids.data(), 3, 2, out.data());
    EXPECT_EQ(out, (std::vector<float>{-3.0f, 4.5f, 1.0f, 2.0f, -3.0f, 4.5f}));
}

}  // namespace
}  // namespace tessera::kernels
