#include "app/make_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/logging.h"
#include "loader/safetensors.h"
#include "tensor/fp8_blocks.h"
#include "tokenizer/gpt2_style.h"
#include "tensor/dtype.h"

#ifndef TSR_DEFAULT_TOKENIZER_ASSETS
#define TSR_DEFAULT_TOKENIZER_ASSETS ""
#endif

namespace tessera::app {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using loader::TensorToWrite;

// The shapes of one generated model. `small` dense models are Qwen3-0.6B's.
struct Dims {
    std::int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
    std::int64_t vocab = 0, max_positions = 0;
    // MoE
    std::int64_t experts = 0, experts_per_tok = 0, moe_intermediate = 0, shared_experts = 0;
    std::int64_t first_dense = 0;
    // MLA (DeepSeek-V2)
    std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
    std::int64_t n_group = 1, topk_group = 1;
};

bool is_deepseek(const std::string& arch) { return arch == "deepseek-v2" || arch == "deepseek-v3"; }

Dims dims_for(const std::string& arch, const std::string& preset) {
    Dims d;
    if (preset == "tiny") {
        // Odd-ish sizes on purpose: intermediate and vocab are not multiples of 16.
        d = {.hidden = 128, .intermediate = 344, .layers = 3, .heads = 4, .kv_heads = 2,
             .head_dim = 32, .vocab = 1000, .max_positions = 4096};
        d.experts = 8, d.experts_per_tok = 2, d.moe_intermediate = 96, d.shared_experts = 1;
        d.first_dense = 1;
        d.kv_lora_rank = 64, d.qk_nope_head_dim = 32, d.qk_rope_head_dim = 16, d.v_head_dim = 32;
        if (arch == "deepseek-v3") d.q_lora_rank = 48, d.n_group = 4, d.topk_group = 2;
        // V2's latent row 64 + 32 is a multiple of 32, so its bf16 decode takes the AVX-512
        // absorbed-attention kernel (V3's 64 + 16 keeps the f32 one).
        if (arch == "deepseek-v2") d.qk_rope_head_dim = 32;
    } else {
        d = {.hidden = 1024, .intermediate = 3072, .layers = 28, .heads = 16, .kv_heads = 8,
             .head_dim = 128, .vocab = 151936, .max_positions = 40960};
        d.experts = 32, d.experts_per_tok = 4, d.moe_intermediate = 384, d.shared_experts = 2;
        d.first_dense = 1;
        d.kv_lora_rank = 512, d.qk_nope_head_dim = 128, d.qk_rope_head_dim = 64, d.v_head_dim = 128;
        if (arch == "qwen3-moe" || arch == "qwen2-moe" || arch == "mixtral" || is_deepseek(arch)) d.layers = 8;
        if (arch == "mixtral") d.experts = 8, d.experts_per_tok = 2, d.moe_intermediate = 1024;
        if (arch == "deepseek-v3") d.q_lora_rank = 384, d.n_group = 8, d.topk_group = 4, d.shared_experts = 1;
        // Qwen2's config.json has no head_dim: readers take hidden / heads (Qwen2.5's 64).
        if (arch == "qwen2" || arch == "qwen2-moe") d.head_dim = d.hidden / d.heads;
    }
    return d;
}

// SplitMix64 + Box-Muller: the same seed gives the same weights on every machine.
class Normal {
 public:
    explicit Normal(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    double next() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        spare_ = r * std::sin(2.0 * M_PI * u2);
        has_spare_ = true;
        return r * std::cos(2.0 * M_PI * u2);
    }

 private:
    std::uint64_t bits() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    std::uint64_t state_;
    double spare_ = 0.0;
    bool has_spare_ = false;
};

class TensorWriter {
 public:
    // fp8_block > 0: projections are written as an FP8 checkpoint stores them (e4m3 codes and
    // f32 weight_scale_inv per fp8_block² tile), from the same random values as without it.
    TensorWriter(DType dtype, std::uint64_t seed, std::int64_t fp8_block = 0)
        : dtype_(dtype), normal_(seed), fp8_block_(fp8_block) {}

