// kernels/cpu/matmul_avx512.cpp — the AVX-512 matmul path: _mm512_dpbf16_ps for bf16
// weights, FMA for f32 weights, over the packed layout of kernels/matmul.h.
// Compiled with TSR_AVX512_FLAGS; only entered after kernels::isa_supported(kAvx512Bf16).
//
// One register-blocked micro-kernel serves decode and prefill: kMaxRows rows × up to
// kGroup panels (16 outputs each) of accumulators. Each step loads one 64-byte block per
// panel (16 outputs × one bf16 pair or one f32 k) and broadcasts one 32-bit element of a
// per row. Decode (m ≤ 6) is one row tile, so the weight is streamed exactly once (in
// kGroup sequential streams: measured faster than 1, 2, 3, 6 or 8 streams), each with a
// software prefetch a little ahead (kStreamPrefetchBytes: 8-15 % faster on the AMX Xeon host;
// the AVX-512 AMD host this kernel was first tuned on had measured software prefetch slower,
// in an earlier form); prefill reuses a K block of the weight panels across all row tiles.
//
// Keep this file free of header-inline helpers that a baseline file could also
// instantiate (std containers, etc.): the linker may pick this file's AVX-512 copy.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cpu/dpbf16_broadcast_avx512.h"
#include "kernels/cpu/matmul_impl.h"

namespace tessera::kernels::cpu {

namespace {

// How far ahead in each panel a weight-streaming call asks for lines (decode, m <= kMaxRows).
// On the AMX Xeon host the hardware prefetchers alone left the GEMVs at 27-28 GB/s of a
// 32-34 GB/s read bandwidth; with this the small dense preset decodes 25.3-25.5 tok/s instead
// of 22.8-23.4 (1-2 KB ahead measured best; 512 bytes and 4 KB less).
constexpr std::int64_t kStreamPrefetchBytes = 2048;
constexpr int kMaxRows = 6;  // 6 × 4 zmm accumulators + 4 weight blocks + 1 broadcast
constexpr int kGroup = 4;    // panels per micro-kernel: 64 outputs
// Steps of K per block: the kGroup panels' block (4 × 512 × 64 B = 128 KB) stays in L2
// while every row tile reuses it. Streaming it from L2 (256 B per 24 dot products) keeps up
// with the multiply-adds, and long blocks save the reloads of the y tile; measured on
// Zen 4, 512 beat 96 (L1-sized) by ~7 %.
constexpr std::int64_t kKcSteps = 512;
constexpr std::int64_t kBlockBytes = 64;

struct TileArgs {
    const std::byte* a;        // first row of the tile, at the tile's first step
    std::int64_t a_row_bytes;  // distance between rows of a
    const std::byte* b;        // first panel of the group, at the tile's first step
    std::int64_t panel_bytes;  // distance between consecutive panels
    std::int64_t steps;        // K steps in this call
    float* y;                  // first row / column of the tile
    std::int64_t y_stride;     // floats
    std::int64_t n_valid;      // valid output columns from the group's first column
    bool accumulate;           // add to y (later K blocks) instead of overwriting it
    // Part of the weight block the next calls will stream (same layout as b), or nullptr:
    // fetched into L2 while this call computes from a block already there. One step of it
    // (a 64-byte line per panel) every `prefetch_every` steps, starting at `prefetch`.
    const std::byte* prefetch = nullptr;
    std::int64_t prefetch_every = 1;
    std::int64_t prefetch_panel_bytes = 0;  // distance between the prefetched panels
    // One row tile streams the weight from memory once: each step also asks for the line
    // kStreamPrefetchBytes ahead in every panel.
    bool stream = false;
};

inline __mmask16 column_mask(std::int64_t valid) {
    if (valid >= 16) return static_cast<__mmask16>(0xFFFF);
    if (valid <= 0) return 0;
    return static_cast<__mmask16>((1u << valid) - 1u);
}

template <bool kBf16>
inline __m512 multiply_add(__m512 acc, __m512i a, __m512 b) {
    if constexpr (kBf16) {
        return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
    } else {
        return _mm512_fmadd_ps(_mm512_castsi512_ps(a), b, acc);
    }
}

template <bool kBf16, int kRows, int kPanels>
void micro_kernel(const TileArgs& t) {
    __m512 acc[kRows][kPanels];
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
            if (t.accumulate) {
                acc[i][p] = _mm512_maskz_loadu_ps(column_mask(t.n_valid - 16 * p),
                                                  t.y + i * t.y_stride + 16 * p);
            } else {
                acc[i][p] = _mm512_setzero_ps();
            }
        }
    }

