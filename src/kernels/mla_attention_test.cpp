// MLA's absorbed attention against a plain double-precision computation: the AVX2 path
// (f32 and bf16 caches) within 1e-5 of the output scale, the AVX-512 BF16 path (query
// rounded to bf16) within 1e-2; keys on shuffled cache rows, contexts long enough to be
// split over two threads and merged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace tessera::kernels {
namespace {

struct Shape {
    std::int64_t heads, latent, rope;
    std::int64_t width() const { return latent + rope; }
};
// Six heads: fewer than the 16 lanes of the AVX-512 path, and not a multiple of its 8-head tile.
constexpr Shape kSmall{6, 64, 32};

struct Case {
    Shape shape;
    std::vector<float> q;             // [n_q, heads, width]
    std::vector<float> cache;         // [rows, width] f32 (bf16-exact values)
    std::vector<std::uint16_t> cache_bf16;
    std::vector<std::int32_t> slots;  // position → row
    std::int64_t n_q = 0, start = 0;
};

// Positions sit on shuffled cache rows, or (in_order) position p on row p.
Case make_case(std::int64_t start, std::int64_t n_q, Shape shape = kSmall, bool in_order = false) {
    const std::int64_t heads = shape.heads, width = shape.width();
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    Case c;
    c.shape = shape;
    c.n_q = n_q;
    c.start = start;
    const std::int64_t keys = start + n_q;
    c.q.resize(n_q * heads * width);
    for (auto& v : c.q) v = normal(rng) * 0.3f;
    c.cache.resize(keys * width);
    c.cache_bf16.resize(c.cache.size());
    for (std::size_t i = 0; i < c.cache.size(); ++i) {
        c.cache_bf16[i] = f32_to_bf16(normal(rng));
        c.cache[i] = bf16_to_f32(c.cache_bf16[i]);
    }
    c.slots.resize(keys);
    std::iota(c.slots.begin(), c.slots.end(), 0);
    if (!in_order) std::shuffle(c.slots.begin(), c.slots.end(), rng);
    return c;
}

std::vector<double> reference(const Case& c, float scale) {
    const std::int64_t heads = c.shape.heads, latent = c.shape.latent, width = c.shape.width();
    std::vector<double> out(c.n_q * heads * latent, 0.0);
    for (std::int64_t t = 0; t < c.n_q; ++t) {
        for (std::int64_t h = 0; h < heads; ++h) {
            const float* q = c.q.data() + (t * heads + h) * width;
            std::vector<double> s(c.start + t + 1);
            for (std::int64_t p = 0; p <= c.start + t; ++p) {
                const float* row = c.cache.data() + c.slots[p] * width;
                double d = 0;
                for (std::int64_t i = 0; i < width; ++i) d += double(q[i]) * row[i];
                s[p] = d * scale;
            }
            const double max = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (auto& v : s) sum += v = std::exp(v - max);
            double* o = out.data() + (t * heads + h) * latent;
            for (std::int64_t p = 0; p <= c.start + t; ++p) {
                const float* row = c.cache.data() + c.slots[p] * width;
                for (std::int64_t i = 0; i < latent; ++i) o[i] += s[p] / sum * row[i];
            }
        }
    }
    return out;
}

double max_error(const Case& c, bool bf16, Isa isa, ThreadPool* pool, float scale) {
    std::vector<float> out(c.n_q * c.shape.heads * c.shape.latent);
    const MlaAbsorbedArgs args{c.q.data(), bf16 ? static_cast<const void*>(c.cache_bf16.data()) : c.cache.data(),
                               bf16 ? DType::kBF16 : DType::kF32, c.slots.data(), c.n_q, c.start, out.data()};
    mla_attention_absorbed({&args, 1}, {c.shape.heads, c.shape.latent, c.shape.rope, scale}, pool, isa);
    const std::vector<double> want = reference(c, scale);
    double err = 0;
    for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(out[i] - want[i]));
    return err;
}

