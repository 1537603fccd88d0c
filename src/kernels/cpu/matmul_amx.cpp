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
// tiles (6, 7): four multiplies per four loads.
//
// A tile load from L2 takes about twice as long as a tile multiply (measured on a Xeon with
// AMX, operands of real values: a loop of four loads and four multiplies runs at 0.8 of the
// tile peak from L1 and at 0.5 from L2), and y's row stride is often a multiple of 4 KB,
// which maps a tile's 16 rows onto one L1 set, so every round trip of the accumulators
// through y is slow. The loops (choose_blocking) therefore take one of two shapes:
// - a weight that stays in the caches (a thread's share of a layer's projection): rows go
//   in small groups whose input, all of K, stays in L2 while every panel pair passes over
//   it, and the accumulators see y once. With more than one row block in a group, a panel
//   pair is cut into slices of kSliceSteps that stay in L1 while the group's rows pass over
//   them (the input tiles go through with the streaming hint, TILELOADDT1, so they do not
//   push the slice out), and the accumulators park between slices in a per-thread scratch
//   in tile layout;
// - a larger weight (a vocabulary's head) would come from memory once per row group: all
//   rows form one group, K goes in blocks of kKBlockSteps whose input stays in L2, and the
//   accumulators go through y between blocks.
// Against the previous kernel (the second shape for every weight), at m = 512 on that host
// (matmul_bench, the small preset's projections): 0.79-0.94x the time. The sizes are the
// best of slices of 64-512 steps and groups of 64-768 KB there.
//
// A gated MLP's gate and up projections (gemm_gated_panels_amx) pair each gate panel with the up
// panel of the same 16 features, and make the activation as the accumulators leave the tiles:
// 16 bf16 columns of the down projection's operand per pair, where the f32 [m, 2k] projection
// rows would be written and read back (at m = 512 on the AMX host, writing the small preset's
// gate_up rows took a quarter of that GEMM's time).
//
// A decode batch (one row tile) streams the weight from memory with one multiply per tile it
// brings, so what counts there is how many streams are open: its loop (multiply_four_panels)
// takes four panels at once (tiles 0-3 accumulate, 4 holds the input, 5-7 take the weight in
// turn), with the panel pairs of the first shape only for the last panels of a weight.
//
// Keep this file free of header-inline helpers that a baseline file could also instantiate.

#include <immintrin.h>

// GCC 12 reports its own AVX-512 min / max and scalef intrinsics (their undefined pass-through
// operands) as maybe-uninitialized; they are reached through silu_and_mul512.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/aligned_buffer.h"
#include "kernels/cpu/amx_tile_config.h"
#include "kernels/cpu/exp_avx512.h"
#include "kernels/cpu/matmul_impl.h"

