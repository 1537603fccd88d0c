#pragma once
// layers/mla_attention.h — DeepSeek-V2/V3 multi-head latent attention (Hugging Face's
// DeepseekV3Attention, SGLang's models/deepseek_v2.py DeepseekV2AttentionMLA):
//   c_q = rms_norm(q_a_proj x) → q = q_b_proj c_q   (or q = q_proj x without q_lora_rank)
//   [c_kv ; k_pe] = kv_a_proj_with_mqa x, c_kv = rms_norm(c_kv)   (k_pe: no norm)
//   q_pe, k_pe rotated on interleaved pairs (yarn: times rope_magnitude)
//   cached per token: the row [c_kv ; k_pe], one for all heads (KvKind::kLatent); an fp8
//     cache holds it divided by the checkpoint's k_scale, which scales the scores and the
//     weighted latent back (the latent is keys and values both)
//   prefill (a run of several tokens): naive form, k_nope and v per head = kv_b_proj c_kv
//   decode (one token): absorbed form, q̂ = W_UK^T q_nope against the latent rows, the
//     weighted latent through W_UV (both slices of kv_b_proj, kept per head)
//   out = o_proj (row parallel) + the TP all-reduce.
// Heads are split over the TP group; the latent projection is computed on every rank.
// Immutable after load; forward() by one thread.

#include <cstdint>
#include <string>
#include <vector>

#include "layers/forward_batch.h"
#include "layers/kv_scales.h"
#include "layers/linear.h"
#include "layers/parallel.h"
#include "loader/model_config.h"

namespace tessera::layers {

struct MlaSpec {
    std::string prefix;  // "model.layers.{i}.self_attn."
    std::int64_t hidden = 0;
    std::int64_t heads = 0;
    loader::MlaConfig mla;
    float rms_norm_eps = 1e-6f;
    float scale = 1.0f;           // softmax scale
    float rope_magnitude = 1.0f;  // yarn's cos/sin factor
    DType compute_dtype = DType::kF32;
};

// Which form a run of tokens takes: by default the naive one for prefill runs and the
// absorbed one for single decode tokens; tests force either.
enum class MlaForm { kAuto, kNaive, kAbsorbed };

class MlaAttention {
 public:
    static StatusOr<MlaAttention> load(const loader::WeightSource& source, const MlaSpec& spec,
                                       const LayerParallel& par);

    // out f32 [n, hidden] (all-reduced) from the input rows f32 [n, hidden] (normed by the input
    // projection when the input carries a norm); writes each new token's latent row into
    // `latent_cache` (row width kv_lora_rank + qk_rope_head_dim).
    Status forward(const LayerInput& input, const LayerBatch& batch, void* latent_cache, DType cache_dtype,
                   float* out, Scratch& scratch, const LayerParallel& par, MlaForm form = MlaForm::kAuto) const;

    // The fp8 cache's scales (attn_mqa.k_scale / v_scale): the latent takes k.
    const KvScales& kv_scales() const { return kv_scales_; }
    void set_kv_scales(KvScales scales) { kv_scales_ = std::move(scales); }
    std::int64_t local_heads() const { return heads_; }
    std::int64_t cache_width() const { return mla_.kv_lora_rank + mla_.qk_rope_head_dim; }
    std::size_t weight_bytes() const;
    double flops_per_token() const;

 private:
    // Consecutive sequences of the batch (their tokens from row `first` on) in one pass: the
    // absorbed products over all their tokens and one attention call, split over the threads.
    // `cache_scale`: what the cache's values are multiplied by to give the latent.
    void absorbed(const float* q, std::span<const SeqSpan> seqs, std::int64_t first, const void* cache,
                  DType cache_dtype, float cache_scale, float* attn, Scratch& scratch, ThreadPool* pool) const;
    void naive(const float* q, const SeqSpan& seq, std::int64_t first, const void* cache, DType cache_dtype,
               float cache_scale, float* attn, Scratch& scratch, ThreadPool* pool) const;

    loader::MlaConfig mla_;
    std::int64_t heads_ = 0;  // this rank's
    float eps_ = 1e-6f, scale_ = 1.0f, rope_magnitude_ = 1.0f;
    // x → [q_a (q_lora_rank) or this rank's q heads ; kv_a (kv_lora_rank + rope)]
    Linear in_proj_;
    std::vector<float> q_a_norm_;  // f32 [q_lora_rank] or empty
    Linear q_b_proj_;              // [heads·(nope + rope), q_lora_rank] (with q_lora_rank)
    std::vector<float> kv_a_norm_;  // f32 [kv_lora_rank]
    Linear kv_b_proj_;             // [heads·(nope + v), kv_lora_rank]: the naive form's K and V
    std::vector<Linear> w_uk_t_;   // per head [kv_lora_rank, nope]: q_nope → latent space
    std::vector<Linear> w_uv_;     // per head [v, kv_lora_rank]: latent → value
    Linear o_proj_;                // [hidden, heads·v], row parallel
    KvScales kv_scales_;
};

}  // namespace tessera::layers