    const std::byte* a = t.a;
    const std::byte* b = t.b;
    const std::int64_t pb = t.panel_bytes;
    const std::byte* next = t.prefetch;
    std::int64_t until_prefetch = 1;
    for (std::int64_t s = 0; s < t.steps; ++s) {
        __m512 w[kPanels];
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
            w[p] = _mm512_load_ps(reinterpret_cast<const float*>(b + p * pb));
        }
        if (t.stream) {
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p)
                _mm_prefetch(reinterpret_cast<const char*>(b + p * pb + kStreamPrefetchBytes), _MM_HINT_T0);
        }
        if (next != nullptr && --until_prefetch == 0) {
            until_prefetch = t.prefetch_every;
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p)
                _mm_prefetch(reinterpret_cast<const char*>(next + p * t.prefetch_panel_bytes), _MM_HINT_T1);
            next += kBlockBytes;
        }
#pragma GCC unroll 8
        for (int i = 0; i < kRows; ++i) {
            std::int32_t bits;
            __builtin_memcpy(&bits, a + i * t.a_row_bytes, 4);
            const __m512i ai = _mm512_set1_epi32(bits);
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p) acc[i][p] = multiply_add<kBf16>(acc[i][p], ai, w[p]);
        }
        a += 4;
        b += kBlockBytes;
    }

#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
            float* dst = t.y + i * t.y_stride + 16 * p;
            if (t.n_valid - 16 * p >= 16) {
                _mm512_storeu_ps(dst, acc[i][p]);
            } else {
                _mm512_mask_storeu_ps(dst, column_mask(t.n_valid - 16 * p), acc[i][p]);
            }
        }
    }
}

using MicroKernel = void (*)(const TileArgs&);

// k[rows - 1][panels - 1]: one instantiation per tile shape, so tails run unrolled too.
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

