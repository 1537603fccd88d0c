// kernels/matmul_test.cpp — every matmul path (reference, AVX2, AVX-512 when the CPU has
// it) against matmul_reference on the unpacked weight, for f32 and bf16 weights, odd shapes,
// strided x / y, inline and on a 2-thread pool; plus the packed layout itself.

#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/batch_invariance.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/ops.h"
#include "tensor/fp8_blocks.h"

namespace tessera::kernels {
namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& e : v) e = dist(rng);
    return v;
}

std::vector<Isa> paths_to_test() {
    std::vector<Isa> paths{Isa::kReference};
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512Bf16, Isa::kAmx}) {
        if (isa_supported(isa)) paths.push_back(isa);
    }
    return paths;
}

struct Shape {
    std::int64_t m, n, k;
};

// f32 and bf16 weights are packed from w; fp8 weights are quantized in 128 × 128 blocks first
// (w rescaled per row and block so the scales differ), as an FP8 checkpoint stores them.
std::int64_t g_fp8_block = kFp8ScaleBlock;  // the checkpoint's block (and the packed scale block)

PackedWeight pack_for_test(std::vector<float>& w, std::int64_t n, std::int64_t k, DType wtype) {
    if (!is_fp8(wtype)) return pack_weight(w.data(), DType::kF32, n, k, wtype);
    for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t c = 0; c < k; ++c) w[j * k + c] *= std::ldexp(1.0f, static_cast<int>(j % 5 + (c / 128) % 3) - 3);
    const Fp8Blocks q = quantize_fp8_blocks(w.data(), n, k, wtype, g_fp8_block);
    const std::int64_t blocks = q.scale_cols();
    std::vector<float> row_scales(static_cast<std::size_t>(n * blocks));
    for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t b = 0; b < blocks; ++b) row_scales[j * blocks + b] = q.scale(j, b * g_fp8_block);
    return pack_fp8_weight(q.codes.data(), wtype, n, k, row_scales.data(), g_fp8_block);
}

// Checks matmul(path) == matmul_reference(unpacked weight) within a bound relative to
// sum_k |x||w| of each output (summation order differs between paths).
void check_paths(const Shape& s, DType wtype, ThreadPool* pool, std::int64_t x_pad,
                 std::int64_t y_pad, std::uint32_t seed) {
    const std::int64_t x_stride = s.k + x_pad;
    const std::int64_t y_stride = s.n + y_pad;
    std::vector<float> w = random_values(s.n * s.k, seed);
    const std::vector<float> x = random_values(s.m * x_stride, seed + 1);
    const PackedWeight packed = pack_for_test(w, s.n, s.k, wtype);

    std::vector<float> w_unpacked(s.n * s.k);
    unpack_weight(packed, w_unpacked.data());
    // The bf16 paths consume x rounded to bf16; feed the reference the same x so the bound
    // only has to cover summation order.
    std::vector<float> x_dense(s.m * s.k);
    for (std::int64_t r = 0; r < s.m; ++r) {
        for (std::int64_t c = 0; c < s.k; ++c) {
            const float v = x[r * x_stride + c];
            x_dense[r * s.k + c] = wtype != DType::kF32 ? bf16_to_f32(f32_to_bf16(v)) : v;
        }
    }
    std::vector<float> expected(s.m * s.n);
    matmul_reference(x_dense.data(), s.m, w_unpacked.data(), s.n, s.k, expected.data());

    for (Isa isa : paths_to_test()) {
        // FP8 inputs taller than the register-widening kernel (and every FP8 input on the
        // AVX2 path, or without VBMI) run on bf16 copies of the scaled weights: each product
        // carries bf16's rounding (2^-9 relative). The widening kernel applies the exact scales.
        const bool rounded_weights = is_fp8(wtype) && isa != Isa::kReference &&
                                     !(uses_avx512_bf16(isa) && cpu_features().avx512_vbmi &&
                                       s.m <= cpu::kFp8DirectRows);
        const double tolerance = rounded_weights ? 4e-3 : 1e-5;
        constexpr float kSentinel = 12345.0f;
        std::vector<float> y(s.m * y_stride, kSentinel);
        matmul(x.data(), s.m, packed, y.data(), pool, isa, x_pad ? x_stride : 0,
               y_pad ? y_stride : 0);
        for (std::int64_t r = 0; r < s.m; ++r) {
            for (std::int64_t j = 0; j < s.n; ++j) {
                double magnitude = 0.0;
                for (std::int64_t c = 0; c < s.k; ++c) {
                    magnitude += std::fabs(x_dense[r * s.k + c] * w_unpacked[j * s.k + c]);
                }
                const float got = y[r * y_stride + j];
                const float want = expected[r * s.n + j];
                ASSERT_NEAR(got, want, tolerance * magnitude + 1e-30)
                    << isa_name(isa) << " " << dtype_name(wtype) << " m=" << s.m << " n=" << s.n
                    << " k=" << s.k << " at (" << r << ", " << j << ")" << (pool ? " pool" : "");
            }
            for (std::int64_t j = s.n; j < y_stride; ++j) {
                ASSERT_EQ(y[r * y_stride + j], kSentinel)
                    << isa_name(isa) << " wrote the y padding at (" << r << ", " << j << ")";
            }
        }
    }
}

