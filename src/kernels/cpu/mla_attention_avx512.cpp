// kernels/cpu/mla_attention_avx512.cpp — MLA's absorbed attention over a bf16 or fp8 latent
// cache with AVX-512 BF16, one query token and up to 16 heads per call, the heads across the lanes.
// Compiled with TSR_AVX512_FLAGS.
//
// Per block of 32 keys:
// - the rows are copied into a buffer of fixed row stride (they sit at any slots of the pool),
//   fp8 rows widened to bf16 on the way (exactly: their values have at most 3 mantissa bits);
// - scores: for each pair of row dimensions, one register of the 16 heads' query pairs meets
//   each of 16 keys' pairs, broadcast from the buffer: 16 independent accumulators, one
//   multiply-add per broadcast load and no horizontal sums;
// - the online softmax runs on whole registers (lanes = heads);
// - the weighted latent sum is a bf16 GEMM tile: the rows interleaved as key pairs
//   (unpacklo/hi, so each register holds a permuted set of 16 latent dims, undone once at the
//   end), 8 heads' softmax weight pairs broadcast against 3 such registers, 24 accumulators.
//
// Keep this file free of header-inline helpers that a baseline file could also instantiate
// (see cpu/matmul_avx512.cpp).

#include "kernels/cpu/mla_attention_avx512.h"

#include <immintrin.h>

// GCC 12 reports its own AVX-512 scalef intrinsic (its undefined pass-through operand) as
// maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/dpbf16_broadcast_avx512.h"
#include "kernels/cpu/exp_avx512.h"

namespace tessera::kernels::cpu {

namespace {

constexpr std::int64_t kBlock = 32;         // keys per online-softmax step
constexpr std::int64_t kHeadsPerTile = 8;   // weighted-sum tile: heads ...
constexpr std::int64_t kChunksPerTile = 3;  // ... × registers of 16 latent dims
constexpr std::int64_t kStride = kMlaMaxWidth;  // bf16 per row of the block buffer

struct Layout {
    std::int64_t qt, rows, vp, pw, acc, total;  // byte offsets
};

Layout layout_for(std::int64_t latent) {
    Layout l{};
    std::int64_t at = 0;
    const auto take = [&](std::int64_t bytes) {
        const std::int64_t offset = at;
        at += (bytes + 63) / 64 * 64;
        return offset;
    };
    l.qt = take(kMlaMaxWidth / 2 * 64);              // [width/2 pairs][16 heads] bf16 pairs
    l.rows = take(kBlock * kStride * 2);               // [32 keys][kStride] bf16
    l.vp = take(kBlock / 2 * (latent / 16) * 64);      // [16 key pairs][latent/16][16 dims] bf16 pairs
    l.pw = take(kBlock / 2 * 64);                      // [16 key pairs][16 heads] bf16 pairs
    l.acc = take(16 * latent * 4);                     // f32 [16 heads][latent], dims permuted
    l.total = at;
    return l;
}

// out[k] = the 16 heads' scores against key k of the 16 rows at `rows` (kStride apart), over
// `pairs` dimension pairs. Each pair also requests one line of the next block (`lines`, one
// per pair: 16 rows of width w are w / 2 lines), so the next rows arrive in L1 spread over the
// computation. Neither a burst of requests at the block start nor leaving it to the hardware
// prefetcher hides the memory: the copy of each block then waits on DRAM (2.9 → 2.5 ms per
// step at context 4096, mla_attention_bench).
void score16(const std::uint32_t* qt, const std::uint16_t* rows, std::int64_t pairs, const char* const* lines,
             __m512* out) {
    __m512 a[16];
    for (int k = 0; k < 16; ++k) a[k] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < pairs; ++p) {
        _mm_prefetch(lines[p], _MM_HINT_T0);
        const __m512bh q = (__m512bh)_mm512_load_si512(qt + 16 * p);
        const std::uint16_t* r = rows + 2 * p;
        for (int k = 0; k < 16; ++k) a[k] = dpbf16_broadcast(a[k], q, r + k * kStride);
    }
    for (int k = 0; k < 16; ++k) out[k] = a[k];
}

// acc[h][16c + i] (latent floats apart, 8 heads, C registers) = acc · keep[h] + Σ_j pw[j][h] ·
// vp[j][c]: the softmax weight pairs of the heads against the value pairs of the keys.
template <int C>
void weighted_tile(float* acc, std::int64_t latent, const float* keep, const std::uint32_t* pw,
                   const std::uint16_t* vp, std::int64_t vp_pair_stride, std::int64_t pairs) {
    __m512 y[kHeadsPerTile][C];
    for (int h = 0; h < kHeadsPerTile; ++h) {
        const __m512 k = _mm512_set1_ps(keep[h]);
        for (int c = 0; c < C; ++c) y[h][c] = _mm512_mul_ps(k, _mm512_load_ps(acc + h * latent + 16 * c));
    }
    for (std::int64_t j = 0; j < pairs; ++j) {
        __m512bh v[C];
        for (int c = 0; c < C; ++c) v[c] = (__m512bh)_mm512_load_si512(vp + j * vp_pair_stride + 32 * c);
        for (int h = 0; h < kHeadsPerTile; ++h) {
            const __m512bh w = (__m512bh)_mm512_broadcastd_epi32(_mm_loadu_si32(pw + 16 * j + h));
            for (int c = 0; c < C; ++c) y[h][c] = _mm512_dpbf16_ps(y[h][c], w, v[c]);
        }
    }
    for (int h = 0; h < kHeadsPerTile; ++h)
        for (int c = 0; c < C; ++c) _mm512_store_ps(acc + h * latent + 16 * c, y[h][c]);
}

// One cache row of `width` values as bf16 into dst. fp8 codes go through binary16: an e4m3
// code without its sign, shifted left by 7, is its value × 2⁻⁸ as binary16 (subnormals
// included); an e5m2 code is binary16's top byte.
void copy_row_bf16(const std::byte* src, DType type, std::int64_t width, std::uint16_t* dst) {
    if (type == DType::kBF16) {
        for (std::int64_t i = 0; i < width; i += 32)
            _mm512_store_si512(dst + i, _mm512_loadu_si512(src + 2 * i));
        return;
    }
    const bool e4m3 = type == DType::kF8E4M3;
    const __m512 unscale = _mm512_set1_ps(e4m3 ? 256.0f : 1.0f);
    for (std::int64_t i = 0; i < width; i += 32) {
        const __m512i codes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
        const __m512i half =
            e4m3 ? _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(codes, _mm512_set1_epi16(0x80)), 8),
                                   _mm512_slli_epi16(_mm512_and_si512(codes, _mm512_set1_epi16(0x7F)), 7))
                 : _mm512_slli_epi16(codes, 8);
        const __m512 lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(half)), unscale);
        const __m512 hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1)), unscale);
        _mm512_store_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

}  // namespace

