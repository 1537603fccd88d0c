#pragma once
// kernels/cpu/amx_tile_config.h — the LDTILECFG / STTILECFG operand (Intel SDM vol. 2,
// "LDTILECFG"): palette 1, then bytes per row and rows of each of the 8 tiles. Plain data,
// shared by the AMX kernels and the AMX peak loop of the benchmarks.

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

}  // namespace tessera::kernels::cpu
