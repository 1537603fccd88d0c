#pragma once
// kernels/isa.h — which vectorised code path the kernels take. Chosen once per process
// from CPUID; TSR_KERNEL_ISA forces a lower path (tests use it to run the AVX2 path on an
// AVX-512 machine). Thread-safe.

#include <string_view>

namespace tessera::kernels {

enum class Isa {
    kReference,   // plain C++ loops: the twin every optimised kernel is tested against
    kAvx2,        // AVX2 + FMA (x86-64-v3), bf16 widened to f32 in registers
    kAvx512Bf16,  // AVX-512 with the BF16 dot-product instructions
    kAmx,         // kAvx512Bf16, with AMX tile multiplies for the bf16 GEMMs of many rows
};

std::string_view isa_name(Isa isa);

// Best path this CPU supports.
Isa best_supported_isa();

// The path kernels use by default: best_supported_isa(), or TSR_KERNEL_ISA when set.
// A forced path the CPU cannot run falls back to the best supported one, with a warning.
Isa active_isa();

// For kAmx, also asks Linux once for the process's AMX tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM); a refusal makes kAmx unsupported.
bool isa_supported(Isa isa);

// Whether a path runs the AVX-512 BF16 kernels (kAvx512Bf16 and kAmx do).
inline bool uses_avx512_bf16(Isa isa) { return isa == Isa::kAvx512Bf16 || isa == Isa::kAmx; }

}  // namespace tessera::kernels