template <bool kBf16>
void run_tile(const MatmulOperands& op, const OutputTile& tile) {
    const PackedWeight& w = *op.w;
    const std::int64_t m = tile.row_end - tile.row_begin;
    if (m <= 0 || tile.panel_end <= tile.panel_begin) return;
    // One 32-bit element of a per step: a bf16 pair, or one f32. f32 steps stop at k, not
    // k_padded, because x has only k columns.
    const std::int64_t steps = kBf16 ? w.k_padded / 2 : w.k;
    const std::int64_t a_row_bytes = op.a_stride * (kBf16 ? 2 : 4);
    const std::int64_t panel_bytes = packed_panel_bytes(w);
    const auto* a_base = static_cast<const std::byte*>(op.a);
    const std::byte* b_base = w.data.data();

    // Split the rows into near-equal tiles of at most kMaxRows (7 rows → 4 + 3, not 6 + 1).
    const std::int64_t n_row_tiles = (m + kMaxRows - 1) / kMaxRows;
    const std::int64_t rows_per_tile = (m + n_row_tiles - 1) / n_row_tiles;
    const std::int64_t kc = n_row_tiles == 1 ? steps : kKcSteps;

    for (std::int64_t p0 = tile.panel_begin; p0 < tile.panel_end; p0 += kGroup) {
        const int panels = static_cast<int>(std::min<std::int64_t>(kGroup, tile.panel_end - p0));
        const std::int64_t n_valid = w.n - p0 * kPanelWidth;
        for (std::int64_t s0 = 0; s0 < steps; s0 += kc) {
            TileArgs t;
            t.a_row_bytes = a_row_bytes;
            t.b = b_base + p0 * panel_bytes + s0 * kBlockBytes;
            t.panel_bytes = panel_bytes;
            t.prefetch_panel_bytes = panel_bytes;
            t.steps = std::min(kc, steps - s0);
            t.y_stride = op.y_stride;
            t.n_valid = n_valid;
            t.accumulate = s0 > 0;
            t.stream = n_row_tiles == 1;
            // With several row tiles every tile computes from the block in L2 while fetching
            // its share of the next block, so that memory and multiply-adds overlap (m = 16
            // decode batches, prefill): tile i of T fetches every T-th step of the next
            // block's first steps / T · i onwards.
            const std::byte* next_block = nullptr;
            std::int64_t next_steps = 0;
            if (n_row_tiles > 1) {
                if (s0 + kc < steps) {
                    next_block = t.b + kc * kBlockBytes;
                    next_steps = std::min(kc, steps - s0 - kc);
                } else if (p0 + kGroup < tile.panel_end) {
                    next_block = b_base + (p0 + kGroup) * panel_bytes;
                    next_steps = std::min(kc, steps);
                }
            }
            const std::int64_t share = (next_steps + n_row_tiles - 1) / n_row_tiles;
            t.prefetch_every = std::max<std::int64_t>(1, t.steps / std::max<std::int64_t>(1, share));
            std::int64_t tile_index = 0;
            for (std::int64_t r = tile.row_begin; r < tile.row_end; r += rows_per_tile, ++tile_index) {
                const int rows = static_cast<int>(std::min(rows_per_tile, tile.row_end - r));
                t.a = a_base + r * a_row_bytes + s0 * 4;
                t.y = op.y + r * op.y_stride + p0 * kPanelWidth;
                t.prefetch = next_block != nullptr && tile_index * share < next_steps
                                 ? next_block + tile_index * share * kBlockBytes
                                 : nullptr;
                kKernels<kBf16>.k[rows - 1][panels - 1](t);
            }
        }
    }
}

// ---- FP8 weights ----
// The byte lookups need AVX-512 VBMI, which some BF16 CPUs (Cooper Lake) lack: only these
// functions are compiled for it, and kernels/matmul.cpp calls them only when CPUID has it.
#define TSR_FP8_TARGET __attribute__((target("avx512vbmi")))

// The sign-less code's bf16 bits from two byte lookups over 128-entry tables (vpermi2b reads
// index bits 0-6), the sign copied from the code, and the bytes interleaved into the two bf16
// blocks (steps 2g and 2g + 1) of the packed layout; see fp8_panel_offset.
struct Fp8Tables {
    __m512i low0, low1, high0, high1;
};

TSR_FP8_TARGET inline Fp8Tables load_tables(const Fp8Lookup& l) {
    return {_mm512_load_si512(l.low), _mm512_load_si512(l.low + 64), _mm512_load_si512(l.high),
            _mm512_load_si512(l.high + 64)};
}

TSR_FP8_TARGET inline void widen_fp8(const Fp8Tables& t, __m512i codes, __m512i& step0, __m512i& step1) {
    const __m512i low = _mm512_permutex2var_epi8(t.low0, codes, t.low1);
    __m512i high = _mm512_permutex2var_epi8(t.high0, codes, t.high1);
    high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);  // high | (codes & 0x80)
    step0 = _mm512_unpacklo_epi8(low, high);
    step1 = _mm512_unpackhi_epi8(low, high);
}

