#pragma once
// bench/machine_peaks_impl.h — the AVX-512 peak loops (machine_peaks_avx512.cpp, compiled
// with TSR_AVX512_FLAGS) as seen from machine_peaks.cpp. Call only after
// kernels::isa_supported(Isa::kAvx512Bf16). Reentrant.

#include <cstdint>

namespace tessera::bench::detail {

// Runs `iterations` rounds of the chains; returns FLOP done.
double run_dpbf16_chains(std::int64_t iterations);
double run_fma512_chains(std::int64_t iterations);

}  // namespace tessera::bench::detail