// An fp8 latent cache gives what an f32 cache of its decoded values gives: to f32 rounding on
// AVX2, within the bf16 rounding of the query and the softmax weights on AVX-512 (which widens
// the codes to bf16 exactly), at the small shape and at DeepSeek's.
TEST(MlaAttentionKernelTest, Fp8CacheMatchesItsDecodedValues) {
    ThreadPool pool(2);
    const float scale = 0.15f;
    for (const Shape shape : {kSmall, Shape{16, 512, 64}}) {
        for (DType type : {DType::kF8E4M3, DType::kF8E5M2}) {
            SCOPED_TRACE(std::string(dtype_name(type)) + " heads " + std::to_string(shape.heads));
            Case c = make_case(300, 2, shape);
            std::vector<std::uint8_t> codes(c.cache.size());
            store_kv_row(c.cache.data(), codes.data(), 0, static_cast<std::int64_t>(codes.size()), type);
            convert_to_f32(codes.data(), type, c.cache.data(), c.cache.size());  // the reference reads these
            const std::vector<double> want = reference(c, scale);
            const auto max_error = [&](Isa isa) {
                std::vector<float> out(c.n_q * shape.heads * shape.latent);
                const MlaAbsorbedArgs args{c.q.data(), codes.data(), type, c.slots.data(), c.n_q, c.start, out.data()};
                mla_attention_absorbed({&args, 1}, {shape.heads, shape.latent, shape.rope, scale}, &pool, isa);
                double err = 0;
                for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(out[i] - want[i]));
                return err;
            };
            EXPECT_LT(max_error(Isa::kAvx2), 1e-5);
            if (isa_supported(Isa::kAvx512Bf16)) {
                const double err = max_error(Isa::kAvx512Bf16);
                EXPECT_LT(err, 1e-2);
                EXPECT_GT(err, 0.0) << "the bf16 path was not taken";
            }
        }
    }
}

TEST(MlaAttentionKernelTest, AbsorbedMatchesReference) {
    ThreadPool pool(2);
    const float scale = 0.15f;
    for (const auto& [start, n_q] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 5}, {40, 1}, {700, 2}}) {
        SCOPED_TRACE("start " + std::to_string(start) + " n_q " + std::to_string(n_q));
        const Case c = make_case(start, n_q);
        EXPECT_LT(max_error(c, false, Isa::kAvx2, &pool, scale), 1e-5);
        EXPECT_LT(max_error(c, true, Isa::kAvx2, nullptr, scale), 1e-5);
        if (isa_supported(Isa::kAvx512Bf16)) {
            const double err = max_error(c, true, Isa::kAvx512Bf16, &pool, scale);
            EXPECT_LT(err, 1e-2);
            EXPECT_GT(err, 0.0) << "the bf16 path was not taken";
        }
    }
}

// A call whose split state exceeds max_state_floats goes through in windows of whole tokens:
// the same bits as in one window, on both paths, with and without threads.
TEST(MlaAttentionKernelTest, WindowsOfTokensGiveTheSameBits) {
    ThreadPool pool(2);
    const Case c = make_case(600, 7);  // 600+ keys: two or more splits per token
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512Bf16}) {
        if (!isa_supported(isa)) continue;
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<std::vector<float>> outs;
            const std::int64_t three_splits = 3 * c.shape.heads * (2 + c.shape.latent);
            for (std::int64_t max_state : {std::int64_t{1} << 24, std::int64_t{1}, three_splits}) {
                outs.emplace_back(c.n_q * c.shape.heads * c.shape.latent);
                const MlaAbsorbedArgs args{c.q.data(),    c.cache_bf16.data(), DType::kBF16,       c.slots.data(),
                                           c.n_q,         c.start,             outs.back().data()};
                const MlaShape shape{c.shape.heads, c.shape.latent, c.shape.rope, 0.15f, max_state};
                mla_attention_absorbed({&args, 1}, shape, p, isa);
            }
            EXPECT_EQ(outs[0], outs[1]) << isa_name(isa) << (p ? " pool" : "");
            EXPECT_EQ(outs[0], outs[2]) << isa_name(isa) << (p ? " pool" : "");
        }
    }
}

// The AVX-512 path at DeepSeek's row width (16 heads fill the lanes) and with 20 heads (a
// second, partial group of heads), with block ends of odd length and contexts split over threads; rows
// in order are read in place, shuffled ones through the block buffer.
TEST(MlaAttentionKernelTest, Avx512HeadGroupsAtDeepSeekWidth) {
    if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    ThreadPool pool(2);
    const float scale = 0.06f;
    using Context = std::pair<std::int64_t, std::int64_t>;  // start, n_q
    for (const Shape shape : {Shape{16, 512, 64}, Shape{20, 128, 64}}) {
        for (const auto& [start, n_q] : std::vector<Context>{{16, 1}, {600, 1}, {44, 3}}) {
            for (const bool in_order : {false, true}) {
                SCOPED_TRACE("heads " + std::to_string(shape.heads) + " start " + std::to_string(start) + " n_q " +
                             std::to_string(n_q) + (in_order ? " rows in order" : " rows shuffled"));
                const Case c = make_case(start, n_q, shape, in_order);
                const double err = max_error(c, true, Isa::kAvx512Bf16, &pool, scale);
                EXPECT_LT(err, 1e-2);
                EXPECT_GT(err, 0.0);
            }
        }
    }
}

}  // namespace
}  // namespace tessera::kernels
