#pragma once
// layers/moe_router.h — which experts a token goes to, and with what weights, from its
// router logits (SGLang's layers/moe/topk.py: fused_topk, grouped_topk,
// biased_grouped_topk_impl; Hugging Face's Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock,
// DeepseekV3TopkRouter):
//   scores = softmax(logits) or sigmoid(logits), in f32;
//   greedy: the top-k scores;
//   group-limited: experts split into n_group contiguous groups, a group scores its best
//     expert (noaux_tc: the sum of its two best bias-corrected scores), only the top
//     topk_group groups compete;
//   noaux_tc: selection on scores + e_score_correction_bias, weights the unbiased scores;
//   then optional renormalisation over the k chosen, then
//   × routed_scaling_factor.
// Ties go to the lower expert id (torch.topk's order on CPU). Pure; thread-safe.

#include <cstdint>

#include "loader/model_config.h"

namespace tessera::layers {

struct RouterConfig {
    std::int64_t num_experts = 0;
    std::int64_t top_k = 0;
    loader::ScoringFunc scoring = loader::ScoringFunc::kSoftmax;
    loader::TopkMethod method = loader::TopkMethod::kGreedy;
    std::int64_t n_group = 1;
    std::int64_t topk_group = 1;
    bool renormalize = false;
    double routed_scaling_factor = 1.0;

    static RouterConfig from(const loader::MoeConfig& moe);
};

// logits f32 [n_tokens, num_experts] → ids I32 [n_tokens, top_k] (best first) and weights
// f32 [n_tokens, top_k]. `correction_bias` f32 [num_experts] for noaux_tc, else nullptr.
void route_tokens(const float* logits, std::int64_t n_tokens, const RouterConfig& config,
                  const float* correction_bias, std::int32_t* ids, float* weights);

}  // namespace tessera::layers
