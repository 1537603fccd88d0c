#pragma once
// kernels/cpu/matmul_impl.h — internal interface between kernels/matmul.cpp (packing,
// dispatch, threading) and the per-ISA matmul files (cpu/matmul_avx2.cpp,
// cpu/matmul_avx512.cpp). No intrinsics here: this header is included by files compiled
// for the baseline ISA. Not part of the public kernels API.
// Thread-safety: every function is reentrant; concurrent calls may share `w` and `x`
// as long as their output ranges are disjoint.

#include <cstdint>

#include "kernels/matmul.h"

namespace tessera::kernels::cpu {

// Weight panels are 16 outputs wide (one zmm of f32 accumulators, or two ymm).
inline constexpr std::int64_t kPanelWidth = 16;

// Bytes from one 16-output panel of a packed weight to the next.
inline std::int64_t packed_panel_bytes(const PackedWeight& w) {
    return w.k_padded * kPanelWidth * static_cast<std::int64_t>(dtype_size(w.dtype));
}

// FP8 panels: byte offset, within a panel, of the code of output `lane` at column `c`.
// A group of 64 bytes holds columns [4g, 4g + 4); in the bf16 block of step s = 2g + h,
// word j = 2·lane + (c % 2). _mm512_unpacklo/hi_epi8 interleave bytes 0-7 / 8-15 of each
// 16-byte lane, so word j of step h comes from byte 16·(j / 8) + 8·h + j % 8.
inline std::int64_t fp8_panel_offset(std::int64_t lane, std::int64_t c) {
    const std::int64_t j = 2 * lane + c % 2;
    return 64 * (c / 4) + 16 * (j / 8) + 8 * ((c / 2) % 2) + j % 8;
}

// The bf16 bit pattern of every fp8 code without its sign, split in low and high bytes (the
// operands of the AVX-512 byte lookups); exact, since bf16 holds every fp8 value.
struct Fp8Lookup {
    alignas(64) std::uint8_t low[128];
    alignas(64) std::uint8_t high[128];
};
const Fp8Lookup& fp8_lookup(DType type);

// An fp8 weight as the ISA kernels see it (raw pointers: no buffer code in ISA files).
struct Fp8Panels {
    const std::uint8_t* codes = nullptr;  // PackedWeight::data
    const float* scales = nullptr;        // PackedWeight::scales
    std::int64_t panel_bytes = 0;         // k_padded · 16
    std::int64_t scale_block = 0;         // columns per scale (even steps)
    std::int64_t scale_blocks = 0;        // ceil(k / scale_block): 16-float vectors per panel
    std::int64_t steps = 0;               // k_padded / 2 (bf16 pairs)
    const Fp8Lookup* lookup = nullptr;
};



// One call's operands, as the ISA kernels see them. `a` is the left operand in the form the
// kernel consumes: for f32 weights the caller's x (rows `a_stride` floats apart); for bf16
// weights the prepared copy of x (see prepare_*), rows `a_stride` elements apart.
struct MatmulOperands {
    const void* a = nullptr;
    std::int64_t a_stride = 0;  // in elements of a
    std::int64_t m = 0;
    const PackedWeight* w = nullptr;
    float* y = nullptr;
    std::int64_t y_stride = 0;  // in floats
};

// A rectangle of the output: rows [row_begin, row_end) × panels [panel_begin, panel_end).
struct OutputTile {
    std::int64_t row_begin = 0;
    std::int64_t row_end = 0;
    std::int64_t panel_begin = 0;
    std::int64_t panel_end = 0;
};

// Rows up to which the AVX-512 fp8 kernel widens the codes in registers (the weight is read
// from memory once, as decode batches need); taller inputs dequantize a block of panels to
// bf16 once and run the bf16 kernel on it (gemm_bf16_panels_*), which costs little next to
// their work.
inline constexpr std::int64_t kFp8DirectRows = 16;

// AVX-512 VBMI (see fp8_vbmi_supported) as well as the BF16 path.
// y[tile] = a · dequantized(W)ᵀ for tile.row_end - tile.row_begin ≤ kFp8DirectRows; `a` is x
// prepared as for bf16 weights (k_padded columns).
void matmul_tile_fp8_avx512(const MatmulOperands& op, const Fp8Panels& w, const OutputTile& tile);

// Writes panels [panel_begin, panel_begin + n_panels) × steps [step_begin, step_begin + steps)
// (step_begin, steps even) as bf16 panels [n_panels][steps][16][2] at dst, each weight
// multiplied by its scale and rounded to nearest even.
void dequantize_fp8_panels_avx512(const Fp8Panels& w, std::int64_t panel_begin, std::int64_t n_panels,
                                  std::int64_t step_begin, std::int64_t steps, std::uint16_t* dst);
void dequantize_fp8_panels(const Fp8Panels& w, std::int64_t panel_begin, std::int64_t n_panels,
                           std::int64_t step_begin, std::int64_t steps, std::uint16_t* dst);

// How many output panels one micro-kernel covers; work splits over threads should keep
// panel ranges a multiple of this so every thread runs the widest kernel.
std::int64_t panel_group_avx512();
std::int64_t panel_group_avx2();

// AVX-512: converts rows [row_begin, row_end) of x (f32, `x_stride` apart) to bf16
// (round to nearest even) at dst + row * dst_stride (≥ k_padded); the pad column (odd k)
// becomes 0.
void prepare_bf16_avx512(const float* x, std::int64_t x_stride, std::int64_t k,
                         std::int64_t k_padded, std::int64_t row_begin, std::int64_t row_end,
                         std::uint16_t* dst, std::int64_t dst_stride);
// AVX2: rounds rows of x to bf16 precision but keeps them as f32 (the AVX2 kernel widens
// bf16 weights to f32), at dst + row * k_padded; the pad column becomes 0.
void prepare_bf16_avx2(const float* x, std::int64_t x_stride, std::int64_t k, std::int64_t k_padded,
                       std::int64_t row_begin, std::int64_t row_end, float* dst);

// A small bf16 GEMM on the calling thread for other kernels (attention), with both operands
// already in the kernels' layouts: y f32 [m][16·n_panels] = (or +=, with `accumulate`)
// a · B, where a is bf16 [m][2·steps] (rows a_stride elements apart, k pairs adjacent) and
// B is n_panels panels of [steps][16][2] bf16, panel_bytes apart. Only the first n_valid
// columns of y are read or written.
void gemm_bf16_panels_avx512(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                             std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                             std::int64_t y_stride, std::int64_t n_valid, bool accumulate);

// Memory a caller reads after a GEMM (the fp8 codes of the next chunk it dequantizes), fetched
// into L2 while the GEMM computes: `lines` 64-byte lines of each of the panels `panel_bytes`
// apart from `first`.
struct PanelPrefetch {
    const std::byte* first = nullptr;
    std::int64_t panel_bytes = 0;
    std::int64_t lines = 0;
};
// gemm_bf16_panels_avx512 that also fetches `next`, spread over its row tiles as run_tile
// spreads its next weight block, so that memory and multiply-adds overlap.
void gemm_bf16_panels_prefetching_avx512(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                                         std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                                         std::int64_t y_stride, std::int64_t n_valid, bool accumulate,
                                         const PanelPrefetch& next);

// The same on AMX tiles (Isa::kAmx).
void gemm_bf16_panels_amx(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* b,
                          std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                          std::int64_t y_stride, std::int64_t n_valid, bool accumulate);

// A gated MLP's gate and up projections on AMX tiles, with its activation made as the
// accumulators leave the tiles: act bf16 [m][16·n_pairs] (rows act_stride apart) =
// silu(a · Gᵀ) · (a · Uᵀ) rounded to nearest even, G being n_pairs panels from `gate` and U as
// many from gate + up_offset_bytes. The same bits as gemm_bf16_panels_amx into f32, then
// silu_and_mul_row and prepare_bf16_avx512.
void gemm_gated_panels_amx(const std::uint16_t* a, std::int64_t a_stride, std::int64_t m, const void* gate,
                           std::int64_t panel_bytes, std::int64_t n_pairs, std::int64_t up_offset_bytes,
                           std::int64_t steps, std::uint16_t* act, std::int64_t act_stride);

// The same for the AVX2 kernel, whose a is f32 rounded to bf16 precision (prepare_bf16_avx2).
void gemm_bf16_panels_avx2(const float* a, std::int64_t a_stride, std::int64_t m, const void* b,
                           std::int64_t panel_bytes, std::int64_t n_panels, std::int64_t steps, float* y,
                           std::int64_t y_stride, std::int64_t n_valid, bool accumulate);

// y[tile] = a[tile rows] · W[tile panels]ᵀ. Only the n valid columns of y are written.
void matmul_tile_avx512(const MatmulOperands& op, const OutputTile& tile);
// The same on AMX tiles (Isa::kAmx), bf16 weights only, `a` prepared as for AVX-512.
void matmul_tile_amx(const MatmulOperands& op, const OutputTile& tile);
// Rows from which a bf16 matmul takes the AMX kernel; below, the AVX-512 kernel streams the
// weight as fast (a decode step is bound by memory, not by multiply-adds).
inline constexpr std::int64_t kAmxMinRows = 8;
// Panels per AMX kernel call: work splits keep panel ranges a multiple of this.
inline constexpr std::int64_t kAmxPanelGroup = 2;
void matmul_tile_avx2(const MatmulOperands& op, const OutputTile& tile);

}  // namespace tessera::kernels::cpu
