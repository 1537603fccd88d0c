#pragma once
// layers/attention_layer.h — grouped-query self-attention as Llama, Qwen2 (q/k/v bias) and
// Qwen3 (per-head RMSNorm of q and k before the rotation) define it: qkv projection (column
// parallel: this rank's heads), neox RoPE, the new K/V written into this layer's cache rows,
// paged attention per sequence, o_proj (row parallel) and its all-reduce. SGLang's
// layers/radix_attention.py + the models' *Attention classes. Immutable after load;
// forward() by one thread.

#include <cstdint>
#include <string>
#include <vector>

#include "layers/forward_batch.h"
#include "layers/kv_scales.h"
#include "layers/linear.h"
#include "layers/parallel.h"

namespace tessera::layers {

struct AttentionSpec {
    std::string prefix;  // "model.layers.{i}.self_attn."
    std::int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
    bool qkv_bias = false;
    bool qk_norm = false;
    float rms_norm_eps = 1e-6f;
    DType compute_dtype = DType::kF32;
};

class GqaAttention {
 public:
    static StatusOr<GqaAttention> load(const loader::WeightSource& source, const AttentionSpec& spec,
                                       const LayerParallel& par);

    // out f32 [n, hidden] (complete: all-reduced) from the input rows f32 [n, hidden] (normed
    // by the qkv projection when the input carries a norm); writes the new tokens' K and V
    // (kv_dtype: f32, bf16 or fp8) into k_cache / v_cache rows.
    Status forward(const LayerInput& input, const LayerBatch& batch, void* k_cache, void* v_cache, DType kv_dtype,
                   float* out, Scratch& scratch, const LayerParallel& par) const;

    // The fp8 KV cache scales (applied only when kv_dtype is fp8).
    const KvScales& kv_scales() const { return kv_scales_; }
    void set_kv_scales(KvScales scales) { kv_scales_ = std::move(scales); }
    std::int64_t local_heads() const { return heads_; }
    std::int64_t local_kv_heads() const { return kv_heads_; }
    std::size_t weight_bytes() const { return qkv_proj_.weight_bytes() + o_proj_.weight_bytes(); }
    double flops_per_token() const;

 private:
    std::int64_t head_dim_ = 0, heads_ = 0, kv_heads_ = 0;
    float eps_ = 1e-6f;
    Linear qkv_proj_;                   // [(heads + 2·kv_heads)·head_dim, hidden]
    std::vector<float> q_norm_, k_norm_;  // f32 [head_dim] (qk_norm) or empty
    Linear o_proj_;                     // [hidden, heads·head_dim], row parallel
    KvScales kv_scales_;
};

}  // namespace tessera::layers
