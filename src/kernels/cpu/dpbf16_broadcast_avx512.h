#pragma once
// kernels/cpu/dpbf16_broadcast_avx512.h — for AVX-512 BF16 files only.

#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu {

// _mm512_dpbf16_ps(acc, x, the 32-bit pair at p in every lane), the broadcast folded into the
// instruction's memory operand: GCC 12 emits a separate vpbroadcastd for the intrinsics.
inline __m512 dpbf16_broadcast(__m512 acc, __m512bh x, const void* p) {
    asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*static_cast<const std::uint32_t*>(p)));
    return acc;
}

}  // namespace tessera::kernels::cpu
