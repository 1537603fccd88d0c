// kernels/cpu/matmul_avx2.cpp — the AVX2 + FMA matmul path (x86-64-v3 baseline) over the
// packed layout of kernels/matmul.h. bf16 weights are widened to f32 in registers: the
// 32-bit lane holding the (k, k+1) pair of one output gives w[k] by a 16-bit left shift and
// w[k+1] by masking off the low half, so no shuffles are needed; x arrives pre-rounded to
// bf16 precision (as f32), which makes this path compute the same products as dpbf16.
//
// Micro-kernel: rows × panels of accumulators, two ymm per 16-output panel. With only 16
// ymm registers the tile shape depends on m: 1 × 4 panels for decode (weights streamed
// once, 8 independent chains), 2 × 2, and 4 (bf16) or 6 (f32) rows × 1 panel for prefill,
// where a K block of the panel stays in L1 across the row tiles.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/matmul_impl.h"

namespace tessera::kernels::cpu {

namespace {

constexpr int kMaxRows = 6;
constexpr int kGroup = 4;
constexpr std::int64_t kKcSteps = 256;  // 1 panel × 256 steps × 64 B = 16 KB of L1
constexpr std::int64_t kBlockBytes = 64;

struct TileArgs {
    const float* a;            // first row of the tile at its first k (f32, bf16-rounded)
    std::int64_t a_stride;     // floats between rows of a
    const std::byte* b;        // first panel of the group, at the tile's first step
    std::int64_t panel_bytes;  // distance between consecutive panels
    std::int64_t steps;        // K steps: bf16 pairs, or f32 k
    float* y;                  // first row / column of the tile
    std::int64_t y_stride;     // floats
    std::int64_t n_valid;      // valid output columns from the group's first column
    bool accumulate;           // add to y (later K blocks) instead of overwriting it
};

// Loads or stores 8 floats of which only `valid` (may be ≤ 0 or ≥ 8) are in bounds.
inline __m256i lane_mask(std::int64_t valid) {
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int v = static_cast<int>(std::clamp<std::int64_t>(valid, 0, 8));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(v), index);
}

inline __m256 load_partial(const float* p, std::int64_t valid) {
    if (valid >= 8) return _mm256_loadu_ps(p);
    if (valid <= 0) return _mm256_setzero_ps();
    return _mm256_maskload_ps(p, lane_mask(valid));
}

inline void store_partial(float* p, std::int64_t valid, __m256 v) {
    if (valid >= 8) {
        _mm256_storeu_ps(p, v);
    } else if (valid > 0) {
        _mm256_maskstore_ps(p, lane_mask(valid), v);
    }
}

template <bool kBf16, int kRows, int kPanels>
void micro_kernel(const TileArgs& t) {
    __m256 acc[kRows][kPanels][2];
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                acc[i][p][h] = t.accumulate ? load_partial(t.y + i * t.y_stride + 16 * p + 8 * h,
                                                           t.n_valid - 16 * p - 8 * h)
                                            : _mm256_setzero_ps();
            }
        }
    }

    const float* a = t.a;
    const std::byte* b = t.b;
    const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (std::int64_t s = 0; s < t.steps; ++s) {
        if constexpr (kBf16) {
            __m256 w_even[kPanels][2];  // w[., 2s]
            __m256 w_odd[kPanels][2];   // w[., 2s + 1]
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i v = _mm256_load_si256(
                        reinterpret_cast<const __m256i*>(b + p * t.panel_bytes + 32 * h));
                    w_even[p][h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                    w_odd[p][h] = _mm256_castsi256_ps(_mm256_and_si256(v, high_half));
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < kRows; ++i) {
                const __m256 x0 = _mm256_broadcast_ss(a + i * t.a_stride + 2 * s);
                const __m256 x1 = _mm256_broadcast_ss(a + i * t.a_stride + 2 * s + 1);
#pragma GCC unroll 4
                for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
                    for (int h = 0; h < 2; ++h) {
                        acc[i][p][h] = _mm256_fmadd_ps(w_even[p][h], x0, acc[i][p][h]);
                        acc[i][p][h] = _mm256_fmadd_ps(w_odd[p][h], x1, acc[i][p][h]);
                    }
                }
            }
        } else {
            __m256 w[kPanels][2];
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    w[p][h] = _mm256_load_ps(
                        reinterpret_cast<const float*>(b + p * t.panel_bytes + 32 * h));
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < kRows; ++i) {
                const __m256 x0 = _mm256_broadcast_ss(a + i * t.a_stride + s);
#pragma GCC unroll 4
                for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
                    for (int h = 0; h < 2; ++h) {
                        acc[i][p][h] = _mm256_fmadd_ps(w[p][h], x0, acc[i][p][h]);
                    }
                }
            }
        }
        b += kBlockBytes;
    }

#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                store_partial(t.y + i * t.y_stride + 16 * p + 8 * h, t.n_valid - 16 * p - 8 * h,
                              acc[i][p][h]);
            }
        }
    }
}

using MicroKernel = void (*)(const TileArgs&);

// k[rows - 1][panels - 1]. Shapes that would spill (rows × panels > 4) are never selected
// but are instantiated to keep the table simple.
struct KernelTable {
    MicroKernel k[kMaxRows][kGroup];
};

