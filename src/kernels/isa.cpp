#include "kernels/isa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/env.h"
#include "base/logging.h"

namespace tessera::kernels {

namespace {
// Linux (5.16+) hands out the 8 KB of AMX tile data per process on request
// (Documentation/arch/x86/xstate.rst); without it the first tile instruction faults.
bool amx_permitted() {
    static const bool permitted = [] {
        constexpr long kArchReqXcompPerm = 0x1023;
        constexpr long kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return permitted;
}
}  // namespace

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::kReference: return "reference";
        case Isa::kAvx2: return "avx2";
        case Isa::kAvx512Bf16: return "avx512";
        case Isa::kAmx: return "amx";
    }
    return "?";
}

bool isa_supported(Isa isa) {
    const CpuFeatures& f = cpu_features();
    switch (isa) {
        case Isa::kReference: return true;
        case Isa::kAvx2: return f.avx2 && f.fma;
        case Isa::kAvx512Bf16:
            return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16 && f.avx2 && f.fma;
        case Isa::kAmx: return isa_supported(Isa::kAvx512Bf16) && f.amx_bf16 && amx_permitted();
    }
    return false;
}

Isa best_supported_isa() {
    if (isa_supported(Isa::kAmx)) return Isa::kAmx;
    if (isa_supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
    if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
    return Isa::kReference;
}

Isa active_isa() {
    static const Isa isa = [] {
        const std::string& forced = env().kernel_isa;
        if (forced.empty()) return best_supported_isa();
        for (Isa candidate : {Isa::kReference, Isa::kAvx2, Isa::kAvx512Bf16, Isa::kAmx}) {
            if (forced == isa_name(candidate)) {
                if (isa_supported(candidate)) return candidate;
                TSR_LOG_C(WARN, "kernels", "TSR_KERNEL_ISA={} is not supported by this CPU; using {}",
                          forced, isa_name(best_supported_isa()));
                return best_supported_isa();
            }
        }
        TSR_LOG_C(WARN, "kernels",
                  "TSR_KERNEL_ISA={} is not a kernel path (use amx, avx512, avx2 or reference); using {}",
                  forced, isa_name(best_supported_isa()));
        return best_supported_isa();
    }();
    return isa;
}

}  // namespace tessera::kernels