namespace tessera::kernels::cpu {

namespace {

constexpr std::int64_t kTileRows = 16;    // rows of an A / C tile
constexpr std::int64_t kTileSteps = 16;   // bf16 pairs (K steps) of one A / B tile
constexpr std::int64_t kStepBytes = 64;   // one step of a panel: 16 outputs × 2 bf16
constexpr std::int64_t kTileBytes = kTileSteps * kStepBytes;
constexpr std::int64_t kSliceSteps = 128;                         // of a panel pair, kept in L1 (16 KB)
constexpr std::int64_t kRowGroupBytes = 192 * 1024;               // a row group's input, all of K
constexpr std::int64_t kCachedWeightBytes = std::int64_t{4} << 20;  // re-read once per row group
constexpr std::int64_t kKBlockSteps = 512;                        // 1024 input columns: 1 MB at 512 rows
constexpr std::int64_t kRowsPerBlock = 2 * kTileRows;
// How far ahead in each panel a one-row-tile block asks for the weight's lines: on the AMX Xeon
// host, batch-16 decode steps of the small dense preset took 59.0-62.6 ms against 63.0-64.8
// without (five alternating pairs of `tessera bench one-batch --batch-size 16`, then 61.8-63.2
// against 64.2-65.7 in four more); matmul_bench --m=16 streamed 3-5 % faster with 1-4 KB
// ahead, and no faster with the lines copied through L1 first.
constexpr std::int64_t kStreamPrefetchBytes = 2048;
constexpr std::int64_t kScratchFloatsPerRowBlock = 4 * kTileRows * 16;  // tiles 0-3

// Tiles 0, 1: C of the first row tile × panels 0, 1; 2, 3: the same for the second row tile;
// 4, 5: A of the two row tiles; 6, 7: B of the two panels. The configuration stays loaded
// between calls (a load costs as much as a few tile multiplies, and attention calls this for
// every block of 64 keys); these are the shapes it was loaded with.
// rows1 kFourPanelsShape asks for the decode loop's shapes instead: tiles 0-4 of rows0 rows, 5-7
// weight tiles.
constexpr std::int64_t kFourPanelsShape = -1;
thread_local std::int64_t t_configured_rows0 = -1;
thread_local std::int64_t t_configured_rows1 = -1;

void configure(std::int64_t rows0, std::int64_t rows1) {
    if (rows0 == t_configured_rows0 && rows1 == t_configured_rows1) return;
    if (rows1 == kFourPanelsShape) {
        AmxTileConfig c;
        for (int tile = 0; tile < 8; ++tile) {
            c.rows[tile] = static_cast<std::uint8_t>(tile < 5 ? rows0 : kTileSteps);
            c.colsb[tile] = static_cast<std::uint16_t>(kStepBytes);
        }
        load_tile_config(c);
        t_configured_rows0 = rows0;
        t_configured_rows1 = rows1;
        return;
    }
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
    load_tile_config(c);
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

template <bool kTwoRowTiles, bool kTwoPanels, bool kStreamA>
void multiply_block(const BlockArgs& t) {
    for (std::int64_t i = 0; i < t.full_tiles; ++i) {
        // One row tile (a decode batch): the weight streams from memory with one multiply per
        // tile it brings, so its lines are asked for ahead, as the AVX-512 GEMV does.
        if constexpr (!kTwoRowTiles) {
            const char* p0 = reinterpret_cast<const char*>(t.b0 + i * kTileBytes + kStreamPrefetchBytes);
            for (int l = 0; l < 16; ++l) _mm_prefetch(p0 + 64 * l, _MM_HINT_T0);
            if constexpr (kTwoPanels) {
                const char* p1 = reinterpret_cast<const char*>(t.b1 + i * kTileBytes + kStreamPrefetchBytes);
                for (int l = 0; l < 16; ++l) _mm_prefetch(p1 + 64 * l, _MM_HINT_T0);
            }
        }
        if constexpr (kStreamA) {
            _tile_stream_loadd(4, t.a0 + i * kStepBytes, t.a_row_bytes);
        } else {
            _tile_loadd(4, t.a0 + i * kStepBytes, t.a_row_bytes);
        }
        _tile_loadd(6, t.b0 + i * kTileBytes, kStepBytes);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (kTwoRowTiles) {
            if constexpr (kStreamA) {
                _tile_stream_loadd(5, t.a1 + i * kStepBytes, t.a_row_bytes);
            } else {
                _tile_loadd(5, t.a1 + i * kStepBytes, t.a_row_bytes);
            }
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

// The last partial tile of `rows` input rows from step `tail_step` on (tail_steps < 16 steps of
// 4 bytes), zero padded into `tail` ([rows][64 bytes], `tail_bytes` in all).
void copy_input_tail(const std::byte* a, std::int64_t a_row_bytes, std::int64_t rows, std::int64_t tail_step,
                     std::int64_t tail_steps, std::byte* tail, std::size_t tail_bytes) {
    std::memset(tail, 0, tail_bytes);
    for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(tail + r * kStepBytes, a + r * a_row_bytes + tail_step * 4,
                    static_cast<std::size_t>(tail_steps * 4));
}

// One row tile against four panels (b, b + panel_bytes, ...) over full_tiles whole tiles, then the
// zero-padded last partial tile if a_tail: [16 rows][64 bytes] and b_tail [4 panels][1 KB].
void multiply_four_panels(const std::byte* a, std::int64_t a_row_bytes, const std::byte* b, std::int64_t panel_bytes,
                          std::int64_t full_tiles, const std::byte* a_tail, const std::byte* b_tail) {
    const std::byte* b1 = b + panel_bytes;
    const std::byte* b2 = b1 + panel_bytes;
    const std::byte* b3 = b2 + panel_bytes;
    for (std::int64_t i = 0; i < full_tiles; ++i) {
        const std::int64_t at = i * kTileBytes;
        for (const std::byte* panel : {b, b1, b2, b3}) {
            const char* ahead = reinterpret_cast<const char*>(panel + at + kStreamPrefetchBytes);
            for (int l = 0; l < 16; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
        }
        _tile_loadd(4, a + i * kStepBytes, a_row_bytes);
        _tile_loadd(5, b + at, kStepBytes);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(6, b1 + at, kStepBytes);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(7, b2 + at, kStepBytes);
        _tile_dpbf16ps(2, 4, 7);
        _tile_loadd(5, b3 + at, kStepBytes);
        _tile_dpbf16ps(3, 4, 5);
    }
    if (a_tail == nullptr) return;
    _tile_loadd(4, a_tail, kStepBytes);
    _tile_loadd(5, b_tail, kStepBytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, b_tail + kTileBytes, kStepBytes);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, b_tail + 2 * kTileBytes, kStepBytes);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, b_tail + 3 * kTileBytes, kStepBytes);
    _tile_dpbf16ps(3, 4, 5);
}

// The panels of a one-row-tile call that go four at a time (all of K in one pass: the input is
// at most 16 rows), leaving the edge panels and a remainder below four to the general loop.
// Returns how many panels it did.
std::int64_t gemm_four_panels(const std::byte* a, std::int64_t a_row_bytes, std::int64_t rows, const std::byte* b,
                              std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                              std::int64_t y_stride, std::int64_t n_valid, bool accumulate) {
    const std::int64_t full_panels = std::min(n_panels, n_valid / kPanelWidth);
    const std::int64_t groups = full_panels / 4;
    if (groups == 0) return 0;
    configure(rows, kFourPanelsShape);
    const std::int64_t full_tiles = steps / kTileSteps;
    const std::int64_t tail_steps = steps % kTileSteps;
    const std::int64_t tail_step = full_tiles * kTileSteps;
    alignas(64) std::byte a_tail[kTileRows * kStepBytes];
    alignas(64) std::byte b_tail[4 * kTileBytes];
    if (tail_steps > 0) copy_input_tail(a, a_row_bytes, rows, tail_step, tail_steps, a_tail, sizeof(a_tail));
    const std::int64_t y_row_bytes = y_stride * 4;
    for (std::int64_t g = 0; g < groups; ++g) {
        const std::byte* panels = b + 4 * g * panel_bytes;
        float* out = y + 4 * g * kPanelWidth;
        if (tail_steps > 0) {
            std::memset(b_tail, 0, sizeof(b_tail));
            for (int p = 0; p < 4; ++p)
                std::memcpy(b_tail + p * kTileBytes, panels + p * panel_bytes + tail_step * kStepBytes,
                            static_cast<std::size_t>(tail_steps * kStepBytes));
        }
        if (accumulate) {
            _tile_loadd(0, out, y_row_bytes);
            _tile_loadd(1, out + kPanelWidth, y_row_bytes);
            _tile_loadd(2, out + 2 * kPanelWidth, y_row_bytes);
            _tile_loadd(3, out + 3 * kPanelWidth, y_row_bytes);
        } else {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
        }
        multiply_four_panels(a, a_row_bytes, panels, panel_bytes, full_tiles, tail_steps > 0 ? a_tail : nullptr,
                             b_tail);
        _tile_stored(0, out, y_row_bytes);
        _tile_stored(1, out + kPanelWidth, y_row_bytes);
        _tile_stored(2, out + 2 * kPanelWidth, y_row_bytes);
        _tile_stored(3, out + 3 * kPanelWidth, y_row_bytes);
    }
    return 4 * groups;
}

using BlockKernel = void (*)(const BlockArgs&);
// [stream A][two row tiles][two panels]
constexpr BlockKernel kBlockKernels[2][2][2] = {
    {{&multiply_block<false, false, false>, &multiply_block<false, true, false>},
     {&multiply_block<true, false, false>, &multiply_block<true, true, false>}},
    {{&multiply_block<false, false, true>, &multiply_block<false, true, true>},
     {&multiply_block<true, false, true>, &multiply_block<true, true, true>}}};

// Per-thread parking place of the accumulators between slices: kScratchFloatsPerRowBlock
// floats per row block, grown on demand.
float* accumulator_scratch(std::int64_t row_blocks) {
    thread_local AlignedBuffer scratch;
    const auto bytes = static_cast<std::size_t>(row_blocks * kScratchFloatsPerRowBlock) * sizeof(float);
    if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
    return scratch.as<float>();
}

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

// The accumulators (tiles 0-3) of one row block × panel pair, and where a slice takes them
// from and leaves them: y, or the block's place in the parked scratch (tile layout).
struct AccumulatorBlock {
    float* y0;                // first row, first panel
    std::int64_t y_stride;
    float* park;              // kScratchFloatsPerRowBlock floats, or nullptr
    std::int64_t rows0;       // rows of the first and second row tile
    std::int64_t rows1;
    bool two_panels;
    std::int64_t n_valid0;    // valid columns of y from each panel on
    std::int64_t n_valid1;
};

void load_accumulators(const AccumulatorBlock& c, bool from_y, bool add_to_y, float* edge) {
    const auto in = [&](int tile, std::int64_t row_tile, std::int64_t panel) {
        const std::int64_t rows = row_tile == 0 ? c.rows0 : c.rows1;
        if (from_y && !add_to_y) {
            load_c(tile, nullptr, 0, rows, 16, false, edge);
        } else if (from_y) {
            load_c(tile, c.y0 + row_tile * kTileRows * c.y_stride + panel * kPanelWidth, c.y_stride, rows,
                   panel == 0 ? c.n_valid0 : c.n_valid1, add_to_y, edge);
        } else {
            load_c(tile, c.park + tile * kTileRows * 16, 16, rows, 16, true, edge);
        }
    };
    in(0, 0, 0);
    if (c.two_panels) in(1, 0, 1);
    if (c.rows1 > 0) {
        in(2, 1, 0);
        if (c.two_panels) in(3, 1, 1);
    }
}

void store_accumulators(const AccumulatorBlock& c, bool to_y, float* edge) {
    const auto out = [&](int tile, std::int64_t row_tile, std::int64_t panel) {
        const std::int64_t rows = row_tile == 0 ? c.rows0 : c.rows1;
        if (to_y) {
            store_c(tile, c.y0 + row_tile * kTileRows * c.y_stride + panel * kPanelWidth, c.y_stride, rows,
                    panel == 0 ? c.n_valid0 : c.n_valid1, edge);
        } else {
            store_c(tile, c.park + tile * kTileRows * 16, 16, rows, 16, edge);
        }
    };
    out(0, 0, 0);
    if (c.two_panels) out(1, 0, 1);
    if (c.rows1 > 0) {
        out(2, 1, 0);
        if (c.two_panels) out(3, 1, 1);
    }
}

// The activation of a gate / up panel pair (tiles 0, 2: gate; 1, 3: up) into 16 bf16 columns of
// act, with the bits of the unfused path (silu_and_mul_row, then prepare_bf16_avx512's rounding
// to nearest even) in 16 lanes: 3-5 % of the gated call's time at m = 512 against calling them.
void store_gated(const AccumulatorBlock& c, std::uint16_t* act, std::int64_t act_stride) {
    alignas(64) float gate[kTileRows * 16];
    alignas(64) float up[kTileRows * 16];
    const auto row_tile = [&](std::int64_t rows, std::uint16_t* out) {
        for (std::int64_t r = 0; r < rows; ++r) {
            const __m512 v = silu_and_mul512(_mm512_load_ps(gate + r * 16), _mm512_load_ps(up + r * 16));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * act_stride), (__m256i)_mm512_cvtneps_pbh(v));
        }
    };
    _tile_stored(0, gate, 64);
    _tile_stored(1, up, 64);
    row_tile(c.rows0, act);
    if (c.rows1 == 0) return;
    _tile_stored(2, gate, 64);
    _tile_stored(3, up, 64);
    row_tile(c.rows1, act + kTileRows * act_stride);
}

// Where the accumulators go once all of K is summed: f32 columns of y (panels in pairs of
// neighbours), or, for a gated MLP, the activation of each gate panel and the up panel
// up_offset_bytes after it (pairs, one gate panel apart).
struct PanelsOutput {
    float* y = nullptr;
    std::int64_t y_stride = 0;
    std::int64_t n_valid = 0;
    bool accumulate = false;
    std::uint16_t* act = nullptr;  // gated: bf16, 16 columns per pair
    std::int64_t act_stride = 0;
    std::int64_t up_offset_bytes = 0;
};

// Loop sizes of one call; see the top of the file.
struct Blocking {
    std::int64_t k_block_steps;  // the accumulators go through y between K blocks
    std::int64_t group_rows;     // rows whose input stays in L2 while the panel pairs pass
    std::int64_t slice_steps;    // of a panel pair, kept in L1 while a group's rows pass
};

// A gated output has no y for the accumulators to wait in between K blocks: they park instead.
Blocking choose_blocking(std::int64_t m, std::int64_t a_row_bytes, std::int64_t steps, std::int64_t weight_bytes,
                         bool gated) {
    if (weight_bytes > kCachedWeightBytes) {
        return {.k_block_steps = gated ? steps : kKBlockSteps, .group_rows = m, .slice_steps = kKBlockSteps};
    }
    const std::int64_t group_blocks = std::max<std::int64_t>(1, kRowGroupBytes / (a_row_bytes * kRowsPerBlock));
    const bool several_blocks = group_blocks > 1 && m > kRowsPerBlock;
    return {.k_block_steps = steps,
            .group_rows = group_blocks * kRowsPerBlock,
            .slice_steps = several_blocks ? kSliceSteps : steps};
}

void gemm_panels(const std::byte* a_base, std::int64_t a_row_bytes, std::int64_t m, const std::byte* b_base,
                 std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, const PanelsOutput& out) {
    const bool gated = out.act != nullptr;
    const std::int64_t second_panel_bytes = gated ? out.up_offset_bytes : panel_bytes;
    const Blocking blocking =
        choose_blocking(m, a_row_bytes, steps, (gated ? 2 : 1) * n_panels * panel_bytes, gated);
    const bool parks = blocking.slice_steps < blocking.k_block_steps;
    float* parked = parks ? accumulator_scratch(std::min(m, blocking.group_rows) / kRowsPerBlock + 1) : nullptr;

    alignas(64) std::byte a_tail[kRowsPerBlock * kStepBytes];
    alignas(64) std::byte b_tail[2 * kTileBytes];
    alignas(64) float edge[kTileRows * 16];

    for (std::int64_t k0 = 0; k0 < steps; k0 += blocking.k_block_steps) {
        const std::int64_t k1 = std::min(steps, k0 + blocking.k_block_steps);
        for (std::int64_t g0 = 0; g0 < m; g0 += blocking.group_rows) {
            const std::int64_t g1 = std::min(m, g0 + blocking.group_rows);
            const bool stream_a = parks && g1 - g0 > kRowsPerBlock;
            for (std::int64_t p0 = 0; p0 < n_panels; p0 += gated ? 1 : 2) {
                const bool two_panels = gated || p0 + 1 < n_panels;
                const std::int64_t n_valid0 = out.n_valid - p0 * kPanelWidth;
                const std::int64_t n_valid1 = n_valid0 - kPanelWidth;
                for (std::int64_t s0 = k0; s0 < k1; s0 += blocking.slice_steps) {
                    const std::int64_t slice_steps = std::min(blocking.slice_steps, k1 - s0);
                    const std::int64_t full_tiles = slice_steps / kTileSteps;
                    const std::int64_t tail_steps = slice_steps % kTileSteps;  // only in the last slice
                    const std::int64_t tail_step = s0 + full_tiles * kTileSteps;
                    const bool from_y = s0 == k0;  // else from the parked scratch
                    const bool to_y = s0 + slice_steps == k1;
                    const bool add_to_y = out.accumulate || k0 > 0;
                    const std::byte* b0 = b_base + p0 * panel_bytes + s0 * kStepBytes;
                    const std::byte* b1 = two_panels ? b0 + second_panel_bytes : nullptr;
                    if (tail_steps > 0) {
                        std::memset(b_tail, 0, sizeof(b_tail));
                        const std::byte* tail0 = b_base + p0 * panel_bytes + tail_step * kStepBytes;
                        std::memcpy(b_tail, tail0, static_cast<std::size_t>(tail_steps * kStepBytes));
                        if (two_panels) {
                            std::memcpy(b_tail + kTileBytes, tail0 + second_panel_bytes,
                                        static_cast<std::size_t>(tail_steps * kStepBytes));
                        }
                    }
                    for (std::int64_t r0 = g0; r0 < g1; r0 += kRowsPerBlock) {
                        const std::int64_t rows = std::min(kRowsPerBlock, g1 - r0);
                        const std::int64_t rows0 = std::min(kTileRows, rows);
                        const std::int64_t rows1 = rows - rows0;
                        configure(rows0, rows1);
                        const std::byte* a0 = a_base + r0 * a_row_bytes + s0 * 4;
                        const std::byte* a1 = a0 + kTileRows * a_row_bytes;
                        if (tail_steps > 0)
                            copy_input_tail(a_base + r0 * a_row_bytes, a_row_bytes, rows, tail_step, tail_steps, a_tail,
                                            sizeof(a_tail));
                        const AccumulatorBlock c{
                            .y0 = gated ? nullptr : out.y + r0 * out.y_stride + p0 * kPanelWidth,
                            .y_stride = out.y_stride,
                            .park = parked == nullptr ? nullptr
                                                      : parked + (r0 - g0) / kRowsPerBlock * kScratchFloatsPerRowBlock,
                            .rows0 = rows0,
                            .rows1 = rows1,
                            .two_panels = two_panels,
                            .n_valid0 = n_valid0,
                            .n_valid1 = n_valid1};
                        load_accumulators(c, from_y, add_to_y, edge);
                        const BlockArgs args{.a0 = a0,
                                             .a1 = a1,
                                             .a_row_bytes = a_row_bytes,
                                             .b0 = b0,
                                             .b1 = b1,
                                             .full_tiles = full_tiles,
                                             .a_tail = tail_steps > 0 ? a_tail : nullptr,
                                             .b_tail = b_tail};
                        kBlockKernels[stream_a][rows1 > 0][two_panels](args);
                        if (to_y && gated) {
                            store_gated(c, out.act + r0 * out.act_stride + p0 * kPanelWidth, out.act_stride);
                        } else {
                            store_accumulators(c, to_y, edge);
                        }
                    }
                }
            }
        }
    }
}

}  // namespace

void gemm_bf16_panels_amx(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                          std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                          std::int64_t y_stride, std::int64_t n_valid, bool accumulate) {
    if (m <= 0 || n_panels <= 0 || steps <= 0) return;
    const std::int64_t a_row_bytes = a_stride * 2;
    const auto* a_base = reinterpret_cast<const std::byte*>(a);
    const auto* b_base = static_cast<const std::byte*>(b);
    if (m <= kTileRows) {
        const std::int64_t done =
            gemm_four_panels(a_base, a_row_bytes, m, b_base, panel_bytes, n_panels, steps, y, y_stride, n_valid,
                             accumulate);
        b_base += done * panel_bytes;
        n_panels -= done;
        y += done * kPanelWidth;
        n_valid -= done * kPanelWidth;
        if (n_panels == 0) return;
    }
    gemm_panels(a_base, a_row_bytes, m, b_base, panel_bytes, n_panels, steps,
                PanelsOutput{.y = y, .y_stride = y_stride, .n_valid = n_valid, .accumulate = accumulate});
}

void gemm_gated_panels_amx(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* gate,
                           std::int64_t panel_bytes, std::int64_t n_pairs, std::int64_t up_offset_bytes,
                           std::int64_t steps, std::uint16_t* act, std::int64_t act_stride) {
    if (m <= 0 || n_pairs <= 0 || steps <= 0) return;
    gemm_panels(reinterpret_cast<const std::byte*>(a), a_stride * 2, m, static_cast<const std::byte*>(gate),
                panel_bytes, n_pairs, steps,
                PanelsOutput{.act = act, .act_stride = act_stride, .up_offset_bytes = up_offset_bytes});
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
