#include "loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/logging.h"

namespace tessera::loader {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

StatusOr<json> read_json(const fs::path& path) {
    std::ifstream in(path);
    if (!in) return Status::NotFound(path.string() + ": cannot open");
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        return Status::InvalidArgument(path.string() + ": not valid JSON: " + e.what());
    }
}

// Reads an integer field; `required` fields must be present and positive.
Status read_int(const json& j, const std::string& file, const char* key, std::int64_t* out,
                bool required) {
    if (!j.contains(key) || j[key].is_null()) {
        if (required) return Status::InvalidArgument(file + ": missing field \"" + key + "\"");
        return Status::Ok();
    }
    if (!j[key].is_number_integer())
        return Status::InvalidArgument(file + ": field \"" + key + "\" must be an integer");
    *out = j[key].get<std::int64_t>();
    if (required && *out <= 0)
        return Status::InvalidArgument(file + ": field \"" + key + "\" must be positive, got " +
                                       std::to_string(*out));
    return Status::Ok();
}

std::vector<std::int32_t> read_token_ids(const json& v) {
    std::vector<std::int32_t> ids;
    if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
    if (v.is_array())
        for (const auto& e : v)
            if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
    return ids;
}

// A field that must be a number when present (`fallback` when absent or null).
StatusOr<double> read_number(const json& j, const std::string& file, const char* key, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) return Status::InvalidArgument(file + ": field \"" + key + "\" must be a number");
    return j[key].get<double>();
}