// How far ahead of the widening each panel's stream is fetched. Widening costs ~4× the
// instructions per byte of the bf16 kernel, so the out-of-order window alone keeps too few
// lines in flight to reach the memory bandwidth.
constexpr std::int64_t kFp8PrefetchBytes = 2048;

struct Fp8TileArgs {
    const std::byte* a;         // first row, bf16 pairs
    std::int64_t a_row_bytes;
    const std::uint8_t* codes;  // first panel of the group
    const float* scales;        // its first 16-float scale vector
    std::int64_t panel_bytes;
    std::int64_t scale_panel_floats;
    std::int64_t scale_block;
    std::int64_t steps;
    float* y;
    std::int64_t y_stride;
    std::int64_t n_valid;
};

// Each 128-column block is summed exactly (bf16 products, f32 sums) into its own
// accumulators, then scaled into the result: the checkpoint's dequantization, not a
// rounded copy of it.
template <int kRows, int kPanels>
TSR_FP8_TARGET void fp8_micro_kernel(const Fp8TileArgs& t, const Fp8Tables& tables) {
    __m512 acc[kRows][kPanels];
    for (int i = 0; i < kRows; ++i)
        for (int p = 0; p < kPanels; ++p) acc[i][p] = _mm512_setzero_ps();
    const std::int64_t steps_per_block = t.scale_block / 2;
    for (std::int64_t s0 = 0, block = 0; s0 < t.steps; s0 += steps_per_block, ++block) {
        __m512 part[kRows][kPanels];
        for (int i = 0; i < kRows; ++i)
            for (int p = 0; p < kPanels; ++p) part[i][p] = _mm512_setzero_ps();
        const std::int64_t s_end = std::min(t.steps, s0 + steps_per_block);
        for (std::int64_t s = s0; s < s_end; s += 2) {
            __m512i x0[kRows], x1[kRows];
            for (int i = 0; i < kRows; ++i) {
                std::int32_t pair[2];
                __builtin_memcpy(pair, t.a + i * t.a_row_bytes + 4 * s, 8);
                x0[i] = _mm512_set1_epi32(pair[0]);
                x1[i] = _mm512_set1_epi32(pair[1]);
            }
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p) {
                const std::uint8_t* line = t.codes + p * t.panel_bytes + 32 * s;
                _mm_prefetch(reinterpret_cast<const char*>(line + kFp8PrefetchBytes), _MM_HINT_T0);
                const __m512i codes = _mm512_load_si512(line);
                __m512i w0, w1;
                widen_fp8(tables, codes, w0, w1);
                for (int i = 0; i < kRows; ++i) {
                    part[i][p] = _mm512_dpbf16_ps(part[i][p], (__m512bh)x0[i], (__m512bh)w0);
                    part[i][p] = _mm512_dpbf16_ps(part[i][p], (__m512bh)x1[i], (__m512bh)w1);
                }
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
            const __m512 scale = _mm512_loadu_ps(t.scales + p * t.scale_panel_floats + 16 * block);
            for (int i = 0; i < kRows; ++i) acc[i][p] = _mm512_fmadd_ps(part[i][p], scale, acc[i][p]);
        }
    }
    for (int i = 0; i < kRows; ++i) {
        for (int p = 0; p < kPanels; ++p) {
            _mm512_mask_storeu_ps(t.y + i * t.y_stride + 16 * p, column_mask(t.n_valid - 16 * p), acc[i][p]);
        }
    }
}

using Fp8MicroKernel = void (*)(const Fp8TileArgs&, const Fp8Tables&);
constexpr int kFp8GroupRows = 2;  // up to here, one tile of rows over kGroup panels
constexpr Fp8MicroKernel kFp8Kernels[kFp8GroupRows][kGroup] = {
    {&fp8_micro_kernel<1, 1>, &fp8_micro_kernel<1, 2>, &fp8_micro_kernel<1, 3>, &fp8_micro_kernel<1, 4>},
    {&fp8_micro_kernel<2, 1>, &fp8_micro_kernel<2, 2>, &fp8_micro_kernel<2, 3>, &fp8_micro_kernel<2, 4>},
};

