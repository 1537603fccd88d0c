// Llama, Qwen2 and Qwen3 (dense): GQA attention (Qwen2: q/k/v bias; Qwen3: per-head q/k
// RMSNorm) and a gated MLP in every layer. SGLang's models/llama.py, qwen2.py, qwen3.py.
#include "models/architectures.h"
#include "models/decoder.h"

namespace tessera::models {

StatusOr<std::unique_ptr<Model>> build_llama(const loader::ModelConfig& config, const loader::WeightSource& source,
                                             DType dtype, const LoadOptions& options) {
    DecoderSpec spec;
    spec.qkv_bias = config.attention_bias;
    spec.qk_norm = config.family == loader::ModelFamily::kQwen3;
    return load_decoder(config, source, dtype, options, spec);
}

}  // namespace tessera::models