    // Gaussian values: mean + std · N(0, 1), plus offset[i] when given (one per value).
    void add(const std::string& name, std::vector<std::int64_t> shape, double std, double mean = 0.0,
             const std::vector<double>& offset = {}) {
        const std::vector<float> v = draw(shape, std, mean, offset);
        TensorToWrite t{name, dtype_, std::move(shape), {}};
        t.bytes.resize(v.size() * dtype_size(dtype_));
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (dtype_ == DType::kF32) {
                std::memcpy(t.bytes.data() + i * 4, &v[i], 4);
            } else {
                const std::uint16_t b = f32_to_bf16(v[i]);
                std::memcpy(t.bytes.data() + i * 2, &b, 2);
            }
        }
        tensors_.push_back(std::move(t));
    }
    // A norm weight: near 1, but not exactly, so a skipped norm shows up in the numerics.
    void norm(const std::string& name, std::int64_t n) { add(name, {n}, 0.05, 1.0); }
    // A projection [out, in] whose outputs keep roughly the scale of its inputs. Routers and
    // gates pass quantizable = false: FP8 checkpoints keep them unquantized.
    void linear(const std::string& name, std::int64_t out, std::int64_t in, double gain = 1.0,
                bool quantizable = true) {
        const double std = gain / std::sqrt(static_cast<double>(in));
        if (fp8_block_ == 0 || !quantizable) {
            add(name, {out, in}, std);
            return;
        }
        const std::vector<float> v = draw({out, in}, std, 0.0, {});
        const Fp8Blocks q = quantize_fp8_blocks(v.data(), out, in, DType::kF8E4M3, fp8_block_);
        TensorToWrite codes{name, DType::kF8E4M3, {out, in}, {}};
        codes.bytes.resize(q.codes.size());
        std::memcpy(codes.bytes.data(), q.codes.data(), q.codes.size());
        tensors_.push_back(std::move(codes));
        const std::int64_t scale_rows = (out + fp8_block_ - 1) / fp8_block_;
        TensorToWrite scales{name + "_scale_inv", DType::kF32, {scale_rows, q.scale_cols()}, {}};
        scales.bytes.resize(q.scales.size() * 4);
        std::memcpy(scales.bytes.data(), q.scales.data(), scales.bytes.size());
        tensors_.push_back(std::move(scales));
    }
    std::vector<TensorToWrite>& tensors() { return tensors_; }