class MatmulPaths : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulPaths, OddShapesMatchReference) {
    std::uint32_t seed = 1;
    for (std::int64_t n : {1, 15, 17, 33, 100}) {
        for (std::int64_t k : {1, 3, 31, 130}) {
            for (std::int64_t m : {1, 2, 3, 5, 7, 9, 12, 15, 16, 17, 31, 70}) {
                check_paths({m, n, k}, GetParam(), nullptr, 0, 0, seed++);
            }
        }
    }
}

TEST_P(MatmulPaths, StridedRowsMatchReference) {
    std::uint32_t seed = 100;
    for (Shape s : {Shape{1, 33, 31}, Shape{3, 17, 130}, Shape{9, 100, 3}, Shape{31, 47, 64}}) {
        check_paths(s, GetParam(), nullptr, 5, 3, seed++);
    }
}

TEST_P(MatmulPaths, ThreadPoolMatchesReference) {
    ThreadPool pool(2);
    std::uint32_t seed = 200;
    for (Shape s : {Shape{1, 100, 130}, Shape{2, 33, 31}, Shape{7, 17, 3}, Shape{70, 100, 130},
                    Shape{64, 33, 64}, Shape{5, 1000, 64}}) {
        check_paths(s, GetParam(), &pool, 0, 0, seed++);
        check_paths(s, GetParam(), &pool, 2, 7, seed++);
    }
}

// Long K (crosses the kernels' K blocks) and many panels (several panel groups per thread).
TEST_P(MatmulPaths, LargeShapesMatchReference) {
    ThreadPool pool(2);
    check_paths({20, 200, 1100}, GetParam(), nullptr, 0, 0, 300);
    check_paths({13, 130, 777}, GetParam(), &pool, 1, 1, 301);
    check_paths({1, 300, 1025}, GetParam(), &pool, 0, 0, 302);
    // Two row tiles of the AMX kernel's blocks with a short second one, and a tail.
    check_paths({100, 70, 2100}, GetParam(), &pool, 0, 3, 303);
    // fp8 on AMX: more K than one dequantized chunk (2048 steps), so chunks add into y.
    check_paths({24, 40, 4200}, GetParam(), &pool, 0, 0, 304);
    // AMX: row groups of several row blocks (the input streamed past the weight slice) and a
    // short last group, K slices whose accumulators park between them, and a tail; enough
    // panels that the threads split them, not the rows.
    check_paths({200, 260, 600}, GetParam(), &pool, 0, 0, 305);
    // AMX: a weight too large for the caches in one call (no pool to split it), so all rows
    // go together and the accumulators go through y between K blocks; a short last block.
    check_paths({40, 2100, 1100}, GetParam(), nullptr, 0, 0, 306);
}

