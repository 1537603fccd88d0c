#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace tessera {

namespace {
std::uint64_t xgetbv0() {
    std::uint32_t eax = 0;
    std::uint32_t edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<std::uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
    CpuFeatures f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    if (!osxsave) return f;
    const std::uint64_t xcr0 = xgetbv0();
    const bool ymm_state = (xcr0 & 0x6) == 0x6;
    const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.avx2 = ymm_state && ((b >> 5) & 1);
    f.avx512f = zmm_state && ((b >> 16) & 1);
    f.avx512bw = zmm_state && ((b >> 30) & 1);
    f.avx512vl = zmm_state && ((b >> 31) & 1);
    f.avx512_vnni = zmm_state && ((c >> 11) & 1);
    f.avx512_vbmi = zmm_state && ((c >> 1) & 1);
    const bool tile_state = (xcr0 & 0x60000) == 0x60000;
    f.amx_bf16 = tile_state && ((d >> 22) & 1) && ((d >> 24) & 1);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
        f.avx512_bf16 = zmm_state && ((a1 >> 5) & 1);
    }
    return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

}  // namespace tessera