// Decode batches taller than kFp8GroupRows: one panel, up to kFp8TileRows rows. Each code
// line is widened once for all the rows, and each row's bf16 pair is broadcast straight from
// memory. A scale block's sums stay in registers (one per row); the scaled total too up to 8
// rows, and beyond that in y, so that 16 rows fit the 32 registers and the panel is widened
// once per batch (measured: 10-20 % faster at 16 rows than two tiles of 8, ~8 % slower at 8
// rows than totals in registers).
constexpr int kFp8TileRows = 16;

template <int kRows>
TSR_FP8_TARGET void fp8_rows_kernel(const Fp8TileArgs& t, const Fp8Tables& tables) {
    constexpr bool kTotalsInRegisters = kRows <= 8;
    const __mmask16 valid = column_mask(t.n_valid);
    __m512 total[kTotalsInRegisters ? kRows : 1];
    for (__m512& v : total) v = _mm512_setzero_ps();
    const std::int64_t steps_per_block = t.scale_block / 2;
    for (std::int64_t s0 = 0, block = 0; s0 < t.steps; s0 += steps_per_block, ++block) {
        __m512 part[kRows];
        for (int i = 0; i < kRows; ++i) part[i] = _mm512_setzero_ps();
        const std::int64_t s_end = std::min(t.steps, s0 + steps_per_block);
        for (std::int64_t s = s0; s < s_end; s += 2) {
            const std::uint8_t* line = t.codes + 32 * s;
            _mm_prefetch(reinterpret_cast<const char*>(line + kFp8PrefetchBytes), _MM_HINT_T0);
            __m512i w0, w1;
            widen_fp8(tables, _mm512_load_si512(line), w0, w1);
            const std::byte* x = t.a + 4 * s;
            for (int i = 0; i < kRows; ++i) {
                part[i] = dpbf16_broadcast(part[i], (__m512bh)w0, x + i * t.a_row_bytes);
                part[i] = dpbf16_broadcast(part[i], (__m512bh)w1, x + i * t.a_row_bytes + 4);
            }
        }
        const __m512 scale = _mm512_loadu_ps(t.scales + 16 * block);
        for (int i = 0; i < kRows; ++i) {
            if constexpr (kTotalsInRegisters) {
                total[i] = _mm512_fmadd_ps(part[i], scale, total[i]);
            } else {  // the same sums in the same order as in registers
                float* y = t.y + i * t.y_stride;
                const __m512 sum = block == 0 ? _mm512_mul_ps(part[i], scale)
                                              : _mm512_fmadd_ps(part[i], scale, _mm512_maskz_loadu_ps(valid, y));
                _mm512_mask_storeu_ps(y, valid, sum);
            }
        }
    }
    if constexpr (kTotalsInRegisters) {
        for (int i = 0; i < kRows; ++i) _mm512_mask_storeu_ps(t.y + i * t.y_stride, valid, total[i]);
    }
}

struct Fp8RowTable {
    Fp8MicroKernel k[kFp8TileRows];  // k[rows - 1]
};

template <int... kRowsMinus1>
constexpr Fp8RowTable make_fp8_row_table(std::integer_sequence<int, kRowsMinus1...>) {
    return {{&fp8_rows_kernel<kRowsMinus1 + 1>...}};
}
constexpr Fp8RowTable kFp8RowKernels = make_fp8_row_table(std::make_integer_sequence<int, kFp8TileRows>());

}  // namespace

