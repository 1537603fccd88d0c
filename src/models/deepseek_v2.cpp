// DeepSeek-V2 / V3: multi-head latent attention (layers/mla_attention.h) with yarn rope
// scaling, dense MLP on the first first_k_dense_replace layers, then the DeepSeek MoE block:
// routed experts with greedy, group-limited or noaux_tc routing, routed_scaling_factor, and
// n_shared_experts ungated shared experts (mlp.shared_experts). SGLang's models/deepseek_v2.py.
#include "models/architectures.h"
#include "models/decoder.h"

namespace tessera::models {

StatusOr<std::unique_ptr<Model>> build_deepseek_v2(const loader::ModelConfig& config, const loader::WeightSource& source,
                                                   DType dtype, const LoadOptions& options) {
    DecoderSpec spec;
    spec.mla = true;
    spec.moe = [](const loader::ModelConfig& c, int layer) {
        layers::MoeSpec s = standard_moe_spec(c, layer, "mlp.");
        s.shared = "shared_experts";
        return s;
    };
    return load_decoder(config, source, dtype, options, spec);
}

}  // namespace tessera::models
