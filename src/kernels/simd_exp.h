#pragma once
// kernels/simd_exp.h — a vectorised exp for the AVX2 kernels (softmax, silu). Include only
// from files compiled with x86-64-v3 or later.

#include <immintrin.h>

#include "kernels/exp_poly.h"

namespace tessera::kernels {

// exp(x) for x <= 88 (softmax arguments after subtracting the max; silu's exp(-x) clamped),
// 8 lanes at a time, with the polynomial of kernels/exp_poly.h.
inline __m256 exp_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(exp_poly::kMinArgument));
    const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(exp_poly::kLog2e));
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);  // in [-0.5, 0.5]
    __m256 p = _mm256_set1_ps(exp_poly::kCoefficients[0]);
    for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(exp_poly::kCoefficients[i]));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace tessera::kernels
