#pragma once
// kernels/cpu/exp_avx512.h — exp(x) for x <= 0 in 16 lanes, with the polynomial of
// kernels/exp_poly.h. Include only from files compiled with the AVX-512 flags: a baseline
// file instantiating this inline function could let the linker keep an AVX-512 copy for it.

#include <immintrin.h>

#include "kernels/exp_poly.h"

namespace tessera::kernels::cpu {

inline __m512 exp_nonpositive512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(exp_poly::kMinArgument));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(exp_poly::kLog2e));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(exp_poly::kCoefficients[0]);
    for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp_poly::kCoefficients[i]));
    return _mm512_scalef_ps(p, n);
}

}  // namespace tessera::kernels::cpu
