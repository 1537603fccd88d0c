#pragma once
// kernels/ops.h — element-wise and row-wise kernels of the dense decoder: RMSNorm, RoPE,
// SiLU-and-mul, residual add, embedding lookup. Plain loops the compiler vectorises for
// the baseline ISA (AVX2); all math in f32. Stateless and thread-safe; rows are split over
// `pool` when it is given (nullptr: the calling thread).

#include <cstdint>

#include "tensor/dtype.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::kernels {

// y f32 [rows, dim] = x / sqrt(mean(x²) + eps) * weight f32 [dim]. y may alias x.
void rms_norm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
              float eps, ThreadPool* pool = nullptr);
// The factor of one row of it: y[i] = x[i] * rms_inverse(x, dim, eps) * weight[i] is rms_norm's
// y bit for bit.
float rms_inverse(const float* x, std::int64_t dim, float eps);

// x f32 [dim] /= max(‖x‖₂, 1e-12), as torch.nn.functional.normalize(p=2): a zero row stays zero.
void l2_normalize(float* x, std::int64_t dim);

// x f32 [n] += residual f32 [n], split over `pool` when n is large.
void add_inplace(float* x, const float* residual, std::int64_t n, ThreadPool* pool = nullptr);

// x f32 [rows, dim] += residual, then y = rms_norm(x) with `weight`, in one pass over each row:
// the decoder's residual add before a norm (SGLang's layernorm.py RMSNorm.forward_native with
// a residual). Bit for bit add_inplace followed by rms_norm. y may alias residual.
void add_rms_norm(float* x, const float* residual, const float* weight, float* y, std::int64_t rows,
                  std::int64_t dim, float eps, ThreadPool* pool = nullptr);

// Writes n values of src into a K/V cache at element `offset` of `base`, in `type`: f32, bf16
// (round to nearest even) or fp8 as src / fp8_scale (the checkpoint's k_scale or v_scale; 1
// without), clamped to the largest finite value where a plain cast gives NaN.
void store_kv_row(const float* src, void* base, std::int64_t offset, std::int64_t n, DType type,
                  float fp8_scale = 1.0f);

// Rotary position embedding, in place on x f32 [n_tokens, n_heads, head_dim] (token rows
// `token_stride` floats apart, 0 = n_heads·head_dim). Token t is at positions[t]; the angle
// of pair i is positions[t] · inv_freq[i] (inv_freq f32 [head_dim/2], any scaling already
// folded in). neox: pairs are (i, i + head_dim/2) (HF rotate_half); otherwise (2i, 2i+1).
void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
          const std::int32_t* positions, const float* inv_freq, bool neox,
          std::int64_t token_stride = 0);

// The same in two parts, so that a forward pass computes the angles once for all layers:
// rope_angles fills cos and sin f32 [n_tokens, head_dim/2]; rope_rotate applies one token's
// row of them (cos, sin f32 [head_dim/2]) to its n_heads heads at x. rope() is exactly
// rope_angles followed by rope_rotate on every token.
void rope_angles(const std::int32_t* positions, std::int64_t n_tokens, const float* inv_freq, std::int64_t half,
                 float* cos, float* sin);
void rope_rotate(float* x, std::int64_t n_heads, std::int64_t head_dim, const float* cos, const float* sin, bool neox);

// out f32 [rows, dim] = silu(gate_up[:, :dim]) * gate_up[:, dim:], gate_up f32 [rows, 2·dim].
void silu_and_mul(const float* gate_up, float* out, std::int64_t rows, std::int64_t dim,
                  ThreadPool* pool = nullptr);
// One row of it on the calling thread: out f32 [dim] = silu(gate) * up.
void silu_and_mul_row(const float* gate, const float* up, float* out, std::int64_t dim);

// out f32 [n, dim] = table[ids[i]] for a row-major table of `table_type` [vocab, dim].
void embedding_lookup(const void* table, DType table_type, const std::int32_t* ids, std::int64_t n,
                      std::int64_t dim, float* out);

}  // namespace tessera::kernels
