#pragma once
// kernels/matmul.h — y = x · Wᵀ for linear layers: one packed weight layout serves both the
// decode GEMV (m = 1..8, bandwidth bound) and the prefill GEMM (compute bound), so a rank
// keeps a single copy of its weights.
//
// Packed layout (rows of W are output features, padded to a multiple of 16; K padded to 2):
//   bf16: [n_padded/16][k_padded/2][16][2]  — a 64-byte block holds 16 outputs × 2 k, which is
//         exactly one _mm512_dpbf16_ps operand; padding is zero.
//   f32:  [n_padded/16][k_padded][16]
//   fp8 (e4m3 / e5m2, K padded to 4): [n_padded/16][k_padded/4][64 bytes]; the 64 bytes of a
//         group hold 16 outputs × 4 k, ordered so that two byte lookups and an unpack give
//         the two bf16 blocks of the layout above (see cpu/matmul_impl.h fp8_panel_offset).
//         `scales` holds the dequantization multiplier of each output over each block of
//         B = scale_block columns, f32 [n_padded/16][ceil(k/B)][16]: w[j][c] = code[j][c] ·
//         scale[j][c/B].
//         FP8 weights multiply x rounded to bf16 (exact products) and accumulate in f32.
// Thread-safety: a PackedWeight is immutable after packing; matmul() may run concurrently on
// the same weight. matmul() splits work over `pool` (nullptr: the calling thread only).

#include <cstdint>

#include "base/aligned_buffer.h"
#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::kernels {

// Columns per FP8 scale block unless a checkpoint's blocks are narrower: DeepSeek-V3's and
// Qwen3-FP8's weight_block_size [128, 128].
inline constexpr std::int64_t kFp8ScaleBlock = 128;

struct PackedWeight {
    DType dtype = DType::kF32;  // kF32, kBF16, kF8E4M3 or kF8E5M2: the stored weight type
    std::int64_t n = 0;         // output features
    std::int64_t k = 0;         // input features
    std::int64_t n_padded = 0;  // n rounded up to 16
    std::int64_t k_padded = 0;  // k rounded up to 2 (4 for fp8)
    AlignedBuffer data;
    AlignedBuffer scales;  // fp8 only: see the layout above

    std::size_t bytes() const { return data.size() + scales.size(); }
    std::int64_t scale_block = kFp8ScaleBlock;  // fp8: columns per scale (a multiple of 4)
    std::int64_t scale_blocks() const { return (k + scale_block - 1) / scale_block; }
};

// Bytes of an [n, k] weight packed as `type` (padding and, for fp8, the row scales of
// `scale_block` columns included): what pack_weight / pack_fp8_weight allocate.
std::int64_t packed_weight_bytes(DType type, std::int64_t n, std::int64_t k,
                                 std::int64_t scale_block = kFp8ScaleBlock);

// Packs a row-major [n, k] matrix of `src_type` into the layout above, in `dst_type`
// (kF32 or kBF16; f32 → bf16 rounds to nearest even).
PackedWeight pack_weight(const void* w, DType src_type, std::int64_t n, std::int64_t k,
                         DType dst_type);

// The same in pieces, so a caller can release each piece's source as it goes: an all-zero
// [n, k] weight of `dst_type` (kF32 or kBF16), then rows [row_begin, row_begin + rows) of
// it packed from `rows_src` (row-major [rows, k] of `src_type`). Writes only those rows'
// bytes, so disjoint row ranges may be packed concurrently.
PackedWeight empty_packed_weight(DType dst_type, std::int64_t n, std::int64_t k);
void pack_weight_rows(const void* rows_src, DType src_type, std::int64_t row_begin, std::int64_t rows,
                      PackedWeight& out);

// Packs row-major [n, k] fp8 codes of `type` with `row_scales` f32 [n][ceil(k/B)], the
// multiplier of row j over columns [B·b, B·b + B), B = `scale_block` (a multiple of 4).
PackedWeight pack_fp8_weight(const std::uint8_t* codes, DType type, std::int64_t n, std::int64_t k,
                             const float* row_scales, std::int64_t scale_block = kFp8ScaleBlock);

// Back to row-major f32 [n, k] (tests, reference paths); fp8 weights are dequantized.
void unpack_weight(const PackedWeight& w, float* out);

// y f32 [m, n] = x f32 [m, k] · Wᵀ. x rows are `x_stride` floats apart, y rows `y_stride`
// (0 = k and n). The bf16 paths round x to bf16 (as the hardware dot product consumes it)
// and accumulate in f32.
void matmul(const float* x, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool,
            Isa isa = active_isa(), std::int64_t x_stride = 0, std::int64_t y_stride = 0);

// y f32 [m, n] = silu_and_mul(gate_up) · Wᵀ, gate_up f32 [m, 2k] (kernels/ops.h): the MLP's down
// projection with its activation computed row by row into the operand the kernels read, not
// into an [m, k] buffer of its own. Equals silu_and_mul followed by matmul.
void matmul_silu_and_mul(const float* gate_up, std::int64_t m, const PackedWeight& w, float* y, ThreadPool* pool,
                         Isa isa = active_isa());
// y f32 [m, n] = rms_norm(x, norm_weight, eps) · Wᵀ, x f32 [m, k] (kernels/ops.h): a layer's
// input norm computed row by row into its first projection's operand. Equals rms_norm into a
// buffer followed by matmul.
void matmul_rms_norm(const float* x, std::int64_t m, const float* norm_weight, float eps, const PackedWeight& w,
                     float* y, ThreadPool* pool, Isa isa = active_isa());
// y f32 [m, n] = silu_and_mul(x' · gate_upᵀ) · downᵀ, x' = x f32 [m, in], or rms_norm(x,
// norm_weight, eps) when norm_weight is set: a gated MLP, gate_up [2k, in] holding its k gate
// rows then its k up rows, down [n, k]. On AMX tiles (bf16 weights, k a multiple of 16, row
// blocks of at least 8 rows) the activation is made from the gate and up accumulators as they
// leave the tiles, into down's bf16 operand; otherwise the projection goes through
// gate_up_rows, f32 rows of 2k. Either way the same bits as matmul (or matmul_rms_norm) into a
// buffer, then matmul_silu_and_mul.
void matmul_gated_mlp(const float* x, std::int64_t m, const float* norm_weight, float eps,
                      const PackedWeight& gate_up, const PackedWeight& down, float* gate_up_rows, float* y,
                      ThreadPool* pool, Isa isa = active_isa());
// Floats of gate_up_rows enough for matmul_gated_mlp of up to m rows: all m rows' projection, or
// on AMX tiles that of a last row block too short for them (at most 7 rows).
std::int64_t gated_mlp_rows_floats(std::int64_t m, const PackedWeight& gate_up, const PackedWeight& down,
                                   Isa isa = active_isa());
// Plain triple loop over a row-major f32 [n, k] weight: the trusted twin in tests.
void matmul_reference(const float* x, std::int64_t m, const float* w, std::int64_t n,
                      std::int64_t k, float* y);

}  // namespace tessera::kernels