 private:
    std::vector<float> draw(const std::vector<std::int64_t>& shape, double std, double mean,
                            const std::vector<double>& offset) {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        std::vector<float> v(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
            v[i] = static_cast<float>(mean + std * normal_.next() + (offset.empty() ? 0.0 : offset[i]));
        return v;
    }

    DType dtype_;
    Normal normal_;
    std::int64_t fp8_block_;
    std::vector<TensorToWrite> tensors_;
};

// Logits of std ≈ 5 keep greedy decoding far from ties, so it is stable across float
// reorderings and across f32 / bf16 kernels.
constexpr double kLogitStd = 5.0;
// Residual branches write back at half scale so the stream stays O(1) over many layers.
constexpr double kResidualGain = 1.0;

void add_embeddings(TensorWriter& w, const Dims& d, bool tied) {
    w.add("model.embed_tokens.weight", {d.vocab, d.hidden}, kLogitStd / std::sqrt(double(d.hidden)));
    w.norm("model.norm.weight", d.hidden);
    if (!tied) w.add("lm_head.weight", {d.vocab, d.hidden}, kLogitStd / std::sqrt(double(d.hidden)));
}

void add_dense_mlp(TensorWriter& w, const std::string& p, std::int64_t hidden, std::int64_t inter) {
    w.linear(p + "gate_proj.weight", inter, hidden);
    w.linear(p + "up_proj.weight", inter, hidden);
    w.linear(p + "down_proj.weight", hidden, inter, kResidualGain);
}

void add_gqa_attention(TensorWriter& w, const std::string& p, const Dims& d, bool bias, bool qk_norm) {
    w.linear(p + "q_proj.weight", d.heads * d.head_dim, d.hidden);
    w.linear(p + "k_proj.weight", d.kv_heads * d.head_dim, d.hidden);
    w.linear(p + "v_proj.weight", d.kv_heads * d.head_dim, d.hidden);
    if (bias) {
        w.add(p + "q_proj.bias", {d.heads * d.head_dim}, 0.1);
        w.add(p + "k_proj.bias", {d.kv_heads * d.head_dim}, 0.1);
        w.add(p + "v_proj.bias", {d.kv_heads * d.head_dim}, 0.1);
    }
    w.linear(p + "o_proj.weight", d.hidden, d.heads * d.head_dim, kResidualGain);
    if (qk_norm) {
        w.norm(p + "q_norm.weight", d.head_dim);
        w.norm(p + "k_norm.weight", d.head_dim);
    }
}

// The router gets a larger gain than a projection so that its softmax is peaked enough for
// top-k to be well separated, yet spreads tokens over all experts.
constexpr double kRouterGain = 3.0;

// The MoE block of `arch`: Qwen3-MoE (experts only), Qwen2-MoE (plus a sigmoid-gated shared
// expert), Mixtral (experts named w1/w3/w2), DeepSeek (plus ungated shared experts).
void add_moe(TensorWriter& w, const std::string& p, const Dims& d, const std::string& arch, double router_skew) {
    w.linear(p + "gate.weight", d.experts, d.hidden, kRouterGain, /*quantizable=*/false);
    for (std::int64_t e = 0; e < d.experts; ++e) {
        const std::string ep = p + "experts." + std::to_string(e) + ".";
        if (arch == "mixtral") {
            w.linear(ep + "w1.weight", d.moe_intermediate, d.hidden);
            w.linear(ep + "w3.weight", d.moe_intermediate, d.hidden);
            w.linear(ep + "w2.weight", d.hidden, d.moe_intermediate, kResidualGain);
        } else {
            add_dense_mlp(w, ep, d.hidden, d.moe_intermediate);
        }
    }
    if (is_deepseek(arch)) add_dense_mlp(w, p + "shared_experts.", d.hidden, d.shared_experts * d.moe_intermediate);
    // V3's noaux_tc selection bias: small next to the sigmoid scores, but it moves choices.
    // --router-skew s adds s·(E-1-e)/(E-1): low experts (and their groups) win most tokens, a
    // load EPLB has something to balance.
    if (arch == "deepseek-v3") {
        std::vector<double> skew(static_cast<std::size_t>(d.experts), 0.0);
        for (std::int64_t e = 0; e < d.experts && router_skew != 0.0; ++e)
            skew[e] = router_skew * static_cast<double>(d.experts - 1 - e) / static_cast<double>(d.experts - 1);
        w.add(p + "gate.e_score_correction_bias", {d.experts}, 0.1, 0.0, skew);
    }
    if (arch == "qwen2-moe") {
        add_dense_mlp(w, p + "shared_expert.", d.hidden, d.shared_experts * d.moe_intermediate);
        w.linear(p + "shared_expert_gate.weight", 1, d.hidden, 1.0, /*quantizable=*/false);
    }
}

// Qwen2-MoE's tiny model keeps layer 1 dense (mlp_only_layers), to exercise the rule.
std::vector<std::int64_t> mlp_only_layers(const std::string& arch, const std::string& preset) {
    if (arch == "qwen2-moe" && preset == "tiny") return {1};
    return {};
}

void add_mla_attention(TensorWriter& w, const std::string& p, const Dims& d) {
    const std::int64_t qk_head = d.qk_nope_head_dim + d.qk_rope_head_dim;
    if (d.q_lora_rank > 0) {
        w.linear(p + "q_a_proj.weight", d.q_lora_rank, d.hidden);
        w.norm(p + "q_a_layernorm.weight", d.q_lora_rank);
        w.linear(p + "q_b_proj.weight", d.heads * qk_head, d.q_lora_rank);
    } else {
        w.linear(p + "q_proj.weight", d.heads * qk_head, d.hidden);
    }
    w.linear(p + "kv_a_proj_with_mqa.weight", d.kv_lora_rank + d.qk_rope_head_dim, d.hidden);
    w.norm(p + "kv_a_layernorm.weight", d.kv_lora_rank);
    w.linear(p + "kv_b_proj.weight", d.heads * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank);
    w.linear(p + "o_proj.weight", d.hidden, d.heads * d.v_head_dim, kResidualGain);
}

json base_config(const std::string& arch, const Dims& d, DType dtype) {
    json c;
    c["hidden_act"] = "silu";
    c["hidden_size"] = d.hidden;
    c["initializer_range"] = 0.02;
    c["intermediate_size"] = d.intermediate;
    c["max_position_embeddings"] = d.max_positions;
    c["num_attention_heads"] = d.heads;
    c["num_hidden_layers"] = d.layers;
    c["num_key_value_heads"] = d.kv_heads;
    c["torch_dtype"] = dtype == DType::kF32 ? "float32" : "bfloat16";
    c["transformers_version"] = "4.51.0";
    c["use_cache"] = true;
    c["vocab_size"] = d.vocab;
    c["attention_dropout"] = 0.0;
    if (arch == "llama") {
        c["architectures"] = {"LlamaForCausalLM"};
        c["model_type"] = "llama";
        c["attention_bias"] = false;
        c["mlp_bias"] = false;
        c["head_dim"] = d.head_dim;
        c["pretraining_tp"] = 1;
        c["rms_norm_eps"] = 1e-5;
        c["rope_theta"] = 500000.0;
        c["rope_scaling"] = {{"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192},
                             {"rope_type", "llama3"}};
        c["tie_word_embeddings"] = false;
        c["bos_token_id"] = 128000;
        c["eos_token_id"] = {128001, 128008, 128009};
    } else if (arch == "qwen2" || arch == "qwen2-moe") {
        c["architectures"] = {arch == "qwen2" ? "Qwen2ForCausalLM" : "Qwen2MoeForCausalLM"};
        c["model_type"] = arch == "qwen2" ? "qwen2" : "qwen2_moe";
        c["max_window_layers"] = d.layers;
        c["rms_norm_eps"] = 1e-6;
        c["rope_theta"] = 1000000.0;
        c["sliding_window"] = d.max_positions;
        c["use_sliding_window"] = false;
        c["tie_word_embeddings"] = false;
        c["bos_token_id"] = 151643;
        c["eos_token_id"] = 151645;
    } else if (arch == "mixtral") {
        c["architectures"] = {"MixtralForCausalLM"};
        c["model_type"] = "mixtral";
        c["head_dim"] = d.head_dim;
        c["intermediate_size"] = d.moe_intermediate;  // Mixtral's intermediate_size is per expert
        c["num_local_experts"] = d.experts;
        c["num_experts_per_tok"] = d.experts_per_tok;
        c["output_router_logits"] = false;
        c["router_aux_loss_coef"] = 0.02;
        c["router_jitter_noise"] = 0.0;
        c["rms_norm_eps"] = 1e-5;
        c["rope_theta"] = 1000000.0;
        c["sliding_window"] = nullptr;
        c["tie_word_embeddings"] = false;
        c["bos_token_id"] = 1;
        c["eos_token_id"] = 2;
    } else {  // qwen3, qwen3-moe, deepseek-v2 share the Qwen-style fields below
        c["architectures"] = {arch == "qwen3" ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"};
        c["model_type"] = arch == "qwen3" ? "qwen3" : "qwen3_moe";
        c["attention_bias"] = false;
        c["head_dim"] = d.head_dim;
        c["max_window_layers"] = d.layers;
        c["rms_norm_eps"] = 1e-6;
        c["rope_scaling"] = nullptr;
        c["rope_theta"] = 1000000.0;
        c["sliding_window"] = nullptr;
        c["use_sliding_window"] = false;
        c["tie_word_embeddings"] = arch == "qwen3";
        c["bos_token_id"] = 151643;
        c["eos_token_id"] = 151645;
    }
    if (arch == "qwen3-moe" || arch == "qwen2-moe") {
        c["decoder_sparse_step"] = 1;
        c["mlp_only_layers"] = json::array();
        c["moe_intermediate_size"] = d.moe_intermediate;
        c["norm_topk_prob"] = arch == "qwen3-moe";  // as the released checkpoints
        c["num_experts"] = d.experts;
        c["num_experts_per_tok"] = d.experts_per_tok;
        c["output_router_logits"] = false;
        c["router_aux_loss_coef"] = 0.001;
        if (arch == "qwen2-moe") c["shared_expert_intermediate_size"] = d.shared_experts * d.moe_intermediate;
    }
    if (is_deepseek(arch)) {
        const bool v3 = arch == "deepseek-v3";
        c.erase("head_dim");
        c.erase("max_window_layers");
        c.erase("sliding_window");
        c.erase("use_sliding_window");
        c.erase("attention_bias");
        c["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
        c["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
        c["aux_loss_alpha"] = 0.001;
        c["first_k_dense_replace"] = d.first_dense;
        c["kv_lora_rank"] = d.kv_lora_rank;
        c["moe_intermediate_size"] = d.moe_intermediate;
        c["moe_layer_freq"] = 1;
        // V2-Lite: softmax greedy routing, no q compression; V3: sigmoid noaux_tc over
        // expert groups with the correction bias, scaled routed weights, compressed q.
        c["n_group"] = d.n_group;
        c["n_routed_experts"] = d.experts;
        c["n_shared_experts"] = d.shared_experts;
        c["norm_topk_prob"] = v3;
        c["num_experts_per_tok"] = d.experts_per_tok;
        c["num_key_value_heads"] = d.heads;
        c["q_lora_rank"] = d.q_lora_rank > 0 ? json(d.q_lora_rank) : json(nullptr);
        c["qk_nope_head_dim"] = d.qk_nope_head_dim;
        c["qk_rope_head_dim"] = d.qk_rope_head_dim;
        c["v_head_dim"] = d.v_head_dim;
        c["routed_scaling_factor"] = v3 ? 2.5 : 1.0;
        c["scoring_func"] = v3 ? "sigmoid" : "softmax";
        c["seq_aux"] = true;
        c["topk_group"] = d.topk_group;
        c["topk_method"] = v3 ? "noaux_tc" : "greedy";
        c["rope_theta"] = 10000.0;
        // As their released configs: yarn from a 4k original context by 40x.
        const double mscale = v3 ? 1.0 : 0.707;
        c["rope_scaling"] = {{"type", "yarn"},          {"factor", 40.0},          {"original_max_position_embeddings", 4096},
                             {"beta_fast", 32},        {"beta_slow", 1},          {"mscale", mscale},
                             {"mscale_all_dim", mscale}};
        c["rms_norm_eps"] = 1e-6;
        c["tie_word_embeddings"] = false;
        c["bos_token_id"] = 100000;
        c["eos_token_id"] = 100001;
    }
    return c;
}

StatusOr<std::int64_t> tokenizer_vocab_size(const fs::path& tokenizer_json) {
    std::ifstream in(tokenizer_json);
    if (!in) return Status::NotFound(tokenizer_json.string() + ": cannot open");
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        return Status::InvalidArgument(tokenizer_json.string() + ": not valid JSON: " + e.what());
    }
    std::int64_t max_id = -1;
    for (auto& [tok, id] : j["model"]["vocab"].items()) max_id = std::max<std::int64_t>(max_id, id.get<std::int64_t>());
    for (auto& added : j["added_tokens"]) max_id = std::max<std::int64_t>(max_id, added["id"].get<std::int64_t>());
    return max_id + 1;
}

Status write_json(const fs::path& path, const json& j) {
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) return Status::Internal(path.string() + ": write failed");
    return Status::Ok();
}

}  // namespace

Status make_model(const MakeModelOptions& o) {
    static const std::vector<std::string> kArchs = {"llama",   "qwen2",       "qwen3",      "qwen3-moe",
                                                    "qwen2-moe", "mixtral", "deepseek-v2", "deepseek-v3"};
    if (std::find(kArchs.begin(), kArchs.end(), o.arch) == kArchs.end())
        return Status::InvalidArgument("--arch " + o.arch +
                                       " is not known; use llama, qwen2, qwen3, qwen3-moe, qwen2-moe, mixtral, "
                                       "deepseek-v2 or deepseek-v3");
    if (o.preset != "tiny" && o.preset != "small")
        return Status::InvalidArgument("--preset " + o.preset + " is not known; use tiny or small");
    const auto dtype = parse_dtype(o.dtype);
    if (!dtype || *dtype == DType::kF16)
        return Status::InvalidArgument("--dtype " + o.dtype + " is not supported by make-model; use f32 or bf16");
    if (o.out.empty()) return Status::InvalidArgument("--out is required: the folder to write the model to");
    if (o.fp8_block < 0 || (o.fp8_block > 0 && o.fp8_block % 4 != 0))
        return Status::InvalidArgument("--fp8-block " + std::to_string(o.fp8_block) +
                                       " must be a positive multiple of 4 (128 as DeepSeek-V3 and Qwen3-FP8 ship)");

    if (o.router_skew != 0.0 && o.arch != "deepseek-v3")
        return Status::InvalidArgument("--router-skew shifts DeepSeek-V3's e_score_correction_bias; use --arch deepseek-v3");
    Dims d = dims_for(o.arch, o.preset);
    if (o.num_layers < 0 || o.num_layers > 256)
        return Status::InvalidArgument("--num-layers " + std::to_string(o.num_layers) + " must be in [1, 256]");
    if (o.num_layers > 0) d.layers = o.num_layers;
    // small models carry their family's real tokenizer unless told otherwise.
    std::string tokenizer = o.tokenizer;
    if (tokenizer.empty() && o.preset == "small") tokenizer = o.arch == "llama" ? "llama3" : "qwen3";
    fs::path tokenizer_src;
    if (!tokenizer.empty() && tokenizer != "none") {
        if (tokenizer != "qwen3" && tokenizer != "llama3" && tokenizer != "mistral" && tokenizer != "gpt2")
            return Status::InvalidArgument("--tokenizer " + tokenizer +
                                           " is not known; use qwen3, llama3, mistral, gpt2 (GPT-2 style, from "
                                           "Qwen3's vocabulary) or none");
        std::string dir = !o.tokenizer_dir.empty() ? o.tokenizer_dir
                          : !env().tokenizer_assets.empty() ? env().tokenizer_assets
                                                            : std::string(TSR_DEFAULT_TOKENIZER_ASSETS);
        // gpt2: a GPT-2-style file written from Qwen3's byte-level vocabulary (below).
        tokenizer_src = fs::path(dir) / (tokenizer == "gpt2" ? "qwen3" : tokenizer);
        if (!fs::exists(tokenizer_src / "tokenizer.json")) {
            return Status::NotFound((tokenizer_src / "tokenizer.json").string() +
                                    " not found; point --tokenizer-dir (or TSR_TOKENIZER_ASSETS) at "
                                    "the folder holding qwen3/, llama3/ and mistral/");
        }
        TSR_ASSIGN_OR_RETURN(std::int64_t tokens, tokenizer_vocab_size(tokenizer_src / "tokenizer.json"));
        // Qwen3-0.6B pads its embedding to 151936 rows; a smaller table cannot hold the ids.
        if (o.preset == "tiny" || d.vocab < tokens) d.vocab = tokens;
    }

    std::error_code ec;
    fs::create_directories(o.out, ec);
    if (ec) return Status::Internal(o.out + ": cannot create folder: " + ec.message());

    json config = base_config(o.arch, d, *dtype);
    const std::vector<std::int64_t> dense_layers = mlp_only_layers(o.arch, o.preset);
    if (!dense_layers.empty()) config["mlp_only_layers"] = dense_layers;
    if (tokenizer == "llama3" && o.arch != "llama") {
        config["bos_token_id"] = 128000;
        config["eos_token_id"] = 128009;
    } else if (tokenizer == "qwen3" && o.arch == "llama") {
        config["bos_token_id"] = 151643;
        config["eos_token_id"] = 151645;
    }
    if (o.fp8_block > 0) {
        config["quantization_config"] = {{"activation_scheme", "dynamic"},
                                         {"fmt", "e4m3"},
                                         {"quant_method", "fp8"},
                                         {"weight_block_size", {o.fp8_block, o.fp8_block}}};
    }
    TensorWriter w(*dtype, o.seed, o.fp8_block);
    const bool tied = config.value("tie_word_embeddings", false);
    add_embeddings(w, d, tied);
    for (std::int64_t l = 0; l < d.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        w.norm(p + "input_layernorm.weight", d.hidden);
        w.norm(p + "post_attention_layernorm.weight", d.hidden);
        if (is_deepseek(o.arch)) {
            add_mla_attention(w, p + "self_attn.", d);
            if (l < d.first_dense) {
                add_dense_mlp(w, p + "mlp.", d.hidden, d.intermediate);
            } else {
                add_moe(w, p + "mlp.", d, o.arch, o.router_skew);
            }
        } else {
            add_gqa_attention(w, p + "self_attn.", d, /*bias=*/o.arch == "qwen2" || o.arch == "qwen2-moe",
                              /*qk_norm=*/o.arch == "qwen3" || o.arch == "qwen3-moe");
            const bool dense = std::find(dense_layers.begin(), dense_layers.end(), l) != dense_layers.end();
            if (o.arch == "mixtral") {
                add_moe(w, p + "block_sparse_moe.", d, o.arch, o.router_skew);
            } else if ((o.arch == "qwen3-moe" || o.arch == "qwen2-moe") && !dense) {
                add_moe(w, p + "mlp.", d, o.arch, o.router_skew);
            } else {
                add_dense_mlp(w, p + "mlp.", d.hidden, d.intermediate);
            }
        }
    }
    const fs::path out(o.out);
    TSR_RETURN_IF_ERROR(write_json(out / "config.json", config));
    json gen = {{"bos_token_id", config["bos_token_id"]}, {"eos_token_id", config["eos_token_id"]},
                {"do_sample", false}};
    TSR_RETURN_IF_ERROR(write_json(out / "generation_config.json", gen));
    TSR_RETURN_IF_ERROR(loader::write_safetensors((out / "model.safetensors").string(), w.tensors(),
                                                  {{"format", "pt"}}));
    if (tokenizer == "gpt2") {
        TSR_RETURN_IF_ERROR(tokenizer::write_gpt2_style_tokenizer(tokenizer_src.string(), out.string()));
    } else if (!tokenizer_src.empty()) {
        for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
            fs::copy_file(tokenizer_src / f, out / f, fs::copy_options::overwrite_existing, ec);
            if (ec) return Status::Internal((out / f).string() + ": copy failed: " + ec.message());
            fs::permissions(out / f, fs::perms::owner_write, fs::perm_options::add, ec);
        }
    }
    std::size_t bytes = 0;
    for (const auto& t : w.tensors()) bytes += t.bytes.size();
    TSR_LOG_C(INFO, "make-model", "wrote {} {} model ({} tensors, {:.1f} MB, vocab {}) to {}",
              o.preset, o.arch, w.tensors().size(), bytes / 1e6, d.vocab, o.out);
    return Status::Ok();
}

}  // namespace tessera::app
