#pragma once
// models/test_model_folder.h — tests only: a tiny dense Qwen3 or Qwen2 folder (config.json and
// f32 safetensors) with deterministic weights, without a dependency on the app layer's
// make-model. `seed` picks the weights, `layers` the depth.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace tessera::models::testing {

constexpr std::int64_t kHidden = 64;
constexpr std::int64_t kInter = 96;
constexpr std::int64_t kLayers = 4;
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kKvHeads = 2;
constexpr std::int64_t kHeadDim = 16;
constexpr std::int64_t kVocab = 200;

// Deterministic weights without a dependency on the app layer's make-model.
class Weights {
 public:
    explicit Weights(std::uint64_t seed) : state_(seed) {}
    void add(const std::string& name, std::vector<std::int64_t> shape, float scale, float mean = 0.0f) {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        loader::TensorToWrite t{name, DType::kF32, std::move(shape), {}};
        t.bytes.resize(static_cast<std::size_t>(n) * 4);
        for (std::int64_t i = 0; i < n; ++i) {
            state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
            const float u = static_cast<float>(state_ >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
            const float v = mean + scale * (2.0f * u - 1.0f);
            std::memcpy(t.bytes.data() + i * 4, &v, 4);
        }
        tensors_.push_back(std::move(t));
    }
    void linear(const std::string& name, std::int64_t out, std::int64_t in) {
        add(name, {out, in}, std::sqrt(3.0f / static_cast<float>(in)));
    }
    void norm(const std::string& name, std::int64_t n) { add(name, {n}, 0.1f, 1.0f); }
    const std::vector<loader::TensorToWrite>& tensors() const { return tensors_; }

 private:
    std::uint64_t state_;
    std::vector<loader::TensorToWrite> tensors_;
};

// qwen3: tied embeddings, q/k norms. qwen2: an lm_head of its own, q/k/v biases.
inline void write_model(const std::filesystem::path& dir, const std::string& arch, std::uint64_t seed = 12345,
                        std::int64_t layers = kLayers) {
    const bool qwen3 = arch == "qwen3";
    std::filesystem::create_directories(dir);
    std::ofstream config(dir / "config.json");
    config << "{\"architectures\": [\"" << (qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM") << "\"],"
           << "\"hidden_size\": " << kHidden << ", \"intermediate_size\": " << kInter
           << ", \"num_hidden_layers\": " << layers << ", \"num_attention_heads\": " << kHeads
           << ", \"num_key_value_heads\": " << kKvHeads << ", \"head_dim\": " << kHeadDim
           << ", \"vocab_size\": " << kVocab << ", \"max_position_embeddings\": 256"
           << ", \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"torch_dtype\": \"float32\""
           << ", \"tie_word_embeddings\": " << (qwen3 ? "true" : "false") << "}";
    config.close();

    Weights w(seed);
    w.add("model.embed_tokens.weight", {kVocab, kHidden}, 1.0f);
    w.norm("model.norm.weight", kHidden);
    if (!qwen3) w.linear("lm_head.weight", kVocab, kHidden);
    for (std::int64_t l = 0; l < layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        w.norm(p + "input_layernorm.weight", kHidden);
        w.norm(p + "post_attention_layernorm.weight", kHidden);
        w.linear(p + "self_attn.q_proj.weight", kHeads * kHeadDim, kHidden);
        w.linear(p + "self_attn.k_proj.weight", kKvHeads * kHeadDim, kHidden);
        w.linear(p + "self_attn.v_proj.weight", kKvHeads * kHeadDim, kHidden);
        w.linear(p + "self_attn.o_proj.weight", kHidden, kHeads * kHeadDim);
        if (qwen3) {
            w.norm(p + "self_attn.q_norm.weight", kHeadDim);
            w.norm(p + "self_attn.k_norm.weight", kHeadDim);
        } else {
            w.add(p + "self_attn.q_proj.bias", {kHeads * kHeadDim}, 0.1f);
            w.add(p + "self_attn.k_proj.bias", {kKvHeads * kHeadDim}, 0.1f);
            w.add(p + "self_attn.v_proj.bias", {kKvHeads * kHeadDim}, 0.1f);
        }
        w.linear(p + "mlp.gate_proj.weight", kInter, kHidden);
        w.linear(p + "mlp.up_proj.weight", kInter, kHidden);
        w.linear(p + "mlp.down_proj.weight", kHidden, kInter);
    }
    ASSERT_TRUE(loader::write_safetensors((dir / "model.safetensors").string(), w.tensors()).ok());
}

}  // namespace tessera::models::testing