template <bool kBf16, int kRows, int... kPanelsMinus1>
constexpr void fill_row(KernelTable& table, std::integer_sequence<int, kPanelsMinus1...>) {
    ((table.k[kRows - 1][kPanelsMinus1] = &micro_kernel<kBf16, kRows, kPanelsMinus1 + 1>), ...);
}

template <bool kBf16, int... kRowsMinus1>
constexpr KernelTable make_table(std::integer_sequence<int, kRowsMinus1...>) {
    KernelTable table{};
    (fill_row<kBf16, kRowsMinus1 + 1>(table, std::make_integer_sequence<int, kGroup>()), ...);
    return table;
}

template <bool kBf16>
constexpr KernelTable kKernels = make_table<kBf16>(std::make_integer_sequence<int, kMaxRows>());

// Rows [row_begin, row_end) × panels [panel_begin, panel_end) of y from K steps
// [0, steps) of a weight whose panels start at `b`, `panel_bytes` apart; `accumulate` adds
// the first K block to y.
template <bool kBf16>
void run_panels(const float* a_base, std::int64_t a_stride, std::int64_t row_begin, std::int64_t row_end,
                const std::byte* b, std::int64_t panel_bytes, std::int64_t panel_begin, std::int64_t panel_end,
                std::int64_t steps, float* y, std::int64_t y_stride, std::int64_t n, bool accumulate) {
    const std::int64_t m = row_end - row_begin;
    if (m <= 0 || panel_end <= panel_begin) return;

    // Tile shape from m (see the file comment); the panel count shrinks at the group tail.
    const std::int64_t max_rows = m == 1 ? 1 : m == 2 ? 2 : (kBf16 ? 4 : kMaxRows);
    const std::int64_t group = m == 1 ? 4 : m == 2 ? 2 : 1;
    const std::int64_t n_row_tiles = (m + max_rows - 1) / max_rows;
    const std::int64_t rows_per_tile = (m + n_row_tiles - 1) / n_row_tiles;
    const std::int64_t kc = n_row_tiles == 1 ? steps : kKcSteps;

    for (std::int64_t p0 = panel_begin; p0 < panel_end; p0 += group) {
        const int panels = static_cast<int>(std::min(group, panel_end - p0));
        for (std::int64_t s0 = 0; s0 < steps; s0 += kc) {
            TileArgs t;
            t.a_stride = a_stride;
            t.b = b + p0 * panel_bytes + s0 * kBlockBytes;
            t.panel_bytes = panel_bytes;
            t.steps = std::min(kc, steps - s0);
            t.y_stride = y_stride;
            t.n_valid = n - p0 * kPanelWidth;
            t.accumulate = accumulate || s0 > 0;
            for (std::int64_t r = row_begin; r < row_end; r += rows_per_tile) {
                const int rows = static_cast<int>(std::min(rows_per_tile, row_end - r));
                t.a = a_base + r * a_stride + s0 * (kBf16 ? 2 : 1);
                t.y = y + r * y_stride + p0 * kPanelWidth;
                kKernels<kBf16>.k[rows - 1][panels - 1](t);
            }
        }
    }
}

template <bool kBf16>
void run_tile(const MatmulOperands& op, const OutputTile& tile) {
    const PackedWeight& w = *op.w;
    const std::int64_t steps = kBf16 ? w.k_padded / 2 : w.k;
    run_panels<kBf16>(static_cast<const float*>(op.a), op.a_stride, tile.row_begin, tile.row_end, w.data.data(),
                      packed_panel_bytes(w), tile.panel_begin, tile.panel_end, steps, op.y, op.y_stride, w.n, false);
}

}  // namespace

std::int64_t panel_group_avx2() { return kGroup; }

void prepare_bf16_avx2(const float* x, std::int64_t x_stride, std::int64_t k, std::int64_t k_padded,
                       std::int64_t row_begin, std::int64_t row_end, float* dst) {
    // Round to nearest even on the bit pattern, as f32_to_bf16 does; unlike it, a NaN whose
    // payload sits only in the low half becomes an infinity (activations are never NaN).
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7FFF);
    const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float* src = x + r * x_stride;
        float* out = dst + r * k_padded;
        for (std::int64_t j = 0; j < k_padded; j += 8) {
            const std::int64_t valid_in = k - j;
            const __m256i v = _mm256_castps_si256(load_partial(src + j, valid_in));
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), one);
            const __m256i rounded =
                _mm256_and_si256(_mm256_add_epi32(v, _mm256_add_epi32(bias, lsb)), high_half);
            store_partial(out + j, k_padded - j, _mm256_castsi256_ps(rounded));
        }
    }
}

void gemm_bf16_panels_avx2(const float* a, std::int64_t a_stride, std::int64_t m, const void* b,
                           std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                           std::int64_t y_stride, std::int64_t n_valid, bool accumulate) {
    run_panels<true>(a, a_stride, 0, m, static_cast<const std::byte*>(b), panel_bytes, 0, n_panels, steps, y,
                     y_stride, n_valid, accumulate);
}

void matmul_tile_avx2(const MatmulOperands& op, const OutputTile& tile) {
    if (op.w->dtype == DType::kBF16) {
        run_tile<true>(op, tile);
    } else {
        run_tile<false>(op, tile);
    }
}

}  // namespace tessera::kernels::cpu