TSR_FP8_TARGET void matmul_tile_fp8_avx512(const MatmulOperands& op, const Fp8Panels& w, const OutputTile& tile) {
    const std::int64_t m = tile.row_end - tile.row_begin;
    if (m <= 0 || tile.panel_end <= tile.panel_begin) return;
    const Fp8Tables tables = load_tables(*w.lookup);
    Fp8TileArgs t;
    t.a = static_cast<const std::byte*>(op.a) + tile.row_begin * op.a_stride * 2;
    t.a_row_bytes = op.a_stride * 2;
    t.panel_bytes = w.panel_bytes;
    t.scale_panel_floats = w.scale_blocks * kPanelWidth;
    t.scale_block = w.scale_block;
    t.steps = w.steps;
    t.y_stride = op.y_stride;
    if (m > kFp8GroupRows) {
        // Panel by panel, every row tile of a panel while its codes are still in L1 / L2.
        for (std::int64_t p = tile.panel_begin; p < tile.panel_end; ++p) {
            t.codes = w.codes + p * w.panel_bytes;
            t.scales = w.scales + p * t.scale_panel_floats;
            t.n_valid = op.w->n - p * kPanelWidth;
            for (std::int64_t r0 = 0; r0 < m; r0 += kFp8TileRows) {
                const std::int64_t rows = std::min<std::int64_t>(kFp8TileRows, m - r0);
                t.a = static_cast<const std::byte*>(op.a) + (tile.row_begin + r0) * op.a_stride * 2;
                t.y = op.y + (tile.row_begin + r0) * op.y_stride + p * kPanelWidth;
                kFp8RowKernels.k[rows - 1](t, tables);
            }
        }
        return;
    }
    for (std::int64_t p0 = tile.panel_begin; p0 < tile.panel_end; p0 += kGroup) {
        const int panels = static_cast<int>(std::min<std::int64_t>(kGroup, tile.panel_end - p0));
        t.codes = w.codes + p0 * w.panel_bytes;
        t.scales = w.scales + p0 * t.scale_panel_floats;
        t.y = op.y + tile.row_begin * op.y_stride + p0 * kPanelWidth;
        t.n_valid = op.w->n - p0 * kPanelWidth;
        kFp8Kernels[m - 1][panels - 1](t, tables);
    }
}

TSR_FP8_TARGET void dequantize_fp8_panels_avx512(const Fp8Panels& w, std::int64_t panel_begin,
                                                 std::int64_t n_panels, std::int64_t step_begin, std::int64_t steps,
                                                 std::uint16_t* dst) {
    const Fp8Tables tables = load_tables(*w.lookup);
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    // Masked shift: GCC 12 warns about the undefined pass-through of the unmasked one.
    constexpr __mmask16 kAll = 0xFFFF;
    // cvtne2ps gives [16 even k | 16 odd k]; this puts them back in (even, odd) pairs.
    alignas(64) static constexpr std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                                  21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                                  11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_load_si512(kInterleave);
    // bf16 pairs (even k in the low half) times a per-lane scale, rounded to nearest even.
    const auto scale_pairs = [&](__m512i pairs, __m512 scale) {
        const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, pairs, 16)), scale);
        const __m512 odd = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(pairs, high_half)), scale);
        return _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
    };
    const std::int64_t scale_panel_floats = w.scale_blocks * kPanelWidth;
    for (std::int64_t p = 0; p < n_panels; ++p) {
        const std::uint8_t* codes = w.codes + (panel_begin + p) * w.panel_bytes;
        const float* scales = w.scales + (panel_begin + p) * scale_panel_floats;
        std::uint16_t* out = dst + p * steps * 2 * kPanelWidth;
        for (std::int64_t s = step_begin; s < step_begin + steps; s += 2) {
            const __m512 scale = _mm512_loadu_ps(scales + (2 * s / w.scale_block) * kPanelWidth);
            __m512i w0, w1;
            _mm_prefetch(reinterpret_cast<const char*>(codes + 32 * s + kFp8PrefetchBytes), _MM_HINT_T0);
            widen_fp8(tables, _mm512_load_si512(codes + 32 * s), w0, w1);
            _mm512_store_si512(out + (s - step_begin) * 32, scale_pairs(w0, scale));
            _mm512_store_si512(out + (s - step_begin) * 32 + 32, scale_pairs(w1, scale));
        }
    }
}

