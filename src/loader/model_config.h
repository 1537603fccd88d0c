#pragma once
// loader/model_config.h — the one parsed view of a model folder's config.json.
// Field names follow the Hugging Face configs. Immutable value; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace tessera::loader {

enum class ModelFamily {
    kLlama,       // LlamaForCausalLM
    kQwen2,       // Qwen2ForCausalLM: bias on q/k/v
    kQwen3,       // Qwen3ForCausalLM: RMSNorm on q and k per head
    kQwen3Moe,    // Qwen3MoeForCausalLM (parsed; running it is a later capability)
    kDeepseekV2,  // DeepseekV2ForCausalLM / DeepseekV3ForCausalLM (parsed only, for now)
};

struct RopeScaling {
    std::string type;  // "" (none), "linear", "llama3"
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    std::int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
    std::string architecture;  // architectures[0]
    ModelFamily family = ModelFamily::kLlama;
    std::int64_t hidden_size = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t num_hidden_layers = 0;
    std::int64_t num_attention_heads = 0;
    std::int64_t num_key_value_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t vocab_size = 0;
    std::int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v carry a bias
    bool qk_norm = false;
    std::optional<DType> torch_dtype;
    std::optional<std::int32_t> bos_token_id;
    std::vector<std::int32_t> eos_token_ids;  // config.json, else generation_config.json

    bool is_dense() const {
        return family == ModelFamily::kLlama || family == ModelFamily::kQwen2 ||
               family == ModelFamily::kQwen3;
    }
};

// Reads <model_dir>/config.json (and generation_config.json for eos ids when present).
// Errors name the file and the field.
StatusOr<ModelConfig> load_model_config(const std::string& model_dir);

// Rotary inverse frequencies f32 [head_dim / 2] with rope_scaling folded in.
std::vector<float> rope_inv_freq(const ModelConfig& config);

std::vector<std::string> supported_architectures();

}  // namespace tessera::loader
