#include "models/dense_decoder.h"

#include <cmath>
#include <cstring>

#include "base/aligned_buffer.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "layers/linear.h"

namespace tessera::models {

namespace {

using loader::ModelConfig;
using loader::WeightSource;

struct DecoderLayer {
    std::vector<float> input_norm;      // f32 [hidden]
    layers::Linear qkv_proj;            // [(n_heads + 2·n_kv_heads)·head_dim, hidden]
    std::vector<float> q_norm, k_norm;  // f32 [head_dim] (Qwen3) or empty
    layers::Linear o_proj;              // [hidden, n_heads·head_dim]
    std::vector<float> post_attention_norm;
    layers::Linear gate_up_proj;        // [2·intermediate, hidden]: gate rows, then up rows
    layers::Linear down_proj;           // [hidden, intermediate]
};

StatusOr<std::vector<float>> load_vector(const WeightSource& source, const std::string& name,
                                         std::int64_t n) {
    TSR_ASSIGN_OR_RETURN(auto t, source.get(name, {n}));
    std::vector<float> v(static_cast<std::size_t>(n));
    convert_to_f32(t->data, t->dtype, v.data(), v.size());
    return v;
}

class DenseDecoder final : public Model {
 public:
    DenseDecoder(ModelConfig config, DType compute_dtype)
        : config_(std::move(config)), compute_dtype_(compute_dtype) {}

    Status load(const WeightSource& source);

    // Model
    const ModelConfig& config() const override { return config_; }
    kvcache::KvCacheShape kv_cache_shape() const override {
        return {config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim};
    }
    DType compute_dtype() const override { return compute_dtype_; }
    std::size_t weight_bytes() const override;
    std::size_t weight_bytes_per_token() const override;
    double linear_flops_per_token() const override;
    double attention_flops_at(std::int64_t pos) const override;
    Status forward(const ForwardInput& input, kvcache::KvCache& cache, ThreadPool* pool,
                   std::vector<float>* logits) override;

 private:
    std::int64_t q_dim() const { return config_.num_attention_heads * config_.head_dim; }
    std::int64_t kv_dim() const { return config_.num_key_value_heads * config_.head_dim; }

    const ModelConfig config_;
    const DType compute_dtype_;
    DType embedding_dtype_ = DType::kF32;
    AlignedBuffer embedding_;  // embedding_dtype_ [vocab, hidden], as stored in the checkpoint
    std::vector<DecoderLayer> layers_;
    std::vector<float> final_norm_;
    layers::Linear lm_head_;  // [vocab, hidden]; the embedding itself when tied
    std::vector<float> inv_freq_;

