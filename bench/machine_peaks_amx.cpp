// bench/machine_peaks_amx.cpp — the register-resident AMX multiply loop for
// machine_peaks.cpp. Compiled with TSR_AMX_FLAGS; entered only after
// kernels::isa_supported(Isa::kAmx), which asked Linux for the tile state.

#include <immintrin.h>

#include <cstdint>
#include <initializer_list>

#include "bench/machine_peaks_impl.h"
#include "kernels/cpu/amx_tile_config.h"

namespace tessera::bench::detail {

namespace {
using kernels::cpu::AmxTileConfig;
// One tile multiply: 16 × 16 outputs × 32 bf16 products, 2 FLOP each.
constexpr double kFlopPerTileMultiply = 16.0 * 16.0 * 32.0 * 2.0;
}  // namespace

namespace {

// Every tile 16 rows × 64 bytes; returns the kernels' configuration for keep_result_and_restore().
AmxTileConfig load_square_config() {
    AmxTileConfig kernels_config;
    store_tile_config(kernels_config);
    AmxTileConfig config;
    for (int t = 0; t < 8; ++t) {
        config.rows[t] = 16;
        config.colsb[t] = 64;
    }
    load_tile_config(config);
    return kernels_config;
}

// Keeps the accumulators from being optimised away, then puts back the configuration the kernels
// leave loaded between calls.
void keep_result_and_restore(const AmxTileConfig& kernels_config) {
    alignas(64) float out[16 * 16];
    _tile_stored(0, out, 64);
    volatile float sink = out[0];
    (void)sink;
    if (kernels_config.palette != 0) {
        load_tile_config(kernels_config);
    } else {
        _tile_release();
    }
}

}  // namespace

double run_amx_chains(std::int64_t iterations) {
    const AmxTileConfig kernels_config = load_square_config();
    // Operands of 2^-23 keep the accumulators finite for any iteration count.
    alignas(64) std::uint16_t operand[16 * 32];
    for (std::uint16_t& v : operand) v = 0x3400;
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_loadd(6, operand, 64);
    _tile_loadd(7, operand, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t it = 0; it < iterations; ++it) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    keep_result_and_restore(kernels_config);
    return static_cast<double>(iterations) * 4.0 * kFlopPerTileMultiply;
}

double run_amx_l1_tile_loop(std::int64_t iterations) {
    const AmxTileConfig kernels_config = load_square_config();
    // Two row tiles and two panels of 8 K steps each: 32 KB, resident in L1 after the first pass.
    constexpr int kSteps = 8;
    constexpr int kTileValues = 16 * 32;
    alignas(64) static thread_local std::uint16_t a[2][kSteps][kTileValues];
    alignas(64) static thread_local std::uint16_t b[2][kSteps][kTileValues];
    for (auto* operand : {&a, &b})
        for (auto& row : *operand)
            for (auto& tile : row)
                for (std::uint16_t& v : tile) v = 0x3400;  // 2^-23: the accumulators stay finite
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (std::int64_t it = 0; it < iterations; ++it) {
        for (int k = 0; k < kSteps; ++k) {
            _tile_loadd(4, a[0][k], 64);
            _tile_loadd(6, b[0][k], 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(5, a[1][k], 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_loadd(7, b[1][k], 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    keep_result_and_restore(kernels_config);
    return static_cast<double>(iterations) * kSteps * 4.0 * kFlopPerTileMultiply;
}

}  // namespace tessera::bench::detail