// The MoE fields of each family under the names of loader::MoeConfig (Hugging Face's
// Qwen3MoeConfig, Qwen2MoeConfig, MixtralConfig, DeepseekV2Config / DeepseekV3Config).
Status read_moe(const json& j, const std::string& file, ModelConfig& c) {
    MoeConfig& m = c.moe;
    const auto positive = [&](const char* key, std::int64_t* out) { return read_int(j, file, key, out, true); };
    switch (c.family) {
        case ModelFamily::kLlama:
        case ModelFamily::kQwen2:
        case ModelFamily::kQwen3:
            return Status::Ok();
        case ModelFamily::kQwen3Moe:
        case ModelFamily::kQwen2Moe:
            TSR_RETURN_IF_ERROR(positive("num_experts", &m.num_experts));
            TSR_RETURN_IF_ERROR(positive("moe_intermediate_size", &m.moe_intermediate_size));
            m.norm_topk_prob = j.value("norm_topk_prob", false);
            TSR_RETURN_IF_ERROR(read_int(j, file, "decoder_sparse_step", &m.decoder_sparse_step, false));
            if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
                for (const auto& l : j["mlp_only_layers"]) m.mlp_only_layers.push_back(l.get<std::int64_t>());
            if (c.family == ModelFamily::kQwen2Moe) {
                TSR_RETURN_IF_ERROR(read_int(j, file, "shared_expert_intermediate_size",
                                             &m.shared_expert_intermediate_size, false));
                m.shared_expert_gate = m.shared_expert_intermediate_size > 0;
            }
            break;
        case ModelFamily::kMixtral:
            m.num_experts = 8;
            TSR_RETURN_IF_ERROR(read_int(j, file, "num_local_experts", &m.num_experts, false));
            m.moe_intermediate_size = c.intermediate_size;  // Mixtral's intermediate_size is per expert
            m.norm_topk_prob = true;                        // MixtralSparseMoeBlock always renormalises
            break;
        case ModelFamily::kDeepseekV2: {
            TSR_RETURN_IF_ERROR(positive("n_routed_experts", &m.num_experts));
            TSR_RETURN_IF_ERROR(positive("moe_intermediate_size", &m.moe_intermediate_size));
            m.norm_topk_prob = j.value("norm_topk_prob", false);
            std::int64_t shared = 0;
            TSR_RETURN_IF_ERROR(read_int(j, file, "n_shared_experts", &shared, false));
            m.shared_expert_intermediate_size = shared * m.moe_intermediate_size;
            TSR_RETURN_IF_ERROR(read_int(j, file, "first_k_dense_replace", &m.first_k_dense_replace, false));
            TSR_RETURN_IF_ERROR(read_int(j, file, "moe_layer_freq", &m.moe_layer_freq, false));
            TSR_RETURN_IF_ERROR(read_int(j, file, "n_group", &m.n_group, false));
            TSR_RETURN_IF_ERROR(read_int(j, file, "topk_group", &m.topk_group, false));
            TSR_ASSIGN_OR_RETURN(m.routed_scaling_factor, read_number(j, file, "routed_scaling_factor", 1.0));
            const std::string scoring = j.value("scoring_func", std::string("softmax"));
            if (scoring != "softmax" && scoring != "sigmoid")
                return Status::InvalidArgument(file + ": scoring_func \"" + scoring + "\" is not softmax or sigmoid");
            m.scoring_func = scoring == "sigmoid" ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
            // A missing topk_method is greedy (DeepSeek's remote code defaults to a misspelt
            // "gready" that no branch matches, i.e. plain top-k).
            const std::string method = j.contains("topk_method") && j["topk_method"].is_string()
                                           ? j["topk_method"].get<std::string>()
                                           : "greedy";
            if (method == "greedy" || method == "gready") {
                m.topk_method = TopkMethod::kGreedy;
            } else if (method == "group_limited_greedy") {
                m.topk_method = TopkMethod::kGroupLimitedGreedy;
            } else if (method == "noaux_tc") {
                m.topk_method = TopkMethod::kNoauxTc;
                m.e_score_correction_bias = true;
            } else {
                return Status::InvalidArgument(file + ": topk_method \"" + method +
                                               "\" is not greedy, group_limited_greedy or noaux_tc");
            }
            break;
        }
    }
    TSR_RETURN_IF_ERROR(positive("num_experts_per_tok", &m.num_experts_per_tok));
    if (m.num_experts_per_tok > m.num_experts)
        return Status::InvalidArgument(file + ": num_experts_per_tok (" + std::to_string(m.num_experts_per_tok) +
                                       ") exceeds the " + std::to_string(m.num_experts) + " experts");
    if (m.decoder_sparse_step < 1 || m.moe_layer_freq < 1)
        return Status::InvalidArgument(file + ": decoder_sparse_step and moe_layer_freq must be at least 1");
    if (m.n_group < 1 || m.num_experts % m.n_group != 0 || m.topk_group < 1 || m.topk_group > m.n_group)
        return Status::InvalidArgument(file + ": n_group (" + std::to_string(m.n_group) + ") must divide the " +
                                       std::to_string(m.num_experts) + " experts and topk_group (" +
                                       std::to_string(m.topk_group) + ") must be in [1, n_group]");
    if (m.topk_method != TopkMethod::kGreedy &&
        m.num_experts_per_tok > m.topk_group * (m.num_experts / m.n_group))
        return Status::InvalidArgument(file + ": num_experts_per_tok exceeds the experts of topk_group groups");
    return Status::Ok();
}

// DeepseekV2Config / DeepseekV3Config's attention fields.
Status read_mla(const json& j, const std::string& file, ModelConfig& c) {
    MlaConfig& m = c.mla;
    TSR_RETURN_IF_ERROR(read_int(j, file, "q_lora_rank", &m.q_lora_rank, false));
    TSR_RETURN_IF_ERROR(read_int(j, file, "kv_lora_rank", &m.kv_lora_rank, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "qk_nope_head_dim", &m.qk_nope_head_dim, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "qk_rope_head_dim", &m.qk_rope_head_dim, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "v_head_dim", &m.v_head_dim, true));
    if (m.q_lora_rank < 0) return Status::InvalidArgument(file + ": q_lora_rank must be null or positive");
    if (m.qk_rope_head_dim % 2 != 0)
        return Status::InvalidArgument(file + ": qk_rope_head_dim must be even, got " +
                                       std::to_string(m.qk_rope_head_dim));
    if (j.value("attention_bias", false))
        return Status::Unimplemented(file + ": attention_bias on MLA projections is not supported");
    c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    return Status::Ok();
}

