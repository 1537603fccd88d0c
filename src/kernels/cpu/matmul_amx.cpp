// kernels/cpu/matmul_amx.cpp — bf16 GEMM on AMX tiles (Isa::kAmx), over the same packed
// weights as the AVX-512 kernel. Compiled with TSR_AMX_FLAGS; only entered after
// kernels::isa_supported(Isa::kAmx), which also asked Linux for the tile state.
//
// A 16-step slice of a packed panel ([16 steps][16 outputs][2] bf16, 1 KB contiguous) is
// exactly an AMX B tile in its pair-interleaved layout, and 16 rows × 32 columns of the
// prepared input are an A tile, so neither side is repacked. One tile multiply does 16 × 16
// outputs × 32 products, as much work as 256 _mm512_dpbf16_ps.
//
// Blocking: 2 row tiles × 2 panels of accumulators (tiles 0-3), two A tiles (4, 5) and two B
// tiles (6, 7): four multiplies per four loads. K goes in blocks of kKcSteps so that a block
// of the input (512 rows × 1024 columns, 1 MB) stays in L2 while every panel pair of the
// weight passes over it once: the weight is read from memory once per 512 rows.
//
// Keep this file free of header-inline helpers that a baseline file could also instantiate.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/matmul_impl.h"

namespace tessera::kernels::cpu {

namespace {

constexpr std::int64_t kTileRows = 16;    // rows of an A / C tile
constexpr std::int64_t kTileSteps = 16;   // bf16 pairs (K steps) of one A / B tile
constexpr std::int64_t kStepBytes = 64;   // one step of a panel: 16 outputs × 2 bf16
constexpr std::int64_t kTileBytes = kTileSteps * kStepBytes;
constexpr std::int64_t kKcSteps = 512;    // K steps per block (1024 input columns)
constexpr std::int64_t kRowsPerBlock = 2 * kTileRows;

// Tiles 0, 1: C of the first row tile × panels 0, 1; 2, 3: the same for the second row tile;
// 4, 5: A of the two row tiles; 6, 7: B of the two panels. The configuration stays loaded
// between calls (a load costs as much as a few tile multiplies, and attention calls this for
// every block of 64 keys); these are the shapes it was loaded with.
thread_local std::int64_t t_configured_rows0 = -1;
thread_local std::int64_t t_configured_rows1 = -1;

void configure(std::int64_t rows0, std::int64_t rows1) {
    if (rows0 == t_configured_rows0 && rows1 == t_configured_rows1) return;
    AmxTileConfig c;
    const auto set = [&](int tile, std::int64_t rows) {
        c.rows[tile] = static_cast<std::uint8_t>(rows);
        c.colsb[tile] = rows > 0 ? static_cast<std::uint16_t>(kStepBytes) : 0;
    };
    set(0, rows0);
    set(1, rows0);
    set(2, rows1);
    set(3, rows1);
    set(4, rows0);
    set(5, rows1);
    set(6, kTileSteps);
    set(7, kTileSteps);
    _tile_loadconfig(&c);
    t_configured_rows0 = rows0;
    t_configured_rows1 = rows1;
}

struct BlockArgs {
    const std::byte* a0;        // first row of each row tile, at the block's first step
    const std::byte* a1;
    std::int64_t a_row_bytes;
    const std::byte* b0;        // each panel at the block's first step
    const std::byte* b1;
    std::int64_t full_tiles;    // whole 16-step tiles of the block
    const std::byte* a_tail;    // the last partial tile, zero padded: [32 rows][64 bytes], or nullptr
    const std::byte* b_tail;    // [2 panels][1 KB]
};

template <bool kTwoRowTiles, bool kTwoPanels>
void multiply_block(const BlockArgs& t) {
    for (std::int64_t i = 0; i < t.full_tiles; ++i) {
        _tile_loadd(4, t.a0 + i * kStepBytes, t.a_row_bytes);
        _tile_loadd(6, t.b0 + i * kTileBytes, kStepBytes);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (kTwoRowTiles) {
            _tile_loadd(5, t.a1 + i * kStepBytes, t.a_row_bytes);
            _tile_dpbf16ps(2, 5, 6);
        }
        if constexpr (kTwoPanels) {
            _tile_loadd(7, t.b1 + i * kTileBytes, kStepBytes);
            _tile_dpbf16ps(1, 4, 7);
            if constexpr (kTwoRowTiles) _tile_dpbf16ps(3, 5, 7);
        }
    }
    if (t.a_tail == nullptr) return;
    _tile_loadd(4, t.a_tail, kStepBytes);
    _tile_loadd(6, t.b_tail, kStepBytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoRowTiles) {
        _tile_loadd(5, t.a_tail + kTileRows * kStepBytes, kStepBytes);
        _tile_dpbf16ps(2, 5, 6);
    }
    if constexpr (kTwoPanels) {
        _tile_loadd(7, t.b_tail + kTileBytes, kStepBytes);
        _tile_dpbf16ps(1, 4, 7);
        if constexpr (kTwoRowTiles) _tile_dpbf16ps(3, 5, 7);
    }
}

using BlockKernel = void (*)(const BlockArgs&);
constexpr BlockKernel kBlockKernels[2][2] = {{&multiply_block<false, false>, &multiply_block<false, true>},
                                             {&multiply_block<true, false>, &multiply_block<true, true>}};

// The tile intrinsics name their tile in the instruction (GCC's macros paste a literal):
// one case per accumulator tile, OP(tile) being a macro of the literal.
#define TSR_FOR_C_TILE(tile, OP) \
    switch (tile) {              \
        case 0: OP(0); break;    \
        case 1: OP(1); break;    \
        case 2: OP(2); break;    \
        default: OP(3); break;   \
    }

// The accumulators of C tile `tile` from y (or zero), and back: y columns past n_valid are
// neither read nor written, so an edge panel goes through `edge`.
void load_c(int tile, const float* y, std::int64_t y_stride, std::int64_t rows, std::int64_t n_valid,
            bool accumulate, float* edge) {
#define TSR_ZERO(t) _tile_zero(t)
#define TSR_LOAD_Y(t) _tile_loadd(t, y, y_stride * 4)
#define TSR_LOAD_EDGE(t) _tile_loadd(t, edge, 64)
    if (!accumulate) {
        TSR_FOR_C_TILE(tile, TSR_ZERO);
    } else if (n_valid >= 16) {
        TSR_FOR_C_TILE(tile, TSR_LOAD_Y);
    } else {
        for (std::int64_t r = 0; r < rows; ++r) {
            std::memset(edge + r * 16, 0, 64);
            std::memcpy(edge + r * 16, y + r * y_stride, static_cast<std::size_t>(n_valid) * 4);
        }
        TSR_FOR_C_TILE(tile, TSR_LOAD_EDGE);
    }
#undef TSR_ZERO
#undef TSR_LOAD_Y
#undef TSR_LOAD_EDGE
}

void store_c(int tile, float* y, std::int64_t y_stride, std::int64_t rows, std::int64_t n_valid, float* edge) {
#define TSR_STORE_Y(t) _tile_stored(t, y, y_stride * 4)
#define TSR_STORE_EDGE(t) _tile_stored(t, edge, 64)
    if (n_valid >= 16) {
        TSR_FOR_C_TILE(tile, TSR_STORE_Y);
    } else {
        TSR_FOR_C_TILE(tile, TSR_STORE_EDGE);
        for (std::int64_t r = 0; r < rows; ++r)
            std::memcpy(y + r * y_stride, edge + r * 16, static_cast<std::size_t>(n_valid) * 4);
    }
#undef TSR_STORE_Y
#undef TSR_STORE_EDGE
}

#undef TSR_FOR_C_TILE

}  // namespace

void gemm_bf16_panels_amx(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                          std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                          std::int64_t y_stride, std::int64_t n_valid, bool accumulate) {
    if (m <= 0 || n_panels <= 0 || steps <= 0) return;
    const std::int64_t a_row_bytes = a_stride * 2;
    const auto* a_base = reinterpret_cast<const std::byte*>(a);
    const auto* b_base = static_cast<const std::byte*>(b);

    alignas(64) std::byte a_tail[kRowsPerBlock * kStepBytes];
    alignas(64) std::byte b_tail[2 * kTileBytes];
    alignas(64) float edge[kTileRows * 16];

    for (std::int64_t s0 = 0; s0 < steps; s0 += kKcSteps) {
        const std::int64_t block_steps = std::min(kKcSteps, steps - s0);
        const std::int64_t full_tiles = block_steps / kTileSteps;
        const std::int64_t tail_steps = block_steps % kTileSteps;
        const std::int64_t tail_step = s0 + full_tiles * kTileSteps;
        const bool add_to_y = accumulate || s0 > 0;
        for (std::int64_t p0 = 0; p0 < n_panels; p0 += 2) {
            const bool two_panels = p0 + 1 < n_panels;
            const std::byte* b0 = b_base + p0 * panel_bytes + s0 * kStepBytes;
            const std::byte* b1 = two_panels ? b0 + panel_bytes : nullptr;
            if (tail_steps > 0) {
                std::memset(b_tail, 0, sizeof(b_tail));
                const std::byte* tail0 = b_base + p0 * panel_bytes + tail_step * kStepBytes;
                std::memcpy(b_tail, tail0, static_cast<std::size_t>(tail_steps * kStepBytes));
                if (two_panels)
                    std::memcpy(b_tail + kTileBytes, tail0 + panel_bytes, static_cast<std::size_t>(tail_steps * kStepBytes));
            }
            const std::int64_t n_valid0 = n_valid - p0 * kPanelWidth;
            const std::int64_t n_valid1 = n_valid0 - kPanelWidth;
            for (std::int64_t r0 = 0; r0 < m; r0 += kRowsPerBlock) {
                const std::int64_t rows = std::min(kRowsPerBlock, m - r0);
                const std::int64_t rows0 = std::min(kTileRows, rows);
                const std::int64_t rows1 = rows - rows0;
                configure(rows0, rows1);
                const std::byte* a0 = a_base + r0 * a_row_bytes + s0 * 4;
                const std::byte* a1 = a0 + kTileRows * a_row_bytes;
                if (tail_steps > 0) {
                    std::memset(a_tail, 0, sizeof(a_tail));
                    for (std::int64_t r = 0; r < rows; ++r)
                        std::memcpy(a_tail + r * kStepBytes, a_base + (r0 + r) * a_row_bytes + tail_step * 4,
                                    static_cast<std::size_t>(tail_steps * 4));
                }
                float* y0 = y + r0 * y_stride + p0 * kPanelWidth;
                float* y1 = y0 + kTileRows * y_stride;
                load_c(0, y0, y_stride, rows0, n_valid0, add_to_y, edge);
                if (two_panels) load_c(1, y0 + kPanelWidth, y_stride, rows0, n_valid1, add_to_y, edge);
                if (rows1 > 0) {
                    load_c(2, y1, y_stride, rows1, n_valid0, add_to_y, edge);
                    if (two_panels) load_c(3, y1 + kPanelWidth, y_stride, rows1, n_valid1, add_to_y, edge);
                }
                const BlockArgs args{.a0 = a0,
                                     .a1 = a1,
                                     .a_row_bytes = a_row_bytes,
                                     .b0 = b0,
                                     .b1 = b1,
                                     .full_tiles = full_tiles,
                                     .a_tail = tail_steps > 0 ? a_tail : nullptr,
                                     .b_tail = b_tail};
                kBlockKernels[rows1 > 0][two_panels](args);
                store_c(0, y0, y_stride, rows0, n_valid0, edge);
                if (two_panels) store_c(1, y0 + kPanelWidth, y_stride, rows0, n_valid1, edge);
                if (rows1 > 0) {
                    store_c(2, y1, y_stride, rows1, n_valid0, edge);
                    if (two_panels) store_c(3, y1 + kPanelWidth, y_stride, rows1, n_valid1, edge);
                }
            }
        }
    }
}

void matmul_tile_amx(const MatmulOperands& op, const OutputTile& tile) {
    const PackedWeight& w = *op.w;
    if (tile.row_end <= tile.row_begin || tile.panel_end <= tile.panel_begin) return;
    const std::int64_t panel_bytes = packed_panel_bytes(w);
    gemm_bf16_panels_amx(static_cast<const std::uint16_t*>(op.a) + tile.row_begin * op.a_stride, op.a_stride,
                         tile.row_end - tile.row_begin, w.data.data() + tile.panel_begin * panel_bytes, panel_bytes,
                         tile.panel_end - tile.panel_begin, w.k_padded / 2,
                         op.y + tile.row_begin * op.y_stride + tile.panel_begin * kPanelWidth, op.y_stride,
                         w.n - tile.panel_begin * kPanelWidth, false);
}

}  // namespace tessera::kernels::cpu
