#pragma once
// kernels/simd_exp.h — a vectorised exp for the AVX2 kernels (softmax, silu). Include only
// from files compiled with x86-64-v3 or later.

#include <immintrin.h>

namespace tessera::kernels {

// exp(x) for x <= 88 (softmax arguments after subtracting the max; silu's exp(-x) clamped),
// 8 lanes at a time: 2^(x·log2 e) split into an integer power and a degree-6 polynomial on
// [-0.5, 0.5]; relative error ~2e-7. Inputs below -87 flush to 0.
inline __m256 exp_avx2(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 t = _mm256_mul_ps(x, log2e);
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);  // in [-0.5, 0.5]
    // 2^f = e^(f·ln2), Taylor coefficients of e^y with y = f·ln2 folded in.
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace tessera::kernels
