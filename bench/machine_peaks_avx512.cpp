// bench/machine_peaks_avx512.cpp — register-resident AVX-512 multiply-add loops for
// machine_peaks.cpp. Compiled with TSR_AVX512_FLAGS; entered only after a CPUID check.

#include <immintrin.h>

#include "bench/machine_peaks_impl.h"

namespace tessera::bench::detail {

namespace {
// Independent accumulator chains: enough to cover latency × throughput (~6 cycles × 2 per
// cycle) with margin, while leaving registers for the operands.
constexpr int kChains = 16;
}  // namespace

double run_dpbf16_chains(std::int64_t iterations) {
    __m512 acc[kChains];
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
    // Small operands keep the accumulators finite for any iteration count.
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3400);  // bf16 2^-23
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3400);
    for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
        // Keeps the compiler from hoisting or merging the chains.
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512 sum = acc[0];
#pragma GCC unroll 16
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
    alignas(64) float out[16];
    _mm512_store_ps(out, sum);
    volatile float sink = out[0];
    (void)sink;
    return static_cast<double>(iterations) * kChains * 64.0;
}

double run_fma512_chains(std::int64_t iterations) {
    __m512 acc[kChains];
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
    const __m512 a = _mm512_set1_ps(0.999999f);
    const __m512 b = _mm512_set1_ps(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));
    }
    __m512 sum = acc[0];
#pragma GCC unroll 16
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
    alignas(64) float out[16];
    _mm512_store_ps(out, sum);
    volatile float sink = out[0];
    (void)sink;
    return static_cast<double>(iterations) * kChains * 32.0;
}

}  // namespace tessera::bench::detail
