#pragma once
// planner/model_size.h — what one rank of a launch holds, from config.json alone (no
// weights): the packed weight bytes and the KV bytes per token, computed with the same
// shard rules (layers/tensor_parallel.h, dist/pp_partition.h) and packing
// (kernels::packed_weight_bytes) the loaded model uses, so `tessera plan` and `tessera
// serve` size the KV pool alike. model_size_test.cpp holds the two to equality.

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "loader/model_config.h"
#include "tensor/dtype.h"

namespace tessera::planner {

// One rank's place in the launch, as the model sees it.
struct RankPlace {
    int tp_rank = 0;
    int tp_size = 1;
    int pp_rank = 0;
    int pp_size = 1;
    std::optional<std::string> layer_partition;  // SGLANG_PP_LAYER_PARTITION
    int ep_rank = 0;
    int ep_size = 1;
    int moe_tp_rank = 0;
    int moe_tp_size = 1;  // tp / ep
    // DP-attention: attention (and its KV) split over the attention-TP group only, the
    // embedding whole on every rank, and the LM head over the attention-TP group under
    // --enable-dp-lm-head (models/decoder.cpp).
    int attn_tp_rank = 0;
    int attn_tp_size = 0;  // 0: the TP group
    bool dp_attention = false;
    bool dp_lm_head = false;
    bool dense_mlp_replicated = false;  // --moe-dense-tp-size 1
    bool moe_all_to_all = false;        // --moe-a2a-backend all_to_all
    int num_redundant_experts = 0;
};

// The element types a load would use (models/registry.cpp resolve_compute_dtype and the
// Decoder's linear type), derived from the flags and config.json.
struct WeightTypes {
    DType compute = DType::kBF16;    // activations, logits head, MLA's absorbed slices
    DType linear = DType::kBF16;     // projections and experts: compute, or fp8
    DType embedding = DType::kBF16;  // as stored (f16 widened to f32)
    std::int64_t fp8_block_n = 0;  // block-quantized fp8: the scale tile (0: per-row / per-tensor scales)
    std::int64_t fp8_block_k = 0;
    DType kv = DType::kBF16;
};

// `dtype`, `quantization` and `kv_cache_dtype` as the flags give them ("auto", "", ...).
StatusOr<WeightTypes> weight_types(const loader::ModelConfig& config, const std::string& dtype,
                                   const std::string& quantization, const std::string& kv_cache_dtype);

struct RankSize {
    std::int64_t weight_bytes = 0;        // what the model's weight_bytes() reports
    std::int64_t kv_bytes_per_token = 0;  // the KV pool's cell size over the stage's layers
    // What one token reads of them: the embedding gives one row, a MoE layer only its top-k
    // experts (the cost model's decode bytes).
    std::int64_t embedding_bytes = 0;
    std::int64_t lm_head_bytes = 0;     // read once per sequence in prefill (the last position's logits)
    std::int64_t expert_bytes = 0;      // one local expert's slice
    std::int64_t moe_layers = 0;        // of the stage
    std::int64_t experts_per_rank = 0;  // physical experts per MoE layer on this rank
    // The shared experts this rank holds: a TP slice that runs on every token the MoE sees,
    // or, whole on every rank (all_to_all), all of them for the tokens this rank owns.
    std::int64_t shared_expert_bytes = 0;
    bool shared_experts_whole = false;
    // The dense layers' MLPs this rank holds. Under DP-attention a TP-split one (not
    // --moe-dense-tp-size 1) runs on every DP group's gathered tokens, and so does a TP-split
    // LM head (without --enable-dp-lm-head).
    std::int64_t dense_mlp_bytes = 0;
    bool dense_mlp_gathered = false;
    bool lm_head_gathered = false;
    int first_layer = 0;
    int end_layer = 0;
};

// Fails, naming the flag, where the model would refuse the split (heads, intermediate
// sizes, experts).
StatusOr<RankSize> rank_size(const loader::ModelConfig& config, const RankPlace& place, const WeightTypes& types);

}  // namespace tessera::planner