std::int64_t panel_group_avx512() { return kGroup; }

void prepare_bf16_avx512(const float* x, std::int64_t x_stride, std::int64_t k,
                         std::int64_t k_padded, std::int64_t row_begin, std::int64_t row_end,
                         std::uint16_t* dst, std::int64_t dst_stride) {
    for (std::int64_t r = row_begin; r < row_end; ++r) {
        const float* src = x + r * x_stride;
        std::uint16_t* out = dst + r * dst_stride;
        for (std::int64_t j = 0; j < k_padded; j += 32) {
            // Lanes past k load as 0, which is also the pad column's value.
            const __mmask16 lo_mask = column_mask(k - j);
            const __mmask16 hi_mask = column_mask(k - j - 16);
            const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, src + j);
            const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + j + 16);
            const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            const std::int64_t left = k_padded - j;
            const __mmask32 store_mask = left >= 32 ? static_cast<__mmask32>(0xFFFFFFFFu)
                                                    : static_cast<__mmask32>((1u << left) - 1u);
            _mm512_mask_storeu_epi16(out + j, store_mask, packed);
        }
    }
}

void gemm_bf16_panels_avx512(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                             std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                             std::int64_t y_stride, std::int64_t n_valid, bool accumulate) {
    gemm_bf16_panels_prefetching_avx512(a, a_stride, m, b, panel_bytes, n_panels, steps, y, y_stride, n_valid,
                                        accumulate, {});
}

void gemm_bf16_panels_prefetching_avx512(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                                         std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                                         std::int64_t y_stride, std::int64_t n_valid, bool accumulate,
                                         const PanelPrefetch& next) {
    if (m <= 0 || n_panels <= 0) return;
    const std::int64_t n_row_tiles = (m + kMaxRows - 1) / kMaxRows;
    const std::int64_t rows_per_tile = (m + n_row_tiles - 1) / n_row_tiles;
    TileArgs t;
    t.a_row_bytes = a_stride * 2;
    t.panel_bytes = panel_bytes;
    t.steps = steps;
    t.y_stride = y_stride;
    t.accumulate = accumulate;
    // Row tile i of the first panel group fetches lines [i · share, (i + 1) · share) of `next`.
    const std::int64_t share = (next.lines + n_row_tiles - 1) / n_row_tiles;
    t.prefetch_every = std::max<std::int64_t>(1, steps / std::max<std::int64_t>(1, share));
    t.prefetch_panel_bytes = next.panel_bytes;
    for (std::int64_t p0 = 0; p0 < n_panels; p0 += kGroup) {
        const int panels = static_cast<int>(std::min<std::int64_t>(kGroup, n_panels - p0));
        t.b = static_cast<const std::byte*>(b) + p0 * panel_bytes;
        t.n_valid = n_valid - p0 * kPanelWidth;
        std::int64_t tile_index = 0;
        for (std::int64_t r = 0; r < m; r += rows_per_tile, ++tile_index) {
            const int rows = static_cast<int>(std::min(rows_per_tile, m - r));
            t.a = reinterpret_cast<const std::byte*>(a + r * a_stride);
            t.y = y + r * y_stride + p0 * kPanelWidth;
            t.prefetch = next.first != nullptr && p0 == 0 && tile_index * share < next.lines
                             ? next.first + tile_index * share * kBlockBytes
                             : nullptr;
            kKernels<true>.k[rows - 1][panels - 1](t);
        }
    }
}

void matmul_tile_avx512(const MatmulOperands& op, const OutputTile& tile) {
    if (op.w->dtype == DType::kBF16) {
        run_tile<true>(op, tile);
    } else {
        run_tile<false>(op, tile);
    }
}

}  // namespace tessera::kernels::cpu
