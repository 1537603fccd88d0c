#pragma once
// base/cpu_features.h — what the CPU can run, read once from CPUID (and XGETBV for the OS
// enabling the AVX-512 and AMX state). Immutable after first use; thread-safe.

namespace tessera {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512_bf16 = false;
    bool avx512_vnni = false;
    bool avx512_vbmi = false;  // byte permutes: the FP8 weight widening
    // AMX tiles with bf16 dot products, and the OS saving their state (XCR0 bits 17, 18).
    // Linux still wants each process to ask for the tile data before its first use
    // (kernels::isa_supported(Isa::kAmx) does).
    bool amx_bf16 = false;
};

const CpuFeatures& cpu_features();

}  // namespace tessera
