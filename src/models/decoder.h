#pragma once
// models/decoder.h — the pre-norm decoder every supported architecture is made of:
//   x = embed(tokens)                                   (first pipeline stage)
//   per layer: x += attention(rms_norm(x)); x += ffn(rms_norm(x))
//   logits = lm_head(rms_norm(x))                       (last pipeline stage)
// with ffn a dense gated MLP or the MoE block, layer by layer. An architecture file says
// only what differs (tensor names, q/k norm, biases, which layers are MoE) in a DecoderSpec.
// Under PP it keeps only its stage's layers (dist::pp_layer_range). Immutable after load;
// forward() is called by one thread at a time.

#include <functional>
#include <memory>
#include <string>

#include "layers/moe.h"
#include "loader/weight_source.h"
#include "models/model.h"

namespace tessera::models {

struct DecoderSpec {
    bool qkv_bias = false;
    bool qk_norm = false;
    bool mla = false;  // DeepSeek's latent attention instead of GQA
    // The MoE block of layer `layer` (its `prefix` and names), for layers config.is_moe_layer.
    std::function<layers::MoeSpec(const loader::ModelConfig& config, int layer)> moe;
};

StatusOr<std::unique_ptr<Model>> load_decoder(const loader::ModelConfig& config, const loader::WeightSource& source,
                                              DType compute_dtype, const LoadOptions& options,
                                              const DecoderSpec& spec);

// The MoE block most checkpoints share: <prefix>gate, <prefix>experts.{e}.{gate,up,down}_proj,
// routing from the config (Qwen3-MoE, Qwen2-MoE, DeepSeek name their tensors this way).
layers::MoeSpec standard_moe_spec(const loader::ModelConfig& config, int layer, const std::string& block);

}  // namespace tessera::models
