#include "kernels/isa.h"

#include "base/cpu_features.h"
#include "base/env.h"
#include "base/logging.h"

namespace tessera::kernels {

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::kReference: return "reference";
        case Isa::kAvx2: return "avx2";
        case Isa::kAvx512Bf16: return "avx512";
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
    }
    return false;
}

Isa best_supported_isa() {
    if (isa_supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
    if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
    return Isa::kReference;
}

Isa active_isa() {
    static const Isa isa = [] {
        const std::string& forced = env().kernel_isa;
        if (forced.empty()) return best_supported_isa();
        for (Isa candidate : {Isa::kReference, Isa::kAvx2, Isa::kAvx512Bf16}) {
            if (forced == isa_name(candidate)) {
                if (isa_supported(candidate)) return candidate;
                TSR_LOG_C(WARN, "kernels", "TSR_KERNEL_ISA={} is not supported by this CPU; using {}",
                          forced, isa_name(best_supported_isa()));
                return best_supported_isa();
            }
        }
        TSR_LOG_C(WARN, "kernels",
                  "TSR_KERNEL_ISA={} is not a kernel path (use avx512, avx2 or reference); using {}",
                  forced, isa_name(best_supported_isa()));
        return best_supported_isa();
    }();
    return isa;
}

}  // namespace tessera::kernels