// yarn_get_mscale of DeepSeek's and Hugging Face's code.
double yarn_mscale(double factor, double mscale) {
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// SGLang's Fp8Config.from_config: a quant_method containing "fp8" is an fp8-serialized
// checkpoint; weight_block_size must have two entries. Other methods are refused here, before
// any weight is read.
Status read_quantization(const json& j, const std::string& file, ModelConfig& c) {
    if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return Status::Ok();
    const auto& q = j["quantization_config"];
    if (!q.is_object()) return Status::InvalidArgument(file + ": quantization_config must be an object");
    const std::string method = q.value("quant_method", std::string());
    if (method.find("fp8") == std::string::npos)
        return Status::Unimplemented(file + ": quantization_config.quant_method \"" + method +
                                     "\" is not supported; tessera loads fp8 checkpoints (quant_method \"fp8\") and "
                                     "unquantized ones");
    Fp8Quantization fp8;
    fp8.activation_scheme = q.value("activation_scheme", std::string("dynamic"));
    if (fp8.activation_scheme != "dynamic" && fp8.activation_scheme != "static")
        return Status::InvalidArgument(file + ": quantization_config.activation_scheme must be dynamic or static, got \"" +
                                       fp8.activation_scheme + "\"");
    if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
        const auto& b = q["weight_block_size"];
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
            b[0].get<std::int64_t>() <= 0 || b[1].get<std::int64_t>() <= 0)
            return Status::InvalidArgument(file + ": quantization_config.weight_block_size must be two positive "
                                                  "integers, e.g. [128, 128]");
        fp8.block_n = b[0].get<std::int64_t>();
        fp8.block_k = b[1].get<std::int64_t>();
        if (fp8.activation_scheme != "dynamic")
            return Status::InvalidArgument(file + ": block-wise fp8 (weight_block_size) needs activation_scheme "
                                                  "\"dynamic\", as SGLang requires");
    }
    c.fp8 = fp8;
    return Status::Ok();
}

}  // namespace

float ModelConfig::attention_scale() const {
    double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    if (rope_scaling.type == "yarn" && rope_scaling.mscale_all_dim != 0.0) {
        const double m = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
        scale *= m * m;
    }
    return static_cast<float>(scale);
}

float ModelConfig::rope_magnitude() const {
    if (rope_scaling.type != "yarn") return 1.0f;
    return static_cast<float>(yarn_mscale(rope_scaling.factor, rope_scaling.mscale) /
                              yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim));
}

bool ModelConfig::is_moe_layer(std::int64_t layer) const {
    if (!is_moe()) return false;
    switch (family) {
        case ModelFamily::kQwen3Moe:
        case ModelFamily::kQwen2Moe:
            return std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) ==
                       moe.mlp_only_layers.end() &&
                   (layer + 1) % moe.decoder_sparse_step == 0;
        case ModelFamily::kDeepseekV2:
            return layer >= moe.first_k_dense_replace && layer % moe.moe_layer_freq == 0;
        default:
            return true;
    }
}

