#include "layers/mla_attention.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/batch_invariance.h"
#include "kernels/mla_attention.h"
#include "kernels/ops.h"
#include "loader/weight_source.h"

namespace tessera::layers {

StatusOr<MlaAttention> MlaAttention::load(const loader::WeightSource& source, const MlaSpec& s,
                                          const LayerParallel& par) {
    MlaAttention a;
    const loader::MlaConfig& m = s.mla;
    a.mla_ = m;
    a.eps_ = s.rms_norm_eps;
    a.scale_ = s.scale;
    a.rope_magnitude_ = s.rope_magnitude;
    TSR_ASSIGN_OR_RETURN(Range heads, even_shard("num_attention_heads", s.heads, par.tp));
    a.heads_ = heads.count;
    const std::int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    const std::int64_t kv_a_rows = m.kv_lora_rank + m.qk_rope_head_dim;
    const std::string& p = s.prefix;
    LinearPart q_part = m.q_lora_rank > 0
                            ? LinearPart{p + "q_a_proj.weight", m.q_lora_rank}
                            : LinearPart{p + "q_proj.weight", s.heads * qk, heads.begin * qk, heads.count * qk};
    TSR_ASSIGN_OR_RETURN(a.in_proj_, Linear::load(source, {{q_part, {p + "kv_a_proj_with_mqa.weight", kv_a_rows}},
                                                           s.hidden, 0, -1, false, s.compute_dtype}));
    if (m.q_lora_rank > 0) {
        TSR_ASSIGN_OR_RETURN(a.q_a_norm_, load_f32_vector(source, p + "q_a_layernorm.weight", m.q_lora_rank));
        TSR_ASSIGN_OR_RETURN(a.q_b_proj_, Linear::load(source, {{{p + "q_b_proj.weight", s.heads * qk,
                                                                  heads.begin * qk, heads.count * qk}},
                                                                m.q_lora_rank, 0, -1, false, s.compute_dtype}));
    }
    TSR_ASSIGN_OR_RETURN(a.kv_a_norm_, load_f32_vector(source, p + "kv_a_layernorm.weight", m.kv_lora_rank));
    const std::int64_t kv_b_per_head = m.qk_nope_head_dim + m.v_head_dim;
    TSR_ASSIGN_OR_RETURN(a.kv_b_proj_, Linear::load(source, {{{p + "kv_b_proj.weight", s.heads * kv_b_per_head,
                                                               heads.begin * kv_b_per_head,
                                                               heads.count * kv_b_per_head}},
                                                             m.kv_lora_rank, 0, -1, false, s.compute_dtype}));
    // The absorbed form's per-head slices of kv_b_proj (SGLang's post_load_weights w_kc, w_vc),
    // dequantized from an fp8 checkpoint and kept in the activation type, as SGLang does on CPU.
    const DType absorbed_dtype = is_fp8(s.compute_dtype) ? DType::kBF16 : s.compute_dtype;
    const std::int64_t r = m.kv_lora_rank, dn = m.qk_nope_head_dim, dv = m.v_head_dim;
    std::vector<float> w(static_cast<std::size_t>(r * std::max(dn, dv)));
    for (std::int64_t h = heads.begin; h < heads.begin + heads.count; ++h) {
        TSR_ASSIGN_OR_RETURN(auto rows, source.read_rows_f32(p + "kv_b_proj.weight", s.heads * kv_b_per_head,
                                                             m.kv_lora_rank, h * kv_b_per_head, kv_b_per_head));
        for (std::int64_t i = 0; i < dn; ++i)  // W_UK^T: [r, dn]
            for (std::int64_t j = 0; j < r; ++j) w[j * dn + i] = rows[i * r + j];
        a.w_uk_t_.push_back(Linear::from_f32(w.data(), r, dn, absorbed_dtype));
        a.w_uv_.push_back(Linear::from_f32(rows.data() + dn * r, dv, r, absorbed_dtype));  // W_UV: [dv, r]
    }
    TSR_ASSIGN_OR_RETURN(a.o_proj_, Linear::load(source, {{{p + "o_proj.weight", s.hidden}}, s.heads * dv,
                                                          heads.begin * dv, heads.count * dv, false,
                                                          s.compute_dtype}));
    TSR_ASSIGN_OR_RETURN(a.kv_scales_, load_mla_kv_scales(source, p));
    return a;
}

std::size_t MlaAttention::weight_bytes() const {
    // The decode path reads in_proj, q_b, the absorbed slices and o_proj; kv_b_proj holds the
    // same numbers as the slices for prefill.
    std::size_t bytes = in_proj_.weight_bytes() + q_b_proj_.weight_bytes() + o_proj_.weight_bytes();
    for (std::size_t h = 0; h < w_uk_t_.size(); ++h) bytes += w_uk_t_[h].weight_bytes() + w_uv_[h].weight_bytes();
    return bytes;
}

double MlaAttention::flops_per_token() const {
    double macs = static_cast<double>(in_proj_.in_features()) * in_proj_.out_features() +
                  static_cast<double>(q_b_proj_.in_features()) * q_b_proj_.out_features() +
                  static_cast<double>(o_proj_.in_features()) * o_proj_.out_features();
    for (std::size_t h = 0; h < w_uk_t_.size(); ++h)
        macs += static_cast<double>(w_uk_t_[h].in_features()) * w_uk_t_[h].out_features() +
                static_cast<double>(w_uv_[h].in_features()) * w_uv_[h].out_features();
    return 2.0 * macs;
}

Status MlaAttention::forward(const LayerInput& input, const LayerBatch& batch, void* cache, DType cache_dtype,
                             float* out, Scratch& scratch, const LayerParallel& par, MlaForm form) const {
    const std::int64_t n = batch.n_tokens;
    const std::int64_t r = mla_.kv_lora_rank, dr = mla_.qk_rope_head_dim, dn = mla_.qk_nope_head_dim;
    const std::int64_t qk = dn + dr, dv = mla_.v_head_dim, width = cache_width();
    const std::int64_t proj_width = in_proj_.out_features();
    const std::int64_t q_in = mla_.q_lora_rank > 0 ? mla_.q_lora_rank : heads_ * qk;  // q part of in_proj
    scratch.mla_proj.resize(static_cast<std::size_t>(n * proj_width));
    in_proj_.forward(input, n, scratch.mla_proj.data(), batch.pool);
    const float cache_scale = is_fp8(cache_dtype) ? kv_scales_.k : 1.0f;
    // Per token: the latent's norm, the rope key, the cache row; the q_a norm.
    const auto finish_kv = [&](std::int64_t t_begin, std::int64_t t_end) {
        for (std::int64_t t = t_begin; t < t_end; ++t) {
            float* row = scratch.mla_proj.data() + t * proj_width;
            if (!q_a_norm_.empty()) kernels::rms_norm(row, q_a_norm_.data(), row, 1, mla_.q_lora_rank, eps_);
            float* kv = row + q_in;
            kernels::rms_norm(kv, kv_a_norm_.data(), kv, 1, r, eps_);
            kernels::rope_rotate(kv + r, 1, dr, batch.rope_cos + t * dr / 2, batch.rope_sin + t * dr / 2,
                                 /*neox=*/false);
            for (std::int64_t i = 0; i < dr; ++i) kv[r + i] *= rope_magnitude_;
            kernels::store_kv_row(kv, cache, batch.kv_rows[t] * width, width, cache_dtype, cache_scale);
        }
    };
    if (batch.pool != nullptr && n >= 8) {
        batch.pool->parallel_for(n, finish_kv);
    } else {
        finish_kv(0, n);
    }
    // Queries [n, heads, nope + rope], q_pe rotated.
    scratch.mla_q.resize(static_cast<std::size_t>(n * heads_ * qk));
    if (mla_.q_lora_rank > 0) {
        q_b_proj_.forward(scratch.mla_proj.data(), n, scratch.mla_q.data(), batch.pool, proj_width, 0);
    } else {
        for (std::int64_t t = 0; t < n; ++t)
            std::copy(scratch.mla_proj.begin() + t * proj_width, scratch.mla_proj.begin() + t * proj_width + q_in,
                      scratch.mla_q.begin() + t * q_in);
    }
    for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t hd = 0; hd < heads_; ++hd) {
            float* q_pe = scratch.mla_q.data() + (t * heads_ + hd) * qk + dn;
            kernels::rope_rotate(q_pe, 1, dr, batch.rope_cos + t * dr / 2, batch.rope_sin + t * dr / 2, false);
            for (std::int64_t i = 0; i < dr; ++i) q_pe[i] *= rope_magnitude_;
        }
    }
    // Attention into [n, heads · v]: runs of consecutive single-token sequences together in the
    // absorbed form, prompts one by one in the naive form. Batch-invariant kernels take the
    // absorbed form for prompts too: the two forms round differently, and a token must come out
    // the same whether it was decoded or prefilled.
    scratch.attn.resize(static_cast<std::size_t>(n * heads_ * dv));
    const bool absorb_all = form == MlaForm::kAbsorbed || (form == MlaForm::kAuto && kernels::batch_invariant());
    const auto is_absorbed = [&](const SeqSpan& seq) {
        return absorb_all || (form == MlaForm::kAuto && seq.n_tokens == 1);
    };
    std::int64_t first = 0;
    for (std::size_t i = 0; i < batch.seqs.size();) {
        std::size_t end = i + 1;
        std::int64_t tokens = batch.seqs[i].n_tokens;
        if (is_absorbed(batch.seqs[i])) {
            while (end < batch.seqs.size() && is_absorbed(batch.seqs[end])) tokens += batch.seqs[end++].n_tokens;
            if (tokens > 0)
                absorbed(scratch.mla_q.data(), batch.seqs.subspan(i, end - i), first, cache, cache_dtype,
                         cache_scale, scratch.attn.data(), scratch, batch.pool);
        } else if (tokens > 0) {
            naive(scratch.mla_q.data(), batch.seqs[i], first, cache, cache_dtype, cache_scale, scratch.attn.data(),
                  scratch, batch.pool);
        }
        first += tokens;
        i = end;
    }
    o_proj_.forward(scratch.attn.data(), n, out, batch.pool);
    return par.all_reduce({out, static_cast<std::size_t>(n * o_proj_.out_features())});
}

