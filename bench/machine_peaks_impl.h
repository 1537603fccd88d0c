#pragma once
// bench/machine_peaks_impl.h — the AVX-512 and AMX peak loops (machine_peaks_avx512.cpp,
// machine_peaks_amx.cpp, compiled with their ISA flags) as seen from machine_peaks.cpp. Call
// only after kernels::isa_supported(Isa::kAvx512Bf16) (kAmx for the AMX loop). Reentrant.

#include <cstdint>

namespace tessera::bench::detail {

// Runs `iterations` rounds of the chains; returns FLOP done.
double run_dpbf16_chains(std::int64_t iterations);
double run_fma512_chains(std::int64_t iterations);
// AMX (machine_peaks_amx.cpp, TSR_AMX_FLAGS): 4 independent tile multiply chains per
// iteration. Call only after kernels::isa_supported(Isa::kAmx).
double run_amx_chains(std::int64_t iterations);
// The same four multiplies per K step with their operand tiles loaded from L1 each time.
double run_amx_l1_tile_loop(std::int64_t iterations);

}  // namespace tessera::bench::detail