StatusOr<ModelConfig> load_model_config(const std::string& model_dir, std::span<const ArchitectureFamily> known,
                                        std::string_view override_json) {
    const fs::path path = fs::path(model_dir) / "config.json";
    std::string file = path.string();
    if (!fs::exists(path)) return Status::NotFound(file + ": no config.json in the model folder");
    TSR_ASSIGN_OR_RETURN(json j, read_json(path));
    if (!override_json.empty()) {
        const json overrides = json::parse(override_json, nullptr, false);
        if (!overrides.is_object())
            return Status::InvalidArgument("--json-model-override-args " + std::string(override_json) +
                                           ": not a JSON object");
        if (!overrides.empty()) {
            std::string keys;
            for (const auto& [key, value] : overrides.items()) {
                j[key] = value;
                keys += (keys.empty() ? "" : ", ") + key;
            }
            TSR_LOG_C(INFO, "loader", "config.json fields replaced by --json-model-override-args: {}", keys);
            file += " (with --json-model-override-args)";  // errors below may come from an override
        }
    }
    ModelConfig c;
    if (!j.contains("architectures") || !j["architectures"].is_array() ||
        j["architectures"].empty() || !j["architectures"][0].is_string()) {
        return Status::InvalidArgument(file + ": missing \"architectures\" list");
    }
    c.architecture = j["architectures"][0].get<std::string>();
    if (j.contains("model_type") && j["model_type"].is_string()) c.model_type = j["model_type"].get<std::string>();
    const auto entry = std::find_if(known.begin(), known.end(),
                                    [&](const ArchitectureFamily& a) { return c.architecture == a.architecture; });
    if (entry == known.end()) {
        std::string list;
        for (const auto& a : known) list += std::string(list.empty() ? "" : ", ") + a.architecture;
        return Status::Unimplemented(file + ": unsupported architecture " + c.architecture + "; supported: " + list);
    }
    c.family = entry->family;
    TSR_RETURN_IF_ERROR(read_int(j, file, "hidden_size", &c.hidden_size, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "intermediate_size", &c.intermediate_size, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "num_hidden_layers", &c.num_hidden_layers, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "num_attention_heads", &c.num_attention_heads, true));
    TSR_RETURN_IF_ERROR(read_int(j, file, "vocab_size", &c.vocab_size, true));
    c.num_key_value_heads = c.num_attention_heads;
    TSR_RETURN_IF_ERROR(read_int(j, file, "num_key_value_heads", &c.num_key_value_heads, false));
    c.max_position_embeddings = 4096;
    TSR_RETURN_IF_ERROR(
        read_int(j, file, "max_position_embeddings", &c.max_position_embeddings, false));
    c.head_dim = c.hidden_size / c.num_attention_heads;
    TSR_RETURN_IF_ERROR(read_int(j, file, "head_dim", &c.head_dim, false));
    if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
        return Status::InvalidArgument(file + ": num_attention_heads (" +
                                       std::to_string(c.num_attention_heads) +
                                       ") must be a multiple of num_key_value_heads (" +
                                       std::to_string(c.num_key_value_heads) + ")");
    }
    if (c.head_dim <= 0 || c.head_dim % 2 != 0)
        return Status::InvalidArgument(file + ": head_dim must be positive and even, got " +
                                       std::to_string(c.head_dim));
    if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number())
        c.rms_norm_eps = j["rms_norm_eps"].get<double>();
    if (j.contains("rope_theta") && j["rope_theta"].is_number())
        c.rope_theta = j["rope_theta"].get<double>();
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
        const json& rs = j["rope_scaling"];
        std::string type = rs.value("rope_type", rs.value("type", std::string()));
        if (type == "default") type = "";
        if (!type.empty() && type != "linear" && type != "llama3" && type != "yarn") {
            return Status::Unimplemented(file + ": rope_scaling type \"" + type +
                                         "\" is not supported yet (supported: linear, llama3, yarn)");
        }
        c.rope_scaling.type = type;
        c.rope_scaling.factor = rs.value("factor", 1.0);
        c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0);
        c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0);
        c.rope_scaling.original_max_position_embeddings =
            rs.value("original_max_position_embeddings", std::int64_t{type == "yarn" ? 4096 : 8192});
        c.rope_scaling.beta_fast = rs.value("beta_fast", 32.0);
        c.rope_scaling.beta_slow = rs.value("beta_slow", 1.0);
        c.rope_scaling.mscale = rs.value("mscale", 1.0);
        c.rope_scaling.mscale_all_dim = rs.value("mscale_all_dim", 0.0);
    }
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    c.attention_bias = c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen2Moe ||
                       j.value("attention_bias", false);
    c.qk_norm = c.family == ModelFamily::kQwen3 || c.family == ModelFamily::kQwen3Moe;
    TSR_RETURN_IF_ERROR(read_moe(j, file, c));
    if (c.family == ModelFamily::kDeepseekV2) TSR_RETURN_IF_ERROR(read_mla(j, file, c));
    TSR_RETURN_IF_ERROR(read_quantization(j, file, c));
    if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
        c.torch_dtype = parse_dtype(j["torch_dtype"].get<std::string>());
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
        c.bos_token_id = j["bos_token_id"].get<std::int32_t>();
    if (j.contains("eos_token_id")) c.eos_token_ids = read_token_ids(j["eos_token_id"]);
    if (const json& dims = j.value("matryoshka_dimensions", json()); dims.is_array()) {
        for (const json& d : dims) {
            if (!d.is_number_integer() || d.get<std::int64_t>() < 1)
                return Status::InvalidArgument(file +
                                               ": field \"matryoshka_dimensions\" must be a list of positive integers");
            c.matryoshka_dimensions.push_back(d.get<std::int64_t>());
        }
    }
    c.is_matryoshka = !c.matryoshka_dimensions.empty() || j.value("is_matryoshka", false);
    const fs::path gen_path = fs::path(model_dir) / "generation_config.json";
    if (fs::exists(gen_path)) {
        auto gen = read_json(gen_path);
        if (gen.ok() && gen->contains("eos_token_id")) {
            auto ids = read_token_ids((*gen)["eos_token_id"]);
            if (!ids.empty()) c.eos_token_ids = ids;
        }
        if (gen.ok()) {
            const auto number = [&](const char* key) {
                const json& v = gen->value(key, json());
                return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
            };
            SamplingDefaults& d = c.sampling_defaults;
            d.temperature = number("temperature");
            d.top_p = number("top_p");
            d.min_p = number("min_p");
            d.repetition_penalty = number("repetition_penalty");
            if (const auto k = number("top_k")) d.top_k = static_cast<std::int64_t>(*k);
        }
    }
    return c;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
    const std::int64_t dim = c.rope_dim();
    const std::int64_t half = dim / 2;
    std::vector<float> inv(static_cast<std::size_t>(half));
    for (std::int64_t i = 0; i < half; ++i) {
        // As the reference computes it: in f32, base^(2i/d).
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
        inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
    }
    const RopeScaling& rs = c.rope_scaling;
    if (rs.type == "linear") {
        for (auto& f : inv) f = static_cast<float>(f / rs.factor);
    } else if (rs.type == "yarn") {
        // DeepSeek's yarn_find_correction_range / yarn_linear_ramp_mask: dimensions that turn
        // more than beta_fast times over the original context keep their frequency, those
        // turning fewer than beta_slow times are slowed by `factor`, linear in between.
        const double d = static_cast<double>(dim);
        const double base = c.rope_theta;
        const auto correction_dim = [&](double rotations) {
            return d * std::log(static_cast<double>(rs.original_max_position_embeddings) / (rotations * 2.0 * M_PI)) /
                   (2.0 * std::log(base));
        };
        const double low = std::max(std::floor(correction_dim(rs.beta_fast)), 0.0);
        double high = std::min(std::ceil(correction_dim(rs.beta_slow)), d - 1.0);
        if (low == high) high += 0.001;
        for (std::int64_t i = 0; i < half; ++i) {
            const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
            inv[i] = static_cast<float>(inv[i] * ((1.0 - ramp) + ramp / rs.factor));
        }
    } else if (rs.type == "llama3") {
        // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
        const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
        const double low_wavelen = old_ctx / rs.low_freq_factor;
        const double high_wavelen = old_ctx / rs.high_freq_factor;
        for (auto& f : inv) {
            const double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = static_cast<float>(f / rs.factor);
            } else if (wavelen >= high_wavelen) {
                const double smooth =
                    (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
                f = static_cast<float>((1.0 - smooth) * f / rs.factor + smooth * f);
            }
        }
    }
    return inv;
}

}  // namespace tessera::loader