    // Activations, reused across steps. f32 [n_tokens, ...]
    std::vector<float> x_, h_, qkv_, attn_, gate_up_, act_, last_;
};

Status DenseDecoder::load(const WeightSource& source) {
    const ModelConfig& c = config_;
    const std::int64_t hidden = c.hidden_size;
    TSR_ASSIGN_OR_RETURN(auto embed, source.get("model.embed_tokens.weight", {c.vocab_size, hidden}));
    embedding_dtype_ = embed->dtype == DType::kF16 ? DType::kF32 : embed->dtype;
    embedding_ = AlignedBuffer(static_cast<std::size_t>(embed->numel()) * dtype_size(embedding_dtype_));
    if (embed->dtype == DType::kF16) {
        convert_to_f32(embed->data, embed->dtype, embedding_.as<float>(),
                       static_cast<std::size_t>(embed->numel()));
    } else {
        std::memcpy(embedding_.data(), embed->data, embed->bytes);
    }
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        DecoderLayer layer;
        TSR_ASSIGN_OR_RETURN(layer.input_norm, load_vector(source, p + "input_layernorm.weight", hidden));
        TSR_ASSIGN_OR_RETURN(
            layer.qkv_proj,
            layers::Linear::load(source,
                                 {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                  p + "self_attn.v_proj.weight"},
                                 {q_dim(), kv_dim(), kv_dim()}, hidden, c.attention_bias,
                                 compute_dtype_));
        if (c.qk_norm) {
            TSR_ASSIGN_OR_RETURN(layer.q_norm, load_vector(source, p + "self_attn.q_norm.weight", c.head_dim));
            TSR_ASSIGN_OR_RETURN(layer.k_norm, load_vector(source, p + "self_attn.k_norm.weight", c.head_dim));
        }
        TSR_ASSIGN_OR_RETURN(layer.o_proj,
                             layers::Linear::load(source, {p + "self_attn.o_proj.weight"}, {hidden},
                                                  q_dim(), false, compute_dtype_));
        TSR_ASSIGN_OR_RETURN(layer.post_attention_norm,
                             load_vector(source, p + "post_attention_layernorm.weight", hidden));
        TSR_ASSIGN_OR_RETURN(
            layer.gate_up_proj,
            layers::Linear::load(source, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                                 {c.intermediate_size, c.intermediate_size}, hidden, false,
                                 compute_dtype_));
        TSR_ASSIGN_OR_RETURN(layer.down_proj,
                             layers::Linear::load(source, {p + "mlp.down_proj.weight"}, {hidden},
                                                  c.intermediate_size, false, compute_dtype_));
        layers_.push_back(std::move(layer));
    }
    TSR_ASSIGN_OR_RETURN(final_norm_, load_vector(source, "model.norm.weight", hidden));
    const bool tied = c.tie_word_embeddings || !source.contains("lm_head.weight");
    TSR_ASSIGN_OR_RETURN(lm_head_,
                         layers::Linear::load(source,
                                              {tied ? "model.embed_tokens.weight" : "lm_head.weight"},
                                              {c.vocab_size}, hidden, false, compute_dtype_));
    inv_freq_ = loader::rope_inv_freq(c);
    return Status::Ok();
}

std::size_t DenseDecoder::weight_bytes_per_token() const {
    std::size_t bytes = lm_head_.weight_bytes();
    for (const auto& l : layers_)
        bytes += l.qkv_proj.weight_bytes() + l.o_proj.weight_bytes() +
                 l.gate_up_proj.weight_bytes() + l.down_proj.weight_bytes();
    return bytes;
}

std::size_t DenseDecoder::weight_bytes() const {
    return weight_bytes_per_token() + embedding_.size();
}

double DenseDecoder::linear_flops_per_token() const {
    double macs = 0;
    for (const auto& l : layers_) {
        for (const auto* lin : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj})
            macs += static_cast<double>(lin->in_features()) * lin->out_features();
    }
    return 2.0 * macs;
}

double DenseDecoder::attention_flops_at(std::int64_t pos) const {
    // QKᵀ and PV over pos + 1 keys, per head and layer.
    return 2.0 * 2.0 * static_cast<double>(pos + 1) * config_.head_dim *
           config_.num_attention_heads * config_.num_hidden_layers;
}

