#pragma once
// kernels/cpu/amx_tile_config.h — the LDTILECFG / STTILECFG operand (Intel SDM vol. 2,
// "LDTILECFG"): palette 1, then bytes per row and rows of each of the 8 tiles, and the two
// instructions that load and store it; shared by the AMX kernels and the AMX peak loop of the
// benchmarks.

#include <cstdint>

namespace tessera::kernels::cpu {

struct alignas(64) AmxTileConfig {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// GCC 12's _tile_loadconfig and _tile_storeconfig tell the compiler that they touch 8 bytes of
// the configuration, so it may drop the stores to the rest (each tile's rows and bytes per row)
// as dead; it did once configure() in matmul_amx.cpp was no longer inlined, and every tile
// instruction after it faulted. These name all 64 bytes.
inline void load_tile_config(const AmxTileConfig& config) { __asm__ volatile("ldtilecfg %0" : : "m"(config)); }
inline void store_tile_config(AmxTileConfig& config) { __asm__ volatile("sttilecfg %0" : "=m"(config)); }

}  // namespace tessera::kernels::cpu
