#include "planner/model_size.h"

#include <vector>

#include "dist/pp_partition.h"
#include "kernels/matmul.h"
#include "kvcache/kv_cache.h"
#include "layers/linear.h"
#include "layers/parallel.h"
#include "layers/tensor_parallel.h"
#include "models/model.h"

namespace tessera::planner {

namespace {

using layers::Range;
using layers::TpShard;

// One output part of a projection: rows [begin, begin + count) of `total`.
struct Part {
    std::string name;
    std::int64_t begin = 0, count = 0, total = 0;
};

// A projection as the loaded model's Linear holds it (layers/linear.cpp Linear::load): parts
// fused by rows, a column slice of `in_features`, packed in `type`. For fp8 it also applies
// SGLang's block-split rule, and the checkpoint's block width sets the scale block only where
// it splits a row (load_fp8).
StatusOr<std::int64_t> linear(DType type, const std::vector<Part>& parts, Range cols, std::int64_t in_features,
                              const WeightTypes& t) {
    std::int64_t rows = 0;
    for (const Part& p : parts) {
        rows += p.count;
        if (!is_fp8(type) || t.fp8_block_n == 0) continue;
        TSR_RETURN_IF_ERROR(layers::check_block_split(p.name, "output_partition_size", "block_n", p.begin, p.count,
                                                      p.total, t.fp8_block_n));
        TSR_RETURN_IF_ERROR(layers::check_block_split(p.name, "input_size_per_partition", "block_k", cols.begin,
                                                      cols.count, in_features, t.fp8_block_k));
    }
    const std::int64_t block = t.fp8_block_k > 0 && t.fp8_block_k < in_features ? t.fp8_block_k : kernels::kFp8ScaleBlock;
    return kernels::packed_weight_bytes(type, rows, cols.count, block);
}

// A whole-width projection of one part.
StatusOr<std::int64_t> linear(DType type, Part part, std::int64_t in_features, const WeightTypes& t) {
    return linear(type, std::vector<Part>{std::move(part)}, Range{0, in_features}, in_features, t);
}

Part whole(std::string name, std::int64_t rows) { return {std::move(name), 0, rows, rows}; }

Part slice(std::string name, Range r, std::int64_t total, std::int64_t per_row = 1) {
    return {std::move(name), r.begin * per_row, r.count * per_row, total * per_row};
}

// layers/mlp.cpp GatedMlp: gate and up fused by rows (this rank's `cut` of `inter`), then down
// over the same slice of its inputs.
StatusOr<std::int64_t> gated_mlp(const std::string& prefix, std::int64_t hidden, Range cut, std::int64_t inter,
                                 DType type, const WeightTypes& t) {
    TSR_ASSIGN_OR_RETURN(std::int64_t gate_up, linear(type, {slice(prefix + "gate_proj.weight", cut, inter),
                                                            slice(prefix + "up_proj.weight", cut, inter)},
                                                      Range{0, hidden}, hidden, t));
    TSR_ASSIGN_OR_RETURN(std::int64_t down, linear(type, {whole(prefix + "down_proj.weight", hidden)}, cut, inter, t));
    return gate_up + down;
}

StatusOr<std::int64_t> attention_bytes(const loader::ModelConfig& c, const std::string& p, TpShard tp,
                                       const WeightTypes& t) {
    const std::int64_t H = c.hidden_size;
    const std::int64_t heads_total = c.num_attention_heads;
    if (c.is_mla()) {  // layers/mla_attention.cpp MlaAttention::weight_bytes
        const loader::MlaConfig& m = c.mla;
        TSR_ASSIGN_OR_RETURN(Range heads, layers::even_shard("num_attention_heads", heads_total, tp));
        const std::int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        const Part q = m.q_lora_rank > 0 ? whole(p + "q_a_proj.weight", m.q_lora_rank)
                                         : slice(p + "q_proj.weight", heads, heads_total, qk);
        TSR_ASSIGN_OR_RETURN(std::int64_t bytes,
                             linear(t.linear, {q, whole(p + "kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim)},
                                    Range{0, H}, H, t));
        if (m.q_lora_rank > 0) {
            TSR_ASSIGN_OR_RETURN(std::int64_t q_b, linear(t.linear, slice(p + "q_b_proj.weight", heads, heads_total, qk),
                                                          m.q_lora_rank, t));
            bytes += q_b;
        }
        // kv_b_proj is loaded (and block-checked) but weight_bytes counts its absorbed slices.
        TSR_RETURN_IF_ERROR(linear(t.linear, slice(p + "kv_b_proj.weight", heads, heads_total,
                                                   m.qk_nope_head_dim + m.v_head_dim),
                                   m.kv_lora_rank, t)
                                .status());
        TSR_ASSIGN_OR_RETURN(std::int64_t o, linear(t.linear, {whole(p + "o_proj.weight", H)},
                                                    Range{heads.begin * m.v_head_dim, heads.count * m.v_head_dim},
                                                    heads_total * m.v_head_dim, t));
        const DType absorbed = is_fp8(t.linear) ? DType::kBF16 : t.linear;
        return bytes + o +
               heads.count * (kernels::packed_weight_bytes(absorbed, m.kv_lora_rank, m.qk_nope_head_dim) +
                              kernels::packed_weight_bytes(absorbed, m.v_head_dim, m.kv_lora_rank));
    }
    // layers/attention_layer.cpp GqaAttention: q, k, v fused by rows, then o.
    TSR_ASSIGN_OR_RETURN(layers::AttentionShard s, layers::shard_attention(heads_total, c.num_key_value_heads, tp));
    const std::int64_t d = c.head_dim;
    TSR_ASSIGN_OR_RETURN(std::int64_t qkv, linear(t.linear, {slice(p + "q_proj.weight", s.q_heads, heads_total, d),
                                                            slice(p + "k_proj.weight", s.kv_heads, c.num_key_value_heads, d),
                                                            slice(p + "v_proj.weight", s.kv_heads, c.num_key_value_heads, d)},
                                                  Range{0, H}, H, t));
    TSR_ASSIGN_OR_RETURN(std::int64_t o, linear(t.linear, {whole(p + "o_proj.weight", H)},
                                                Range{s.q_heads.begin * d, s.q_heads.count * d}, heads_total * d, t));
    return qkv + o;
}

}  // namespace

StatusOr<WeightTypes> weight_types(const loader::ModelConfig& config, const std::string& dtype,
                                   const std::string& quantization, const std::string& kv_cache_dtype) {
    WeightTypes t;
    const DType stored = config.torch_dtype.value_or(DType::kF32);
    if (dtype == "auto") t.compute = stored == DType::kBF16 ? DType::kBF16 : DType::kF32;
    else if (dtype == "bf16" || dtype == "bfloat16") t.compute = DType::kBF16;
    else if (dtype == "f32" || dtype == "float32" || dtype == "float") t.compute = DType::kF32;
    else return Status::InvalidArgument("--dtype " + dtype + " is not a compute weight type; use auto, f32 or bf16");
    t.linear = config.fp8 || quantization == "fp8" ? DType::kF8E4M3 : t.compute;
    if (config.fp8) {
        t.fp8_block_n = config.fp8->block_n;
        t.fp8_block_k = config.fp8->block_k;
    } else if (quantization == "fp8") {
        t.fp8_block_n = t.fp8_block_k = kernels::kFp8ScaleBlock;  // quantized at load in 128 x 128 blocks
    }
    t.embedding = stored == DType::kF16 ? DType::kF32 : stored;
    TSR_ASSIGN_OR_RETURN(t.kv, models::resolve_kv_cache_dtype(kv_cache_dtype, t.compute));
    return t;
}

StatusOr<RankSize> rank_size(const loader::ModelConfig& c, const RankPlace& place, const WeightTypes& t) {
    RankSize out;
    TSR_ASSIGN_OR_RETURN(dist::LayerRange layers, dist::pp_layer_range(static_cast<int>(c.num_hidden_layers),
                                                                        place.pp_rank, place.pp_size,
                                                                        place.layer_partition));
    out.first_layer = layers.begin;
    out.end_layer = layers.end;
    const TpShard tp{place.tp_rank, place.tp_size};
    const TpShard whole{0, 1};
    const std::int64_t H = c.hidden_size;
    std::int64_t bytes = 0;
    const TpShard attn_tp = place.attn_tp_size > 0 ? TpShard{place.attn_tp_rank, place.attn_tp_size} : tp;
    if (dist::owns_embedding(place.pp_rank)) {
        const layers::VocabShard vocab = layers::shard_vocab(c.vocab_size, place.dp_attention ? whole : tp);
        out.embedding_bytes = vocab.rows.count * H * static_cast<std::int64_t>(dtype_size(t.embedding));
        bytes += out.embedding_bytes;
    }
    if (dist::owns_lm_head(place.pp_rank, place.pp_size)) {
        const layers::VocabShard vocab = layers::shard_vocab(c.vocab_size, place.dp_lm_head ? attn_tp : tp);
        out.lm_head_bytes = kernels::packed_weight_bytes(t.compute, vocab.rows.count, H);
        bytes += out.lm_head_bytes;
    }

    for (int l = layers.begin; l < layers.end; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        TSR_ASSIGN_OR_RETURN(std::int64_t attention, attention_bytes(c, p + "self_attn.", attn_tp, t));
        bytes += attention;
        if (!c.is_moe_layer(l)) {
            TSR_ASSIGN_OR_RETURN(Range dense_cut, layers::even_shard("intermediate_size", c.intermediate_size,
                                                                     place.dense_mlp_replicated ? whole : tp));
            TSR_ASSIGN_OR_RETURN(std::int64_t mlp, gated_mlp(p + "mlp.", H, dense_cut, c.intermediate_size, t.linear, t));
            bytes += mlp;
            out.dense_mlp_bytes += mlp;
            continue;
        }
        // layers/moe.cpp MoeLayer: an f32 router, this rank's physical experts (each a
        // moe_tp slice), and the shared experts split over the TP group or whole.
        const layers::MoeParallel moe{place.ep_rank, place.ep_size, place.moe_tp_rank, place.moe_tp_size,
                                      place.moe_all_to_all ? layers::MoeA2aBackend::kAllToAll
                                                           : layers::MoeA2aBackend::kNone};
        const std::int64_t physical = c.moe.num_experts + place.num_redundant_experts;
        if (physical % place.ep_size != 0)
            return Status::InvalidArgument("--ep-size " + std::to_string(place.ep_size) + " must divide the model's " +
                                           std::to_string(c.moe.num_experts) + " experts" +
                                           (place.num_redundant_experts > 0
                                                ? " plus --ep-num-redundant-experts (" + std::to_string(physical) + ")"
                                                : ""));
        TSR_ASSIGN_OR_RETURN(Range expert_cut, layers::even_shard("moe_intermediate_size", c.moe.moe_intermediate_size,
                                                                  TpShard{place.moe_tp_rank, place.moe_tp_size}));
        bytes += kernels::packed_weight_bytes(DType::kF32, c.moe.num_experts, H);
        TSR_ASSIGN_OR_RETURN(std::int64_t expert, gated_mlp(p + "mlp.experts.E.", H, expert_cut,
                                                            c.moe.moe_intermediate_size, t.linear, t));
        bytes += physical / place.ep_size * expert;
        out.expert_bytes = expert;
        out.experts_per_rank = physical / place.ep_size;
        ++out.moe_layers;
        if (c.moe.shared_expert_intermediate_size > 0) {
            const bool replicated = moe.shared_experts_replicated();
            TSR_ASSIGN_OR_RETURN(Range shared_cut, layers::even_shard("intermediate_size",
                                                                      c.moe.shared_expert_intermediate_size,
                                                                      replicated ? whole : tp));
            TSR_ASSIGN_OR_RETURN(std::int64_t shared, gated_mlp(p + "mlp.shared_experts.", H, shared_cut,
                                                                c.moe.shared_expert_intermediate_size, t.linear, t));
            bytes += shared;
            out.shared_expert_bytes += shared;
            out.shared_experts_whole = replicated;
        }
    }
    out.weight_bytes = bytes;
    out.dense_mlp_gathered = place.dp_attention && !place.dense_mlp_replicated;
    out.lm_head_gathered = place.dp_attention && !place.dp_lm_head;

    // models/decoder.cpp kv_cache_shape: K and V of this rank's KV heads, or MLA's latent.
    kvcache::KvCacheShape kv;
    kv.n_layers = layers.size();
    kv.dtype = t.kv;
    if (c.is_mla()) {
        kv.n_kv_heads = 1;
        kv.head_dim = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
        kv.kind = kvcache::KvKind::kLatent;
    } else {
        TSR_ASSIGN_OR_RETURN(layers::AttentionShard s,
                             layers::shard_attention(c.num_attention_heads, c.num_key_value_heads, attn_tp));
        kv.n_kv_heads = s.kv_heads.count;
        kv.head_dim = c.head_dim;
    }
    out.kv_bytes_per_token = kv.bytes_per_token();
    return out;
}

}  // namespace tessera::planner
