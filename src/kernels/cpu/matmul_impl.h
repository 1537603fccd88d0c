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

// How many output panels one micro-kernel covers; work splits over threads should keep
// panel ranges a multiple of this so every thread runs the widest kernel.
std::int64_t panel_group_avx512();
std::int64_t panel_group_avx2();

// AVX-512: converts rows [row_begin, row_end) of x (f32, `x_stride` apart) to bf16
// (round to nearest even) at dst + row * k_padded; the pad column (odd k) becomes 0.
void prepare_bf16_avx512(const float* x, std::int64_t x_stride, std::int64_t k,
                         std::int64_t k_padded, std::int64_t row_begin, std::int64_t row_end,
                         std::uint16_t* dst);
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

// y[tile] = a[tile rows] · W[tile panels]ᵀ. Only the n valid columns of y are written.
void matmul_tile_avx512(const MatmulOperands& op, const OutputTile& tile);
void matmul_tile_avx2(const MatmulOperands& op, const OutputTile& tile);

}  // namespace tessera::kernels::cpu
