#pragma once
// kernels/mla_attention.h — the absorbed form of DeepSeek's multi-head latent attention (MLA)
// (DeepSeek's inference/model.py MLA.forward absorb branch; SGLang's DeepseekV2AttentionMLA
// forward_absorb); the naive form is plain multi-head attention (kernels/attention.h):
// every head's query is [W_UK^T q_nope ; q_pe] of width latent + rope, every key the cached
// row [c_kv ; k_pe] (one row per token, shared by all heads), every value the row's latent
// part c_kv; the output per head is the weighted latent sum, which the caller maps through
// W_UV. Each cached row is read once per query token and group of 16 heads, in blocks of 32 keys;
// long contexts are split over the threads and merged (flash-decoding).
// Causal: query i of a run starting at start_pos sees positions 0..start_pos+i. f32 math.
// Stateless and thread-safe; work is split over `pool` (nullptr: the calling thread).

#include <cstdint>
#include <span>

#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::kernels {

struct MlaAbsorbedArgs {
    const float* q = nullptr;      // f32 [n_q, n_heads, latent + rope]
    const void* cache = nullptr;   // rows [*, latent + rope] of cache_dtype
    DType cache_dtype = DType::kF32;  // f32, bf16 or fp8 (e4m3 / e5m2, scale 1)
    const std::int32_t* slots = nullptr;  // cache row of every position (nullptr: position p is row p)
    std::int64_t n_q = 0;
    std::int64_t start_pos = 0;
    float* out = nullptr;          // f32 [n_q, n_heads, latent]
};

struct MlaShape {
    std::int64_t n_heads = 0;
    std::int64_t latent = 0;  // kv_lora_rank
    std::int64_t rope = 0;    // qk_rope_head_dim
    float scale = 1.0f;       // softmax scale ((nope + rope)^-1/2, yarn-adjusted)
    // The most per-split state (max, sum and latent accumulator of each head) held at once: a
    // call with more goes through in windows of whole tokens. Results do not depend on it.
    std::int64_t max_state_floats = std::int64_t{1} << 24;  // 64 MiB
};

// With Isa::kAvx512Bf16, a bf16 or fp8 cache, latent and latent + rope multiples of 32 and
// rows of at most 576 values, the heads run 16 at a time across the vector lanes on the BF16
// dot-product instructions (cpu/mla_attention_avx512.h), the query and the softmax weights
// rounded to bf16 (as the GEMV rounds activations); otherwise f32 on AVX2.
void mla_attention_absorbed(std::span<const MlaAbsorbedArgs> runs, const MlaShape& shape, ThreadPool* pool,
                            Isa isa = active_isa());

}  // namespace tessera::kernels