// More rows than one pass over the weight takes (the row blocks of a long prefill), with
// strides, so every block must find its own rows and outputs.
TEST_P(MatmulPaths, TallInputsMatchReference) {
    ThreadPool pool(2);
    check_paths({1100, 40, 64}, GetParam(), &pool, 3, 2, 400);
    check_paths({513, 17, 33}, GetParam(), nullptr, 0, 0, 401);
}

// A fused input gives the same bits as its buffer: matmul_silu_and_mul as silu_and_mul into a
// buffer and matmul of it (the down projection), matmul_rms_norm as rms_norm and matmul (a
// layer's first projection). On every path: single rows, decode batches, AMX row tiles, a tall
// input cut into row blocks, odd K and a K of several pieces, with and without workers.
TEST_P(MatmulPaths, FusedInputsEqualTheirBuffers) {
    ThreadPool pool(2);
    std::uint32_t seed = 500;
    for (bool silu : {true, false}) {
        for (Shape s : {Shape{1, 33, 31}, Shape{5, 100, 130}, Shape{16, 70, 64}, Shape{40, 47, 257},
                        Shape{600, 40, 96}, Shape{9, 20, 2051}}) {
            std::vector<float> w = random_values(s.n * s.k, seed++);
            std::vector<float> x = random_values(s.m * (silu ? 2 : 1) * s.k, seed++);
            if (silu)
                for (float& v : x) v *= 6.0f;  // gates well into both tails of the SiLU
            const std::vector<float> norm_weight = random_values(s.k, seed++);
            const PackedWeight packed = pack_for_test(w, s.n, s.k, GetParam());
            std::vector<float> buffer(s.m * s.k);
            if (silu) {
                silu_and_mul(x.data(), buffer.data(), s.m, s.k);
            } else {
                rms_norm(x.data(), norm_weight.data(), buffer.data(), s.m, s.k, 1e-6f);
            }
            for (Isa isa : paths_to_test()) {
                for (ThreadPool* workers : {static_cast<ThreadPool*>(nullptr), &pool}) {
                    std::vector<float> expected(s.m * s.n), fused(s.m * s.n, NAN);
                    matmul(buffer.data(), s.m, packed, expected.data(), workers, isa);
                    if (silu) {
                        matmul_silu_and_mul(x.data(), s.m, packed, fused.data(), workers, isa);
                    } else {
                        matmul_rms_norm(x.data(), s.m, norm_weight.data(), 1e-6f, packed, fused.data(), workers, isa);
                    }
                    for (std::size_t i = 0; i < expected.size(); ++i)
                        ASSERT_EQ(fused[i], expected[i])
                            << (silu ? "silu " : "norm ") << isa_name(isa) << " " << dtype_name(GetParam())
                            << " m=" << s.m << " n=" << s.n << " k=" << s.k << " at " << i << (workers ? " pool" : "");
                }
            }
        }
    }
}

