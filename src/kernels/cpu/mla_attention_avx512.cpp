// kernels/cpu/mla_attention_avx512.cpp — AVX-512 loops of MLA's absorbed attention: scores
// of four cached bf16 rows at a time with _mm512_dpbf16_ps (the query rounded to bf16 as
// the GEMV rounds activations), the weighted latent sum in 16-lane f32 registers.
#include "kernels/cpu/mla_attention_avx512.h"

#include <immintrin.h>

namespace tessera::kernels::cpu {

namespace {

// The sum of the 16 lanes, with in-register lane swaps. The maskz forms: GCC 12's plain
// shuffles and 512-to-256-bit casts (so _mm512_reduce_add_ps) pass an undefined vector and
// trip -Wmaybe-uninitialized, an error in CI.
inline float hsum(__m512 v) {
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, 0x4E));  // swap the 256-bit halves
    v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, 0xB1));  // swap neighbouring 128-bit lanes
    v = _mm512_add_ps(v, _mm512_maskz_permute_ps(0xFFFF, v, 0x4E));  // swap 64-bit pairs
    v = _mm512_add_ps(v, _mm512_maskz_permute_ps(0xFFFF, v, 0xB1));  // swap neighbours
    return _mm512_cvtss_f32(v);
}

}  // namespace

void mla_round_query_bf16(const float* q, std::int64_t width, std::uint16_t* out) {
    for (std::int64_t i = 0; i < width; i += 32) {
        const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(q + i));
        _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(pair));
    }
}

void mla_scores_bf16(const std::uint16_t* q, const std::uint16_t* const* rows, std::int64_t nb, std::int64_t width,
                     float* scores) {
    std::int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
        for (std::int64_t i = 0; i < width; i += 32) {
            const __m512bh x = (__m512bh)_mm512_loadu_si512(q + i);
            s0 = _mm512_dpbf16_ps(s0, x, (__m512bh)_mm512_loadu_si512(rows[b] + i));
            s1 = _mm512_dpbf16_ps(s1, x, (__m512bh)_mm512_loadu_si512(rows[b + 1] + i));
            s2 = _mm512_dpbf16_ps(s2, x, (__m512bh)_mm512_loadu_si512(rows[b + 2] + i));
            s3 = _mm512_dpbf16_ps(s3, x, (__m512bh)_mm512_loadu_si512(rows[b + 3] + i));
        }
        scores[b] = hsum(s0);
        scores[b + 1] = hsum(s1);
        scores[b + 2] = hsum(s2);
        scores[b + 3] = hsum(s3);
    }
    for (; b < nb; ++b) {
        __m512 s = _mm512_setzero_ps();
        for (std::int64_t i = 0; i < width; i += 32)
            s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_loadu_si512(q + i), (__m512bh)_mm512_loadu_si512(rows[b] + i));
        scores[b] = hsum(s);
    }
}

void mla_pack_value_pairs(const std::uint16_t* const* rows, std::int64_t nb, std::int64_t latent, std::uint16_t* vp) {
    // Lane i of the result takes element i of the first row and element i of the second.
    alignas(64) static const std::uint16_t kInterleave[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                             8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i idx = _mm512_load_si512(kInterleave);
    const std::int64_t pairs = (nb + 1) / 2;
    for (std::int64_t j = 0; j < pairs; ++j) {
        const std::uint16_t* r0 = rows[2 * j];
        const std::uint16_t* r1 = 2 * j + 1 < nb ? rows[2 * j + 1] : nullptr;
        for (std::int64_t c = 0; c < latent / 16; ++c) {
            // Masked loads of 16 values: no undefined upper half (GCC 12 warns on the casts).
            const __m512i a = _mm512_maskz_loadu_epi16(0xFFFF, r0 + 16 * c);
            const __m512i b = r1 != nullptr ? _mm512_maskz_loadu_epi16(0xFFFF, r1 + 16 * c) : _mm512_setzero_si512();
            _mm512_storeu_si512(vp + (c * pairs + j) * 32, _mm512_permutex2var_epi16(a, idx, b));
        }
    }
}

void mla_weighted_pairs(float* y, int n_heads, const float* keep, const float* w, std::int64_t w_stride,
                        const std::uint16_t* vp, std::int64_t nb, std::int64_t latent) {
    const std::int64_t pairs = (nb + 1) / 2;
    // The weights as bf16 pairs (w[2j], w[2j+1]) in one 32-bit word each.
    alignas(64) std::uint32_t wp[4][32];
    for (int h = 0; h < n_heads; ++h) {
        alignas(64) float padded[64] = {};
        for (std::int64_t b = 0; b < nb; ++b) padded[b] = w[h * w_stride + b];
        const __m512bh lo = _mm512_cvtne2ps_pbh(_mm512_load_ps(padded + 16), _mm512_load_ps(padded));
        const __m512bh hi = _mm512_cvtne2ps_pbh(_mm512_load_ps(padded + 48), _mm512_load_ps(padded + 32));
        _mm512_store_si512(wp[h], reinterpret_cast<const __m512i&>(lo));
        _mm512_store_si512(wp[h] + 16, reinterpret_cast<const __m512i&>(hi));
    }
    for (std::int64_t c = 0; c < latent / 16; ++c) {
        __m512 acc[4];
        for (int h = 0; h < n_heads; ++h) acc[h] = _mm512_mul_ps(_mm512_set1_ps(keep[h]), _mm512_loadu_ps(y + h * latent + 16 * c));
        const std::uint16_t* v = vp + c * pairs * 32;
        for (std::int64_t j = 0; j < pairs; ++j) {
            const __m512bh x = (__m512bh)_mm512_loadu_si512(v + j * 32);
            for (int h = 0; h < n_heads; ++h)
                acc[h] = _mm512_dpbf16_ps(acc[h], (__m512bh)_mm512_set1_epi32(static_cast<int>(wp[h][j])), x);
        }
        for (int h = 0; h < n_heads; ++h) _mm512_storeu_ps(y + h * latent + 16 * c, acc[h]);
    }
}

}  // namespace tessera::kernels::cpu
