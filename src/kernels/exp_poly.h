#pragma once
// kernels/exp_poly.h — the constants of the vectorised exp (kernels/simd_exp.h for AVX2,
// cpu/attention_avx512.cpp for AVX-512): exp(x) = 2^n · 2^f with t = x·log2 e, n = round(t),
// f = t - n in [-0.5, 0.5], and 2^f a degree-6 polynomial (Taylor coefficients of e^y with
// y = f·ln2 folded in); relative error ~2e-7. Data only, so any ISA's file may include it.

namespace tessera::kernels::exp_poly {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kMinArgument = -87.0f;  // below this the result flushes to 0
// Highest degree first, for Horner's rule.
inline constexpr float kCoefficients[7] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                           5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f,
                                           1.0f};

}  // namespace tessera::kernels::exp_poly