// A gated MLP in one call gives the same bits as its two matmuls through a buffer, on every
// path. On AMX tiles with bf16 weights the activation comes straight from the gate / up
// accumulators: this covers a single row (not fused), a decode batch, a short second row tile,
// row blocks of a tall input (its last block of 3 rows not fused), an intermediate size that is
// not a multiple of 16 (not fused), and (bf16 only) a weight too large for the caches, whose
// accumulators park between K slices.
TEST_P(MatmulPaths, GatedMlpEqualsItsTwoMatmuls) {
    struct GatedShape {
        std::int64_t m, hidden, intermediate, out;
        bool with_pool;
    };
    ThreadPool pool(2);
    std::uint32_t seed = 700;
    for (GatedShape s : {GatedShape{1, 64, 48, 40, true}, GatedShape{16, 100, 48, 33, true},
                         GatedShape{40, 64, 32, 70, true}, GatedShape{515, 96, 64, 40, true},
                         GatedShape{9, 130, 40, 20, true}, GatedShape{64, 1536, 1024, 24, false}}) {
        if (s.hidden > 1024 && GetParam() != DType::kBF16) continue;
        std::vector<float> gate_up_w = random_values(2 * s.intermediate * s.hidden, seed++);
        std::vector<float> down_w = random_values(s.out * s.intermediate, seed++);
        std::vector<float> x = random_values(s.m * s.hidden, seed++);
        for (float& v : x) v *= 4.0f;  // gates well into both tails of the SiLU
        const std::vector<float> norm_weight = random_values(s.hidden, seed++);
        const PackedWeight gate_up = pack_for_test(gate_up_w, 2 * s.intermediate, s.hidden, GetParam());
        const PackedWeight down = pack_for_test(down_w, s.out, s.intermediate, GetParam());
        ThreadPool* workers = s.with_pool ? &pool : nullptr;
        for (Isa isa : paths_to_test()) {
            for (bool normed : {false, true}) {
                const float* norm = normed ? norm_weight.data() : nullptr;
                std::vector<float> rows(s.m * 2 * s.intermediate), expected(s.m * s.out);
                if (normed) {
                    matmul_rms_norm(x.data(), s.m, norm, 1e-6f, gate_up, rows.data(), workers, isa);
                } else {
                    matmul(x.data(), s.m, gate_up, rows.data(), workers, isa);
                }
                matmul_silu_and_mul(rows.data(), s.m, down, expected.data(), workers, isa);
                // Exactly the rows it asks for, then a guard that must stay untouched.
                constexpr std::size_t kGuard = 64;
                const auto buffer_floats = static_cast<std::size_t>(gated_mlp_rows_floats(s.m, gate_up, down, isa));
                const bool fuses = isa == Isa::kAmx && GetParam() == DType::kBF16 && s.intermediate % 16 == 0;
                EXPECT_EQ(buffer_floats,
                          fuses ? static_cast<std::size_t>(std::min<std::int64_t>(s.m, 7) * 2 * s.intermediate)
                                : rows.size());
                std::vector<float> scratch_rows(buffer_floats + kGuard, -7.0f), fused(expected.size(), NAN);
                matmul_gated_mlp(x.data(), s.m, norm, 1e-6f, gate_up, down, scratch_rows.data(), fused.data(),
                                 workers, isa);
                for (std::size_t i = buffer_floats; i < scratch_rows.size(); ++i)
                    ASSERT_EQ(scratch_rows[i], -7.0f) << isa_name(isa) << " m=" << s.m << " wrote past the rows";
                for (std::size_t i = 0; i < expected.size(); ++i)
                    ASSERT_EQ(fused[i], expected[i])
                        << isa_name(isa) << " " << dtype_name(GetParam()) << " m=" << s.m << " hidden=" << s.hidden
                        << " intermediate=" << s.intermediate << (normed ? " normed" : "") << " at " << i;
            }
        }
    }
}

// Checkpoints with narrower blocks (weight_block_size [32, 32], [4, 4]) keep one scale per block.
TEST(MatmulFp8, NarrowScaleBlocksMatchReference) {
    ThreadPool pool(2);
    for (std::int64_t block : {4, 32}) {
        g_fp8_block = block;
        for (Shape s : {Shape{1, 40, 130}, Shape{2, 33, 64}, Shape{9, 70, 300}, Shape{16, 48, 32},
                        Shape{12, 40, 20}, Shape{7, 344, 172}, Shape{7, 128, 344}}) {
            check_paths(s, DType::kF8E4M3, &pool, 0, 0, static_cast<std::uint32_t>(500 + block + s.m));
            check_paths(s, DType::kF8E4M3, nullptr, 3, 5, static_cast<std::uint32_t>(600 + block + s.m));
        }
    }
    g_fp8_block = kFp8ScaleBlock;
}

