#pragma once
// kernels/cpu/exp_avx512.h — exp(x) in 16 lanes with the polynomial of kernels/exp_poly.h
// (written for the softmax's x <= 0, and as accurate up to x = 88), and SiLU-and-multiply on it. Include
// only from files compiled with the AVX-512 flags: a baseline file instantiating these inline
// functions could let the linker keep an AVX-512 copy for it.

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

// silu(gate) · up, lane by lane the operations of kernels::silu_and_mul_row's 8-lane loop (the
// exponent of min(-gate, 88), then gate / (1 + e) · up), so the bits are its bits: its 2^n is
// built from the exponent field, scalef's is exact, and n stays within [-126, 127].
inline __m512 silu_and_mul512(__m512 gate, __m512 up) {
    const __m512 e =
        exp_nonpositive512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), gate), _mm512_set1_ps(88.0f)));
    return _mm512_mul_ps(_mm512_div_ps(gate, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), up);
}

}  // namespace tessera::kernels::cpu
