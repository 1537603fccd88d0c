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

// The maskz forms: the plain ones pass _mm512_undefined_epi32(), which GCC 12 reports as
// maybe uninitialized.
void mla_widen_rows(const std::uint16_t* const* rows, std::int64_t nb, std::int64_t latent, float* rows_f32) {
    for (std::int64_t b = 0; b < nb; ++b) {
        for (std::int64_t i = 0; i < latent; i += 16) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[b] + i));
            _mm512_storeu_ps(rows_f32 + b * latent + i,
                             _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16)));
        }
    }
}

void mla_weighted_rows4(float* y, const float* keep, const float* w, std::int64_t w_stride, const float* rows_f32,
                        std::int64_t nb, std::int64_t latent) {
    for (std::int64_t i = 0; i < latent; i += 32) {
        __m512 v[4][2];
        for (int h = 0; h < 4; ++h) {
            const __m512 k = _mm512_set1_ps(keep[h]);
            v[h][0] = _mm512_mul_ps(k, _mm512_loadu_ps(y + h * latent + i));
            v[h][1] = _mm512_mul_ps(k, _mm512_loadu_ps(y + h * latent + i + 16));
        }
        for (std::int64_t b = 0; b < nb; ++b) {
            const __m512 r0 = _mm512_loadu_ps(rows_f32 + b * latent + i);
            const __m512 r1 = _mm512_loadu_ps(rows_f32 + b * latent + i + 16);
            for (int h = 0; h < 4; ++h) {
                const __m512 wb = _mm512_set1_ps(w[h * w_stride + b]);
                v[h][0] = _mm512_fmadd_ps(wb, r0, v[h][0]);
                v[h][1] = _mm512_fmadd_ps(wb, r1, v[h][1]);
            }
        }
        for (int h = 0; h < 4; ++h) {
            _mm512_storeu_ps(y + h * latent + i, v[h][0]);
            _mm512_storeu_ps(y + h * latent + i + 16, v[h][1]);
        }
    }
}

}  // namespace tessera::kernels::cpu
