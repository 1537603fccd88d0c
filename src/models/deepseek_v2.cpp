// DeepSeek-V2 / V3: MLA attention (not built yet) and the DeepSeek MoE block — routed
// experts with greedy, group-limited or noaux_tc routing, routed_scaling_factor, and
// n_shared_experts ungated shared experts (mlp.shared_experts) — which layers::MoeLayer
// implements (SGLang's models/deepseek_v2.py DeepseekV2MoE).
#include "models/architectures.h"
#include "models/decoder.h"

namespace tessera::models {

StatusOr<std::unique_ptr<Model>> build_deepseek_v2(const loader::ModelConfig& config, const loader::WeightSource&,
                                                   DType, const LoadOptions&) {
    return Status::Unimplemented(config.architecture +
                                 ": MLA attention is not implemented yet (its MoE block is); runnable MoE models: "
                                 "Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, MixtralForCausalLM");
}

}  // namespace tessera::models
