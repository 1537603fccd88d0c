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
};

std::string_view isa_name(Isa isa);

// Best path this CPU supports.
Isa best_supported_isa();

// The path kernels use by default: best_supported_isa(), or TSR_KERNEL_ISA when set.
// A forced path the CPU cannot run falls back to the best supported one, with a warning.
Isa active_isa();

bool isa_supported(Isa isa);

}  // namespace tessera::kernels