Status DenseDecoder::forward(const ForwardInput& input, kvcache::KvCache& cache, ThreadPool* pool,
                             std::vector<float>* logits) {
    const ModelConfig& c = config_;
    const auto n = static_cast<std::int64_t>(input.tokens.size());
    if (n == 0) return Status::InvalidArgument("forward of zero tokens");
    TSR_RETURN_IF_ERROR(cache.check_fits(input.start_pos, n));
    for (std::int32_t t : input.tokens) {
        if (t < 0 || t >= c.vocab_size) {
            return Status::InvalidArgument("token id " + std::to_string(t) +
                                           " is outside the vocabulary [0, " +
                                           std::to_string(c.vocab_size) + ")");
        }
    }
    const std::int64_t hidden = c.hidden_size;
    const std::int64_t qkv_dim = q_dim() + 2 * kv_dim();
    const std::int64_t inter = c.intermediate_size;
    x_.resize(n * hidden);
    h_.resize(n * hidden);
    qkv_.resize(n * qkv_dim);
    attn_.resize(n * q_dim());
    gate_up_.resize(n * 2 * inter);
    act_.resize(n * inter);
    std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) positions[i] = static_cast<std::int32_t>(input.start_pos + i);

    kernels::embedding_lookup(embedding_.data(), embedding_dtype_, input.tokens.data(), n, hidden,
                              x_.data());
    const float eps = static_cast<float>(c.rms_norm_eps);
    const kernels::AttentionShape attn_shape{c.num_attention_heads, c.num_key_value_heads,
                                             c.head_dim,
                                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        DecoderLayer& layer = layers_[l];
        kernels::rms_norm(x_.data(), layer.input_norm.data(), h_.data(), n, hidden, eps, pool);
        layer.qkv_proj.forward(h_.data(), n, qkv_.data(), pool);
        for (std::int64_t t = 0; t < n; ++t) {
            float* q = qkv_.data() + t * qkv_dim;
            float* k = q + q_dim();
            if (c.qk_norm) {
                kernels::rms_norm(q, layer.q_norm.data(), q, c.num_attention_heads, c.head_dim, eps);
                kernels::rms_norm(k, layer.k_norm.data(), k, c.num_key_value_heads, c.head_dim, eps);
            }
        }
        kernels::rope(qkv_.data(), n, c.num_attention_heads, c.head_dim, positions.data(),
                      inv_freq_.data(), /*neox=*/true, qkv_dim);
        kernels::rope(qkv_.data() + q_dim(), n, c.num_key_value_heads, c.head_dim, positions.data(),
                      inv_freq_.data(), /*neox=*/true, qkv_dim);
        float* k_cache = cache.k(l);
        float* v_cache = cache.v(l);
        for (std::int64_t t = 0; t < n; ++t) {
            const float* k = qkv_.data() + t * qkv_dim + q_dim();
            const std::int64_t row = (input.start_pos + t) * kv_dim();
            std::memcpy(k_cache + row, k, static_cast<std::size_t>(kv_dim()) * 4);
            std::memcpy(v_cache + row, k + kv_dim(), static_cast<std::size_t>(kv_dim()) * 4);
        }
        kernels::AttentionArgs args;
        args.q = qkv_.data();
        args.k = k_cache;
        args.v = v_cache;
        args.out = attn_.data();
        args.n_q = n;
        args.start_pos = input.start_pos;
        args.q_stride = qkv_dim;
        kernels::attention(args, attn_shape, pool);
        layer.o_proj.forward(attn_.data(), n, h_.data(), pool);
        kernels::add_inplace(x_.data(), h_.data(), n * hidden);

        kernels::rms_norm(x_.data(), layer.post_attention_norm.data(), h_.data(), n, hidden, eps, pool);
        layer.gate_up_proj.forward(h_.data(), n, gate_up_.data(), pool);
        kernels::silu_and_mul(gate_up_.data(), act_.data(), n, inter, pool);
        layer.down_proj.forward(act_.data(), n, h_.data(), pool);
        kernels::add_inplace(x_.data(), h_.data(), n * hidden);
    }
    const std::int64_t n_out = input.all_logits ? n : 1;
    const float* rows = x_.data() + (n - n_out) * hidden;
    last_.resize(n_out * hidden);
    kernels::rms_norm(rows, final_norm_.data(), last_.data(), n_out, hidden, eps, pool);
    logits->resize(static_cast<std::size_t>(n_out * c.vocab_size));
    lm_head_.forward(last_.data(), n_out, logits->data(), pool);
    return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> load_dense_decoder(const ModelConfig& config,
                                                    const WeightSource& source, DType compute_dtype) {
    auto model = std::make_unique<DenseDecoder>(config, compute_dtype);
    TSR_RETURN_IF_ERROR(model->load(source));
    return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tessera::models
