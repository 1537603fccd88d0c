// Mixtral: Llama attention, every layer a block_sparse_moe of experts w1 (gate), w3 (up),
// w2 (down); softmax over all experts, top-k, always renormalised. SGLang's models/mixtral.py.
#include "models/architectures.h"
#include "models/decoder.h"

namespace tessera::models {

StatusOr<std::unique_ptr<Model>> build_mixtral(const loader::ModelConfig& config, const loader::WeightSource& source,
                                               DType dtype, const LoadOptions& options) {
    DecoderSpec spec;
    spec.qkv_bias = config.attention_bias;
    spec.moe = [](const loader::ModelConfig& c, int layer) {
        layers::MoeSpec s = standard_moe_spec(c, layer, "block_sparse_moe.");
        s.experts.gate = "w1";
        s.experts.up = "w3";
        s.experts.down = "w2";
        return s;
    };
    return load_decoder(config, source, dtype, options, spec);
}

}  // namespace tessera::models
