#include "layers/attention_layer.h"

#include <cmath>
#include <cstring>
#include <span>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "loader/weight_source.h"
#include "tensor/dtype.h"

namespace tessera::layers {

StatusOr<GqaAttention> GqaAttention::load(const loader::WeightSource& source, const AttentionSpec& s,
                                          const LayerParallel& par) {
    GqaAttention a;
    TSR_ASSIGN_OR_RETURN(auto heads, shard_attention(s.heads, s.kv_heads, par.tp));
    const std::int64_t hd = s.head_dim;
    a.head_dim_ = hd;
    a.heads_ = heads.q_heads.count;
    a.kv_heads_ = heads.kv_heads.count;
    a.eps_ = s.rms_norm_eps;
    const Range q_rows{heads.q_heads.begin * hd, heads.q_heads.count * hd};
    const Range kv_rows{heads.kv_heads.begin * hd, heads.kv_heads.count * hd};
    TSR_ASSIGN_OR_RETURN(a.qkv_proj_,
                         Linear::load(source, {{{s.prefix + "q_proj.weight", s.heads * hd, q_rows.begin, q_rows.count},
                                                {s.prefix + "k_proj.weight", s.kv_heads * hd, kv_rows.begin, kv_rows.count},
                                                {s.prefix + "v_proj.weight", s.kv_heads * hd, kv_rows.begin, kv_rows.count}},
                                               s.hidden, 0, -1, s.qkv_bias, s.compute_dtype}));
    if (s.qk_norm) {
        TSR_ASSIGN_OR_RETURN(a.q_norm_, load_f32_vector(source, s.prefix + "q_norm.weight", hd));
        TSR_ASSIGN_OR_RETURN(a.k_norm_, load_f32_vector(source, s.prefix + "k_norm.weight", hd));
    }
    TSR_ASSIGN_OR_RETURN(a.o_proj_, Linear::load(source, {{{s.prefix + "o_proj.weight", s.hidden}},
                                                          s.heads * hd, q_rows.begin, q_rows.count, false,
                                                          s.compute_dtype}));
    TSR_ASSIGN_OR_RETURN(a.kv_scales_, load_kv_scales(source, s.prefix));
    return a;
}

double GqaAttention::flops_per_token() const {
    return 2.0 * (static_cast<double>(qkv_proj_.in_features()) * qkv_proj_.out_features() +
                  static_cast<double>(o_proj_.in_features()) * o_proj_.out_features());
}

Status GqaAttention::forward(const LayerInput& input, const LayerBatch& batch, void* k_cache, void* v_cache,
                             DType kv_dtype, float* out, Scratch& scratch, const LayerParallel& par) const {
    const std::int64_t n = batch.n_tokens;
    const std::int64_t q_dim = heads_ * head_dim_;
    const std::int64_t kv_dim = kv_heads_ * head_dim_;
    const std::int64_t qkv_dim = q_dim + 2 * kv_dim;
    const std::int64_t half = head_dim_ / 2;
    scratch.qkv.resize(static_cast<std::size_t>(n * qkv_dim));
    scratch.attn.resize(static_cast<std::size_t>(n * q_dim));
    qkv_proj_.forward(input, n, scratch.qkv.data(), batch.pool);
    const float k_scale = is_fp8(kv_dtype) ? kv_scales_.k : 1.0f;
    const float v_scale = is_fp8(kv_dtype) ? kv_scales_.v : 1.0f;
    // Per token: q/k norms, the rotation with this pass's angles, K/V into the token's cache row.
    const auto finish_qkv = [&](std::int64_t t_begin, std::int64_t t_end) {
        for (std::int64_t t = t_begin; t < t_end; ++t) {
            float* q = scratch.qkv.data() + t * qkv_dim;
            float* k = q + q_dim;
            if (!q_norm_.empty()) {
                kernels::rms_norm(q, q_norm_.data(), q, heads_, head_dim_, eps_);
                kernels::rms_norm(k, k_norm_.data(), k, kv_heads_, head_dim_, eps_);
            }
            const float* cos = batch.rope_cos + t * half;
            const float* sin = batch.rope_sin + t * half;
            kernels::rope_rotate(q, heads_, head_dim_, cos, sin, /*neox=*/true);
            kernels::rope_rotate(k, kv_heads_, head_dim_, cos, sin, /*neox=*/true);
            const std::int64_t row = batch.kv_rows[t] * kv_dim;
            kernels::store_kv_row(k, k_cache, row, kv_dim, kv_dtype, k_scale);
            kernels::store_kv_row(k + kv_dim, v_cache, row, kv_dim, kv_dtype, v_scale);
        }
    };
    if (batch.pool != nullptr && n >= 8) {
        batch.pool->parallel_for(n, finish_qkv);
    } else {
        finish_qkv(0, n);
    }
    std::vector<kernels::AttentionArgs>& args_list = scratch.attention_args;
    args_list.clear();
    std::int64_t first = 0;
    for (const SeqSpan& seq : batch.seqs) {
        kernels::AttentionArgs args;
        args.q = scratch.qkv.data() + first * qkv_dim;
        args.k = k_cache;
        args.v = v_cache;
        args.out = scratch.attn.data() + first * q_dim;
        args.n_q = seq.n_tokens;
        args.start_pos = seq.start_pos;
        args.q_stride = qkv_dim;
        args.kv_slots = seq.slots;
        args.kv_dtype = kv_dtype;
        if (seq.n_tokens > 0) args_list.push_back(args);
        first += seq.n_tokens;
    }
    // Cached K and V are k / k_scale and v / v_scale: the scores take k_scale, the output v_scale.
    const kernels::AttentionShape shape{heads_, kv_heads_, head_dim_,
                                        k_scale / std::sqrt(static_cast<float>(head_dim_))};
    kernels::attention_batch(args_list, shape, batch.pool);
    if (v_scale != 1.0f)
        for (float& x : std::span(scratch.attn).first(static_cast<std::size_t>(n * q_dim))) x *= v_scale;
    o_proj_.forward(scratch.attn.data(), n, out, batch.pool);
    return par.all_reduce({out, static_cast<std::size_t>(n * o_proj_.out_features())});
}

}  // namespace tessera::layers
