#pragma once
// models/dense_decoder.h — Llama, Qwen2 and Qwen3: pre-norm decoder layers of GQA attention
// with RoPE (Qwen2: bias on q/k/v; Qwen3: RMSNorm of q and k per head) and a SiLU-gated MLP.
// Immutable after load; forward() is called by one thread at a time per KvCache.

#include <memory>

#include "loader/weight_source.h"
#include "models/model.h"

namespace tessera::models {

// Under tensor parallelism (options.tp_size > 1) the layers are split as
// layers/tensor_parallel.h describes; forward() then issues, per layer, one all_reduce after
// o_proj and one after down_proj, one for the embedding and one all_gather of the logits.
// Under pipeline parallelism (options.pp_size > 1) it keeps only its stage's layers
// (dist::pp_layer_range), the embedding only on the first stage and the final norm and LM head
// only on the last; the embedding collective then happens on the first stage only, the
// logits gather on the last only.
StatusOr<std::unique_ptr<Model>> load_dense_decoder(const loader::ModelConfig& config,
                                                    const loader::WeightSource& source,
                                                    DType compute_dtype, const LoadOptions& options);

}  // namespace tessera::models