void MlaAttention::absorbed(const float* q, std::span<const SeqSpan> seqs, std::int64_t first, const void* cache,
                            DType cache_dtype, float cache_scale, float* attn, Scratch& scratch,
                            ThreadPool* pool) const {
    const std::int64_t r = mla_.kv_lora_rank, dr = mla_.qk_rope_head_dim, dn = mla_.qk_nope_head_dim;
    const std::int64_t qk = dn + dr, dv = mla_.v_head_dim, width = r + dr;
    std::int64_t n = 0;
    for (const SeqSpan& seq : seqs) n += seq.n_tokens;
    // Q [n, heads, r + dr] = [W_UK^T q_nope ; q_pe] per head.
    scratch.mla_head_in.resize(static_cast<std::size_t>(n * heads_ * width));
    float* wide = scratch.mla_head_in.data();
    const float* q_run = q + first * heads_ * qk;
    // One task per head range, each head's small GEMMs on one thread: a pool dispatch per
    // head and layer would cost more than the GEMV of its 2·r·nope weights.
    const auto for_heads = [&](auto&& fn) {
        if (pool != nullptr && heads_ > 1) {
            pool->parallel_for(heads_, [&](std::int64_t h0, std::int64_t h1) {
                for (std::int64_t hd = h0; hd < h1; ++hd) fn(hd);
            });
        } else {
            for (std::int64_t hd = 0; hd < heads_; ++hd) fn(hd);
        }
    };
    for_heads([&](std::int64_t hd) {
        w_uk_t_[hd].forward(q_run + hd * qk, n, wide + hd * width, nullptr, heads_ * qk, heads_ * width);
        for (std::int64_t t = 0; t < n; ++t)
            std::copy(q_run + (t * heads_ + hd) * qk + dn, q_run + (t * heads_ + hd) * qk + qk,
                      wide + (t * heads_ + hd) * width + r);
    });
    scratch.mla_head_out.resize(static_cast<std::size_t>(n * heads_ * r));
    scratch.mla_runs.clear();
    std::int64_t t = 0;
    for (const SeqSpan& seq : seqs) {
        scratch.mla_runs.push_back({wide + t * heads_ * width, cache, cache_dtype, seq.slots, seq.n_tokens,
                                    seq.start_pos, scratch.mla_head_out.data() + t * heads_ * r});
        t += seq.n_tokens;
    }
    // Scores and the weighted latent of the cached values, scaled back to the latent's.
    kernels::mla_attention_absorbed(scratch.mla_runs, {heads_, r, dr, scale_ * cache_scale}, pool);
    if (cache_scale != 1.0f) {
        for (float& x : scratch.mla_head_out) x *= cache_scale;
    }
    // Each head's weighted latent through its W_UV, into attn [n, heads · v].
    for_heads([&](std::int64_t hd) {
        w_uv_[hd].forward(scratch.mla_head_out.data() + hd * r, n, attn + first * heads_ * dv + hd * dv, nullptr,
                          heads_ * r, heads_ * dv);
    });
}