std::size_t mla_split_bf16_scratch_bytes(std::int64_t latent) {
    return static_cast<std::size_t>(layout_for(latent).total);
}

void mla_split_bf16(const MlaSplitBf16& s, std::int64_t latent, std::int64_t rope, float scale, void* scratch) {
    const std::int64_t width = latent + rope, dim_pairs = width / 2, chunks = latent / 16;
    const Layout l = layout_for(latent);
    auto* base = static_cast<std::byte*>(scratch);
    auto* qt = reinterpret_cast<std::uint32_t*>(base + l.qt);
    auto* rows = reinterpret_cast<std::uint16_t*>(base + l.rows);
    auto* vp = reinterpret_cast<std::uint16_t*>(base + l.vp);
    auto* pw = reinterpret_cast<std::uint32_t*>(base + l.pw);
    auto* acc = reinterpret_cast<float*>(base + l.acc);

    // Query pairs with the heads across the lanes (absent heads zero).
    std::memset(qt, 0, static_cast<std::size_t>(dim_pairs) * 64);
    for (int h = 0; h < s.n_heads; ++h) {
        alignas(64) std::uint16_t q16[kMlaMaxWidth];
        for (std::int64_t i = 0; i < width; i += 32) {
            const float* q = s.q + h * width + i;
            const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 16), _mm512_loadu_ps(q));
            _mm512_store_si512(q16 + i, (__m512i)pair);
        }
        for (std::int64_t p = 0; p < dim_pairs; ++p) std::memcpy(qt + 16 * p + h, q16 + 2 * p, 4);
    }
    std::fill(acc, acc + 16 * latent, 0.0f);

    // Word 2h of the result takes word h of the low half, word 2h + 1 word h of the high half.
    alignas(64) static const std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                             8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_load_si512(kInterleave);
    const std::int64_t row_bytes = width * dtype_size(s.cache_dtype);
    const auto row_of = [&](std::int64_t pos) {
        return static_cast<const std::byte*>(s.cache) + (s.slots != nullptr ? s.slots[pos] : pos) * row_bytes;
    };
    __m512 run_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 run_sum = _mm512_setzero_ps();
    for (std::int64_t block = s.key_begin; block < s.key_end; block += kBlock) {
        const std::int64_t nb = std::min(kBlock, s.key_end - block);
        const std::int64_t filled = nb > 16 ? 32 : 16;  // rows the score loop reads
        // Each group of 16 keys is read where it is when its rows are consecutive bf16 cache
        // rows of the buffer's stride, else copied into the buffer (zeros past the block's end).
        const std::uint16_t* group[2];
        for (std::int64_t g = 0; g < filled / 16; ++g) {
            const std::int64_t first = block + 16 * g, n = std::min<std::int64_t>(16, nb - 16 * g);
            bool consecutive = s.cache_dtype == DType::kBF16 && width == kStride && n == 16;
            for (std::int64_t b = 1; consecutive && b < 16; ++b)
                consecutive = row_of(first + b) == row_of(first) + b * row_bytes;
            if (consecutive) {
                group[g] = reinterpret_cast<const std::uint16_t*>(row_of(first));
                continue;
            }
            std::uint16_t* dst = rows + 16 * g * kStride;
            group[g] = dst;
            for (std::int64_t b = 0; b < n; ++b) copy_row_bf16(row_of(first + b), s.cache_dtype, width, dst + b * kStride);
            for (std::int64_t b = n; b < 16; ++b) std::memset(dst + b * kStride, 0, static_cast<std::size_t>(width) * 2);
        }
        // The cache lines of the next block's rows (a row of w bf16 is w / 32 lines, so 32 rows
        // give one per dimension pair of the two score loops; fp8 rows half as many), requested
        // while this block's scores are computed; the rest repeat a line of the block buffer.
        const char* lines[kMlaMaxWidth];
        std::int64_t n_lines = 0;
        for (std::int64_t b = 0; b < std::min(kBlock, s.key_end - block - nb); ++b) {
            const char* r = reinterpret_cast<const char*>(row_of(block + nb + b));
            for (std::int64_t off = 0; off < row_bytes; off += 64) lines[n_lines++] = r + off;
        }
        const char* last = n_lines > 0 ? lines[n_lines - 1] : reinterpret_cast<const char*>(rows);
        for (; n_lines < width; ++n_lines) lines[n_lines] = last;
        __m512 sc[kBlock];
        score16(qt, group[0], dim_pairs, lines, sc);
        if (nb > 16) score16(qt, group[1], dim_pairs, lines + dim_pairs, sc + 16);
        const __m512 vscale = _mm512_set1_ps(scale);
        __m512 block_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (std::int64_t k = 0; k < nb; ++k) {
            sc[k] = _mm512_mul_ps(sc[k], vscale);
            block_max = _mm512_max_ps(block_max, sc[k]);
        }
        const __m512 new_max = _mm512_max_ps(run_max, block_max);
        const __m512 keep = exp_nonpositive512(_mm512_sub_ps(run_max, new_max));  // ~0 before the first block
        __m512 block_sum = _mm512_setzero_ps();
        for (std::int64_t k = 0; k < nb; ++k) {
            sc[k] = exp_nonpositive512(_mm512_sub_ps(sc[k], new_max));
            block_sum = _mm512_add_ps(block_sum, sc[k]);
        }
        for (std::int64_t k = nb; k < filled; ++k) sc[k] = _mm512_setzero_ps();
        run_sum = _mm512_fmadd_ps(run_sum, keep, block_sum);
        run_max = new_max;

        // Softmax weights as (key 2j, key 2j+1) pairs per head, and the rows' latent parts as
        // key pairs.
        const std::int64_t pairs = (nb + 1) / 2;
        for (std::int64_t j = 0; j < pairs; ++j) {
            const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(sc[2 * j + 1], sc[2 * j]);
            _mm512_store_si512(pw + 16 * j, _mm512_permutexvar_epi16(interleave, halves));
            const std::uint16_t* r0 = group[j / 8] + (2 * j % 16) * kStride;
            std::uint16_t* dst = vp + j * chunks * 32;
            for (std::int64_t g = 0; g < latent / 32; ++g) {
                const __m512i a = _mm512_loadu_si512(r0 + 32 * g), b = _mm512_loadu_si512(r0 + kStride + 32 * g);
                _mm512_store_si512(dst + 64 * g, _mm512_unpacklo_epi16(a, b));
                _mm512_store_si512(dst + 64 * g + 32, _mm512_unpackhi_epi16(a, b));
            }
        }
        alignas(64) float keeps[16];
        _mm512_store_ps(keeps, keep);
        for (std::int64_t hg = 0; hg < s.n_heads; hg += kHeadsPerTile) {
            float* a = acc + hg * latent;
            std::int64_t c = 0;
            for (; c + kChunksPerTile <= chunks; c += kChunksPerTile)
                weighted_tile<kChunksPerTile>(a + 16 * c, latent, keeps + hg, pw + hg, vp + 32 * c, chunks * 32, pairs);
            if (chunks - c == 2) weighted_tile<2>(a + 16 * c, latent, keeps + hg, pw + hg, vp + 32 * c, chunks * 32, pairs);
            if (chunks - c == 1) weighted_tile<1>(a + 16 * c, latent, keeps + hg, pw + hg, vp + 32 * c, chunks * 32, pairs);
        }
    }

    alignas(64) float maxes[16], sums[16];
    _mm512_store_ps(maxes, run_max);
    _mm512_store_ps(sums, run_sum);
    for (int h = 0; h < s.n_heads; ++h) {
        float* st = s.state + h * s.state_stride;
        st[0] = maxes[h];
        st[1] = sums[h];
        // Register lane 4L + i of the unpacklo chunk of dims [32g, 32g + 32) holds dim 32g + 8L + i,
        // of the unpackhi chunk dim 32g + 8L + 4 + i.
        const float* src = acc + h * latent;
        for (std::int64_t g = 0; g < latent / 32; ++g)
            for (int lane = 0; lane < 4; ++lane)
                for (int i = 0; i < 4; ++i) {
                    st[2 + 32 * g + 8 * lane + i] = src[32 * g + 4 * lane + i];
                    st[2 + 32 * g + 8 * lane + 4 + i] = src[32 * g + 16 + 4 * lane + i];
                }
    }
}

}  // namespace tessera::kernels::cpu
