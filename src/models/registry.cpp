// models/registry.cpp — the one table from config.json's architectures[0] to the config
// semantics (loader::ModelFamily) and the builder of its model file; load_model reads the
// config, picks the builder and loads the weights (SGLang's models/registry.py).
#include <string>
#include <vector>

#include "base/logging.h"
#include "loader/weight_source.h"
#include "models/architectures.h"
#include "models/model.h"

namespace tessera::models {

namespace {

struct Architecture {
    loader::ArchitectureFamily name;
    ModelBuilder build;
};

constexpr Architecture kArchitectures[] = {
    {{"LlamaForCausalLM", loader::ModelFamily::kLlama}, build_llama},
    {{"Qwen2ForCausalLM", loader::ModelFamily::kQwen2}, build_llama},
    {{"Qwen3ForCausalLM", loader::ModelFamily::kQwen3}, build_llama},
    {{"Qwen3MoeForCausalLM", loader::ModelFamily::kQwen3Moe}, build_qwen_moe},
    {{"Qwen2MoeForCausalLM", loader::ModelFamily::kQwen2Moe}, build_qwen_moe},
    {{"MixtralForCausalLM", loader::ModelFamily::kMixtral}, build_mixtral},
    {{"DeepseekV2ForCausalLM", loader::ModelFamily::kDeepseekV2}, build_deepseek_v2},
    {{"DeepseekV3ForCausalLM", loader::ModelFamily::kDeepseekV2}, build_deepseek_v2},
};

const std::vector<loader::ArchitectureFamily>& known_architectures() {
    static const std::vector<loader::ArchitectureFamily> names = [] {
        std::vector<loader::ArchitectureFamily> v;
        for (const auto& a : kArchitectures) v.push_back(a.name);
        return v;
    }();
    return names;
}

StatusOr<DType> resolve_compute_dtype(const std::string& requested, const loader::WeightSource& source) {
    if (requested == "auto") {
        // f16 checkpoints compute in f32: there is no f16 kernel path.
        return source.dominant_dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
    }
    auto d = parse_dtype(requested);
    if (!d || *d == DType::kF16) {
        return Status::InvalidArgument("--dtype " + requested + " is not a compute weight type; use auto, f32 or bf16");
    }
    return *d;
}

}  // namespace

StatusOr<DType> resolve_kv_cache_dtype(const std::string& requested, DType compute_dtype) {
    // SGLang's --kv-cache-dtype auto: the model's compute type.
    if (requested == "auto" || requested.empty()) return compute_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
    if (requested == "bf16" || requested == "bfloat16") return DType::kBF16;
    if (requested == "fp8_e4m3") return DType::kF8E4M3;
    if (requested == "fp8_e5m2") return DType::kF8E5M2;
    return Status::InvalidArgument("--kv-cache-dtype " + requested +
                                   " is not supported: tessera stores auto (the model's dtype), bf16, fp8_e4m3 or "
                                   "fp8_e5m2");
}

StatusOr<loader::ModelConfig> read_model_config(const std::string& model_path, std::string_view override_json) {
    return loader::load_model_config(model_path, known_architectures(), override_json);
}

std::vector<std::string> supported_architectures() {
    std::vector<std::string> names;
    for (const auto& a : kArchitectures) names.emplace_back(a.name.architecture);
    return names;
}

StatusOr<std::unique_ptr<Model>> load_model(const LoadOptions& options) {
    TSR_ASSIGN_OR_RETURN(auto config, loader::load_model_config(options.model_path, known_architectures(),
                                                                options.json_model_override_args));
    config.is_generation = !options.is_embedding;
    if (options.return_routed_experts && !config.is_moe())
        return Status::InvalidArgument("--enable-return-routed-experts needs a MoE model; " + config.architecture +
                                       " has no routed experts");
    if (!options.quantization.empty() && options.quantization != "fp8")
        return Status::InvalidArgument("--quantization " + options.quantization +
                                       " is not supported: tessera runs fp8 (e4m3, block-wise) and unquantized weights");
    std::pair<std::int64_t, std::int64_t> fp8_block{0, 0};
    if (config.fp8) fp8_block = {config.fp8->block_n, config.fp8->block_k};
    std::unique_ptr<loader::WeightSource> source;
    if (options.load_format == "dummy") {
        if (config.fp8)
            return Status::Unimplemented("--load-format dummy with an FP8 checkpoint's config.json is not implemented; "
                                         "remove its quantization_config (--quantization fp8 quantizes dummy weights)");
        // The config's dtype; f16 as bf16, which tessera computes in (an f16 checkpoint runs in f32).
        const bool f16 = config.torch_dtype == DType::kF16;
        const DType dtype = config.torch_dtype && !f16 ? *config.torch_dtype : DType::kBF16;
        const bool tied = config.tie_word_embeddings;
        const auto present = [tied](const std::string& name) { return name != "lm_head.weight" || !tied; };
        source = loader::WeightSource::dummy(options.model_path, dtype, present);
        TSR_LOG_C(INFO, "loader", "--load-format dummy: random {} weights from config.json (no checkpoint is read)",
                  dtype_name(dtype));
    } else {
        TSR_ASSIGN_OR_RETURN(source, loader::WeightSource::open(options.model_path, fp8_block));
    }
    TSR_ASSIGN_OR_RETURN(DType dtype, resolve_compute_dtype(options.dtype, *source));
    TSR_RETURN_IF_ERROR(resolve_kv_cache_dtype(options.kv_cache_dtype, dtype).status());
    if (config.fp8) {
        TSR_LOG_C(INFO, "loader", "fp8 checkpoint: linear weights stay fp8 ({}), activations {}",
                  config.fp8->block_n > 0 ? fmt::format("{} x {} blocks", config.fp8->block_n, config.fp8->block_k)
                                          : std::string("per-tensor / per-row scales"),
                  dtype_name(dtype));
    } else if (options.quantization == "fp8") {
        TSR_LOG_C(INFO, "loader", "--quantization fp8: linear weights quantized to fp8 e4m3 in 128 x 128 blocks at load");
    }
    if (config.is_moe()) {
        TSR_LOG_C(INFO, "loader", "loading {} ({} layers, hidden {}, vocab {}, {} experts top-{}) with {} weights",
                  config.architecture, config.num_hidden_layers, config.hidden_size, config.vocab_size,
                  config.moe.num_experts, config.moe.num_experts_per_tok, dtype_name(dtype));
    } else {
        TSR_LOG_C(INFO, "loader", "loading {} ({} layers, hidden {}, vocab {}) with {} weights", config.architecture,
                  config.num_hidden_layers, config.hidden_size, config.vocab_size, dtype_name(dtype));
    }
    if (options.tp_size > 1 && options.tp_group == nullptr)
        return Status::Internal("tensor parallel load without a TP process group");
    for (const auto& a : kArchitectures)
        if (config.architecture == a.name.architecture) return a.build(config, *source, dtype, options);
    return Status::Internal("architecture " + config.architecture + " has no builder");
}

}  // namespace tessera::models
