// Qwen3-MoE (Qwen3 attention with q/k norms) and Qwen2-MoE (q/k/v bias, a shared expert
// behind a sigmoid gate): softmax top-k routing over mlp.experts, dense MLP on the layers
// mlp_only_layers / decoder_sparse_step leave out. SGLang's models/qwen3_moe.py,
// qwen2_moe.py.
#include "models/architectures.h"
#include "models/decoder.h"

namespace tessera::models {

StatusOr<std::unique_ptr<Model>> build_qwen_moe(const loader::ModelConfig& config, const loader::WeightSource& source,
                                                DType dtype, const LoadOptions& options) {
    DecoderSpec spec;
    spec.qkv_bias = config.attention_bias;
    spec.qk_norm = config.family == loader::ModelFamily::kQwen3Moe;
    spec.moe = [](const loader::ModelConfig& c, int layer) { return standard_moe_spec(c, layer, "mlp."); };
    return load_decoder(config, source, dtype, options, spec);
}

}  // namespace tessera::models