void MlaAttention::naive(const float* q, const SeqSpan& seq, std::int64_t first, const void* cache,
                         DType cache_dtype, float cache_scale, float* attn, Scratch& scratch, ThreadPool* pool) const {
    const std::int64_t r = mla_.kv_lora_rank, dr = mla_.qk_rope_head_dim, dn = mla_.qk_nope_head_dim;
    const std::int64_t width = r + dr, ctx = seq.start_pos + seq.n_tokens;
    // The context's latents and rope keys, then K_nope and V of every head from kv_b_proj.
    scratch.mla_latent.resize(static_cast<std::size_t>(ctx * r));
    scratch.mla_k_pe.resize(static_cast<std::size_t>(ctx * dr));
    for (std::int64_t pos = 0; pos < ctx; ++pos) {
        const std::int64_t slot = seq.slots != nullptr ? seq.slots[pos] : pos;
        float* latent = scratch.mla_latent.data() + pos * r;
        float* k_pe = scratch.mla_k_pe.data() + pos * dr;
        const auto* row = static_cast<const char*>(cache) + slot * width * static_cast<std::int64_t>(dtype_size(cache_dtype));
        convert_to_f32(row, cache_dtype, latent, static_cast<std::size_t>(r));
        convert_to_f32(row + r * static_cast<std::int64_t>(dtype_size(cache_dtype)), cache_dtype, k_pe,
                       static_cast<std::size_t>(dr));
        if (cache_scale != 1.0f) {
            for (std::int64_t i = 0; i < r; ++i) latent[i] *= cache_scale;
            for (std::int64_t i = 0; i < dr; ++i) k_pe[i] *= cache_scale;
        }
    }
    scratch.mla_kv.resize(static_cast<std::size_t>(ctx * kv_b_proj_.out_features()));
    kv_b_proj_.forward(scratch.mla_latent.data(), ctx, scratch.mla_kv.data(), pool);
    // Plain multi-head attention from here, on the flash kernel of GQA models: per head
    // K = [k_nope ; k_pe] and V = v, both padded with zeros to one head width D (as Hugging
    // Face pads V for flash attention), in the cache's element type.
    const std::int64_t dv = mla_.v_head_dim, qk = dn + dr, D = std::max(qk, dv);
    const std::int64_t kv_b_width = dn + dv;
    const auto rows = static_cast<std::size_t>(ctx * heads_ * D);
    const auto k_at = [&](std::int64_t pos, std::int64_t hd, std::int64_t i) -> float {
        if (i < dn) return scratch.mla_kv[(pos * heads_ + hd) * kv_b_width + i];
        return i < qk ? scratch.mla_k_pe[pos * dr + i - dn] : 0.0f;
    };
    const auto v_at = [&](std::int64_t pos, std::int64_t hd, std::int64_t i) -> float {
        return i < dv ? scratch.mla_kv[(pos * heads_ + hd) * kv_b_width + dn + i] : 0.0f;
    };
    const void* k = nullptr;
    const void* v = nullptr;
    const bool bf16 = cache_dtype == DType::kBF16;
    if (bf16) {
        scratch.mla_k16.resize(rows);
        scratch.mla_v16.resize(rows);
        for (std::int64_t pos = 0; pos < ctx; ++pos)
            for (std::int64_t hd = 0; hd < heads_; ++hd)
                for (std::int64_t i = 0; i < D; ++i) {
                    scratch.mla_k16[(pos * heads_ + hd) * D + i] = f32_to_bf16(k_at(pos, hd, i));
                    scratch.mla_v16[(pos * heads_ + hd) * D + i] = f32_to_bf16(v_at(pos, hd, i));
                }
        k = scratch.mla_k16.data();
        v = scratch.mla_v16.data();
    } else {
        scratch.mla_k.resize(rows);
        scratch.mla_v.resize(rows);
        for (std::int64_t pos = 0; pos < ctx; ++pos)
            for (std::int64_t hd = 0; hd < heads_; ++hd)
                for (std::int64_t i = 0; i < D; ++i) {
                    scratch.mla_k[(pos * heads_ + hd) * D + i] = k_at(pos, hd, i);
                    scratch.mla_v[(pos * heads_ + hd) * D + i] = v_at(pos, hd, i);
                }
        k = scratch.mla_k.data();
        v = scratch.mla_v.data();
    }
    const std::int64_t n = seq.n_tokens;
    const float* q_seq = q + first * heads_ * qk;
    if (D != qk) {  // queries padded too
        scratch.mla_head_in.assign(static_cast<std::size_t>(n * heads_ * D), 0.0f);
        for (std::int64_t t = 0; t < n * heads_; ++t)
            std::copy(q_seq + t * qk, q_seq + (t + 1) * qk, scratch.mla_head_in.begin() + t * D);
        q_seq = scratch.mla_head_in.data();
    }
    scratch.mla_head_out.resize(static_cast<std::size_t>(n * heads_ * D));
    kernels::AttentionArgs args;
    args.q = q_seq;
    args.k = k;
    args.v = v;
    args.out = scratch.mla_head_out.data();
    args.n_q = n;
    args.start_pos = seq.start_pos;
    args.kv_dtype = bf16 ? DType::kBF16 : DType::kF32;
    kernels::attention(args, {heads_, heads_, D, scale_}, pool);
    for (std::int64_t t = 0; t < n * heads_; ++t)
        std::copy(scratch.mla_head_out.begin() + t * D, scratch.mla_head_out.begin() + t * D + dv,
                  attn + first * heads_ * dv + t * dv);
}

}  // namespace tessera::layers