// Deterministic inference: with the switch on, a row's outputs are the same bits whatever
// else is in the call (decode batches of every height, prefill chunks, the row blocks of a
// tall input), on every path, with and without threads.
TEST_P(MatmulPaths, BatchInvariantRowsEqualTheRowAlone) {
    struct Invariant {
        Invariant() { set_batch_invariant(true); }
        ~Invariant() { set_batch_invariant(false); }
    } invariant;
    constexpr std::int64_t n = 300, k = 520, kMaxRows = 130;
    std::vector<float> w = random_values(n * k, 700);
    const std::vector<float> x = random_values(kMaxRows * k, 701);
    const PackedWeight packed = pack_for_test(w, n, k, GetParam());
    ThreadPool pool(2);
    for (Isa isa : paths_to_test()) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> alone(kMaxRows * n);
            for (std::int64_t r = 0; r < kMaxRows; ++r)
                matmul(x.data() + r * k, 1, packed, alone.data() + r * n, p, isa);
            for (std::int64_t m : {2, 3, 5, 6, 7, 12, 13, 16, 17, 31, 40, 70, 130}) {
                std::vector<float> y(m * n);
                matmul(x.data(), m, packed, y.data(), p, isa);
                for (std::int64_t r = 0; r < m; ++r)
                    ASSERT_EQ(std::memcmp(y.data() + r * n, alone.data() + r * n, n * sizeof(float)), 0)
                        << isa_name(isa) << " " << dtype_name(GetParam()) << " row " << r << " of " << m
                        << (p ? " pool" : "");
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Matmul, MatmulPaths,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(MatmulPack, RoundTripAndZeroPadding) {
    for (DType wtype : {DType::kF32, DType::kBF16}) {
        for (Shape s : {Shape{0, 1, 1}, Shape{0, 17, 3}, Shape{0, 33, 30}, Shape{0, 16, 2}}) {
            std::vector<float> w = random_values(s.n * s.k, 7);
            const PackedWeight packed = pack_weight(w.data(), DType::kF32, s.n, s.k, wtype);
            EXPECT_EQ(packed.n_padded % 16, 0);
            EXPECT_EQ(packed.k_padded % 2, 0);
            EXPECT_EQ(packed.bytes(), static_cast<std::size_t>(packed.n_padded * packed.k_padded) *
                                          dtype_size(wtype));
            std::vector<float> back(s.n * s.k);
            unpack_weight(packed, back.data());
            for (std::size_t i = 0; i < w.size(); ++i) {
                const float want = wtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(w[i])) : w[i];
                ASSERT_EQ(back[i], want) << dtype_name(wtype) << " element " << i;
            }

            // Every stored element that is not a real weight must be zero. Walk the packed
            // layout and mark the positions the real weights occupy.
            const std::int64_t total = packed.n_padded * packed.k_padded;
            std::int64_t nonzero_padding = 0;
            for (std::int64_t idx = 0; idx < total; ++idx) {
                std::int64_t row, col;
                if (wtype == DType::kBF16) {  // [n/16][k/2][16][2]
                    const std::int64_t panel = idx / (packed.k_padded * 16);
                    const std::int64_t rest = idx % (packed.k_padded * 16);
                    row = panel * 16 + (rest / 2) % 16;
                    col = (rest / 32) * 2 + rest % 2;
                } else {  // [n/16][k][16]
                    const std::int64_t panel = idx / (packed.k_padded * 16);
                    const std::int64_t rest = idx % (packed.k_padded * 16);
                    row = panel * 16 + rest % 16;
                    col = rest / 16;
                }
                const bool padding = row >= s.n || col >= s.k;
                const float v = wtype == DType::kBF16
                                    ? bf16_to_f32(packed.data.as<std::uint16_t>()[idx])
                                    : packed.data.as<float>()[idx];
                if (!padding) {
                    ASSERT_EQ(v, back[row * s.k + col]);
                }
                if (padding && v != 0.0f) ++nonzero_padding;
            }
            EXPECT_EQ(nonzero_padding, 0) << dtype_name(wtype) << " n=" << s.n << " k=" << s.k;
        }
    }
}

TEST(MatmulPack, PacksBf16SourceExactly) {
    const std::vector<float> w = random_values(17 * 5, 11);
    std::vector<std::uint16_t> w_bf16(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) w_bf16[i] = f32_to_bf16(w[i]);
    for (DType wtype : {DType::kF32, DType::kBF16}) {
        const PackedWeight packed = pack_weight(w_bf16.data(), DType::kBF16, 17, 5, wtype);
        std::vector<float> back(w.size());
        unpack_weight(packed, back.data());
        for (std::size_t i = 0; i < w.size(); ++i) ASSERT_EQ(back[i], bf16_to_f32(w_bf16[i]));
    }
}

// Packing in row blocks (as the loader does, releasing each block's file pages) gives the
// bytes packing the whole matrix gives, padding included, for blocks that end inside a panel.
TEST(MatmulPack, RowBlocksEqualTheWholeMatrix) {
    const std::int64_t n = 53, k = 9;
    const std::vector<float> w = random_values(n * k, 12);
    for (DType wtype : {DType::kF32, DType::kBF16}) {
        const PackedWeight whole = pack_weight(w.data(), DType::kF32, n, k, wtype);
        PackedWeight blocks = empty_packed_weight(wtype, n, k);
        for (std::int64_t r : {std::int64_t{0}, std::int64_t{20}, std::int64_t{37}}) {
            const std::int64_t rows = std::min<std::int64_t>(r == 0 ? 20 : r == 20 ? 17 : 16, n - r);
            pack_weight_rows(w.data() + r * k, DType::kF32, r, rows, blocks);
        }
        ASSERT_EQ(whole.data.size(), blocks.data.size());
        ASSERT_EQ(0, std::memcmp(whole.data.data(), blocks.data.data(), whole.data.size())) << dtype_name(wtype);
    }
}

// FP8 packing keeps every code and scale: unpacking gives code × scale of its block exactly,
// and the padding rows / columns are zero codes.
TEST(MatmulPack, Fp8RoundTripAndZeroPadding) {
    for (DType wtype : {DType::kF8E4M3, DType::kF8E5M2}) {
        for (Shape s : {Shape{0, 17, 3}, Shape{0, 33, 130}, Shape{0, 16, 260}}) {
            std::vector<float> w = random_values(s.n * s.k, 9);
            const PackedWeight packed = pack_for_test(w, s.n, s.k, wtype);
            const Fp8Blocks q = quantize_fp8_blocks(w.data(), s.n, s.k, wtype);
            EXPECT_EQ(packed.k_padded % 4, 0);
            std::vector<float> back(s.n * s.k);
            unpack_weight(packed, back.data());
            for (std::int64_t j = 0; j < s.n; ++j)
                for (std::int64_t c = 0; c < s.k; ++c)
                    ASSERT_EQ(back[j * s.k + c], fp8_to_f32(q.codes[j * s.k + c], wtype) * q.scale(j, c)) << j << "," << c;
            std::int64_t real_nonzero = 0, stored_nonzero = 0;
            for (std::uint8_t code : q.codes) real_nonzero += (code & 0x7f) != 0;
            for (std::int64_t i = 0; i < packed.n_padded * packed.k_padded; ++i)
                stored_nonzero += (packed.data.as<std::uint8_t>()[i] & 0x7f) != 0;
            EXPECT_EQ(stored_nonzero, real_nonzero) << "padding holds nonzero codes";
        }
    }
}

TEST(MatmulEdge, ZeroKWritesZeros) {
    const PackedWeight packed = pack_weight(nullptr, DType::kF32, 5, 0, DType::kBF16);
    std::vector<float> y(2 * 5, 1.0f);
    for (Isa isa : paths_to_test()) {
        matmul(nullptr, 2, packed, y.data(), nullptr, isa);
        for (float v : y) ASSERT_EQ(v, 0.0f) << isa_name(isa);
    }
}

}  // namespace
}  // namespace tessera::kernels
