#include <string>

#include "base/logging.h"
#include "loader/weight_source.h"
#include "models/dense_decoder.h"
#include "models/model.h"

namespace tessera::models {

namespace {
StatusOr<DType> resolve_compute_dtype(const std::string& requested, const loader::WeightSource& source) {
    if (requested == "auto") {
        // f16 checkpoints compute in f32: there is no f16 kernel path.
        return source.dominant_dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
    }
    auto d = parse_dtype(requested);
    if (!d || *d == DType::kF16) {
        return Status::InvalidArgument("--dtype " + requested +
                                       " is not a compute weight type; use auto, f32 or bf16");
    }
    return *d;
}
}  // namespace

StatusOr<std::unique_ptr<Model>> load_model(const LoadOptions& options) {
    TSR_ASSIGN_OR_RETURN(auto config, loader::load_model_config(options.model_path));
    if (!config.is_dense()) {
        return Status::Unimplemented(options.model_path + "/config.json: architecture " +
                                     config.architecture +
                                     " can be generated with make-model but not run yet; runnable: "
                                     "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
    }
    TSR_ASSIGN_OR_RETURN(auto source, loader::WeightSource::open(options.model_path));
    TSR_ASSIGN_OR_RETURN(DType dtype, resolve_compute_dtype(options.dtype, *source));
    TSR_LOG_C(INFO, "loader", "loading {} ({} layers, hidden {}, vocab {}) with {} weights",
              config.architecture, config.num_hidden_layers, config.hidden_size, config.vocab_size,
              dtype_name(dtype));
    if (options.tp_size > 1 && options.tp_group == nullptr)
        return Status::Internal("tensor parallel load without a TP process group");
    return load_dense_decoder(config, *source, dtype, options);
}

}  // namespace tessera::models
