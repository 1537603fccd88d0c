#pragma once
// loader/model_config.h — the one parsed view of a model folder's config.json.
// Field names follow the Hugging Face configs. Immutable value; thread-safe.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace tessera::loader {

// Which config.json semantics apply; the model registry (models/registry.cpp) maps each
// architecture name to one of these and to the builder of its model.
enum class ModelFamily {
    kLlama,       // LlamaForCausalLM
    kQwen2,       // Qwen2ForCausalLM: bias on q/k/v
    kQwen3,       // Qwen3ForCausalLM: RMSNorm on q and k per head
    kQwen3Moe,    // Qwen3MoeForCausalLM: Qwen3 attention, softmax top-k experts
    kQwen2Moe,    // Qwen2MoeForCausalLM: Qwen2 attention, experts plus a sigmoid-gated shared expert
    kMixtral,     // MixtralForCausalLM: Llama attention, block_sparse_moe experts w1/w3/w2
    kDeepseekV2,  // DeepseekV2ForCausalLM / DeepseekV3ForCausalLM: MLA + DeepSeek MoE
};

struct ArchitectureFamily {
    const char* architecture;  // config.json architectures[0]
    ModelFamily family;
};

// How a MoE layer picks its experts (DeepSeek's names; Qwen and Mixtral are softmax greedy).
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };
enum class ScoringFunc { kSoftmax, kSigmoid };

// The MoE fields of every family, under one set of names. num_experts == 0: a dense model.
struct MoeConfig {
    std::int64_t num_experts = 0;             // routed experts (num_experts / num_local_experts / n_routed_experts)
    std::int64_t num_experts_per_tok = 0;     // top-k
    std::int64_t moe_intermediate_size = 0;   // per routed expert
    bool norm_topk_prob = false;              // renormalise the top-k weights to sum to 1
    ScoringFunc scoring_func = ScoringFunc::kSoftmax;
    TopkMethod topk_method = TopkMethod::kGreedy;
    std::int64_t n_group = 1;                 // expert groups (group-limited routing)
    std::int64_t topk_group = 1;              // groups kept per token
    double routed_scaling_factor = 1.0;       // multiplies the routed weights
    bool e_score_correction_bias = false;     // noaux_tc: a per-expert bias used for selection only
    // Shared experts: Qwen2-MoE has one of width shared_expert_intermediate_size behind a
    // sigmoid gate; DeepSeek has n_shared_experts of width moe_intermediate_size, ungated.
    std::int64_t shared_expert_intermediate_size = 0;  // 0: none
    bool shared_expert_gate = false;
    // Which layers are MoE (the others use a dense MLP of intermediate_size).
    std::int64_t decoder_sparse_step = 1;     // Qwen: layer i is MoE iff (i + 1) % step == 0
    std::vector<std::int64_t> mlp_only_layers;
    std::int64_t first_k_dense_replace = 0;   // DeepSeek: the first k layers are dense
    std::int64_t moe_layer_freq = 1;          // DeepSeek: MoE every freq layers after those
};

struct RopeScaling {
    std::string type;  // "" (none), "linear", "llama3", "yarn"
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    std::int64_t original_max_position_embeddings = 0;
    // yarn (DeepSeek): the frequency ramp's bounds and the magnitude factors.
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    double mscale = 1.0;
    double mscale_all_dim = 0.0;
};

// DeepSeek's multi-head latent attention (kv_lora_rank > 0): K and V come from one cached
// latent of kv_lora_rank values per token plus a rotary key of qk_rope_head_dim shared by
// every head.
struct MlaConfig {
    std::int64_t q_lora_rank = 0;  // 0: q_proj straight from the hidden state (V2-Lite)
    std::int64_t kv_lora_rank = 0;
    std::int64_t qk_nope_head_dim = 0;
    std::int64_t qk_rope_head_dim = 0;
    std::int64_t v_head_dim = 0;
};

// config.json quantization_config of an FP8 checkpoint (Hugging Face's FineGrainedFP8Config,
// SGLang's Fp8Config): weights are fp8 codes with `<prefix>.weight_scale_inv` multipliers per
// block_n × block_k tile, or, without weight_block_size, `<prefix>.weight_scale` per tensor or
// per row. Activations stay bf16 / f32 on CPU (activation_scheme is read, not used).
struct Fp8Quantization {
    std::int64_t block_n = 0;  // 0: no block scales
    std::int64_t block_k = 0;
    std::string activation_scheme = "dynamic";
};

// generation_config.json's recommended sampling values, those the file sets (SGLang's
// model_config.py get_default_sampling_params).
struct SamplingDefaults {
    std::optional<double> temperature, top_p, min_p, repetition_penalty;
    std::optional<std::int64_t> top_k;
};

struct ModelConfig {
    std::string architecture;  // architectures[0]
    std::string model_type;    // "" when config.json has none
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
    SamplingDefaults sampling_defaults;        // generation_config.json
    MoeConfig moe;
    MlaConfig mla;
    std::optional<Fp8Quantization> fp8;  // set for an FP8 checkpoint
    // Matryoshka embeddings (config.json's matryoshka_dimensions, is_matryoshka): the output
    // sizes an embedding request's `dimensions` may ask for; any size when the list is empty
    // and is_matryoshka is set (SGLang's ModelConfig).
    std::vector<std::int64_t> matryoshka_dimensions;
    bool is_matryoshka = false;
    // false under --is-embedding: the last stage returns each sequence's pooled hidden state
    // instead of logits (SGLang's ModelConfig.is_generation). Set by the loader, not read.
    bool is_generation = true;

    bool is_moe() const { return moe.num_experts > 0; }
    bool is_mla() const { return mla.kv_lora_rank > 0; }
    // The dimensions RoPE rotates: every head dim, or MLA's rope part.
    std::int64_t rope_dim() const { return is_mla() ? mla.qk_rope_head_dim : head_dim; }
    // The softmax scale of attention: head_dim^-1/2 (MLA: (nope + rope)^-1/2), times
    // yarn's mscale(factor, mscale_all_dim)^2 where yarn applies.
    float attention_scale() const;
    // What yarn multiplies cos and sin by: mscale(factor, mscale) / mscale(factor, mscale_all_dim).
    float rope_magnitude() const;
    // Hugging Face's rule per family (Qwen*MoeDecoderLayer, DeepseekV2DecoderLayer).
    bool is_moe_layer(std::int64_t layer) const;
};

// Reads <model_dir>/config.json (and generation_config.json for eos ids when present).
// `known` lists the runnable architectures (the model registry's table); another one fails
// naming them. Errors name the file and the field.
// `override_json` (--json-model-override-args): a JSON object whose top-level fields replace
// config.json's before it is read, as SGLang's ModelConfig applies them with
// hf_config.update(); "" or "{}" for none.
StatusOr<ModelConfig> load_model_config(const std::string& model_dir, std::span<const ArchitectureFamily> known,
                                        std::string_view override_json = "");

// Rotary inverse frequencies f32 [rope_dim / 2] with rope_scaling folded in.
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace tessera::loader
