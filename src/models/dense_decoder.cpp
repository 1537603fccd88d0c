#include "models/dense_decoder.h"

#include <cmath>
#include <cstring>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "dist/pp_partition.h"
#include "dist/process_group.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "layers/linear.h"
#include "layers/tensor_parallel.h"

namespace tessera::models {

namespace {

using loader::ModelConfig;
using loader::WeightSource;

// Shapes are this rank's: heads, kv_heads and intermediate are the TP shard's.
struct DecoderLayer {
    std::vector<float> input_norm;      // f32 [hidden]
    layers::Linear qkv_proj;            // [(heads + 2·kv_heads)·head_dim, hidden]
    std::vector<float> q_norm, k_norm;  // f32 [head_dim] (Qwen3) or empty
    layers::Linear o_proj;              // [hidden, heads·head_dim], row parallel
    std::vector<float> post_attention_norm;
    layers::Linear gate_up_proj;        // [2·intermediate, hidden]: gate rows, then up rows
    layers::Linear down_proj;           // [hidden, intermediate], row parallel
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
    DenseDecoder(ModelConfig config, DType compute_dtype, const LoadOptions& options)
        : config_(std::move(config)),
          compute_dtype_(compute_dtype),
          tp_{options.tp_rank, options.tp_size},
          tp_group_(options.tp_group) {}

    Status load(const WeightSource& source, const StageInfo& stage);

    // Model
    const ModelConfig& config() const override { return config_; }
    kvcache::KvCacheShape kv_cache_shape() const override {
        // SGLang's --kv-cache-dtype auto: the model's compute type.
        return {stage_.num_layers(), n_kv_heads_, config_.head_dim,
                compute_dtype_ == DType::kBF16 ? DType::kBF16 : DType::kF32};
    }
    StageInfo stage() const override { return stage_; }
    DType compute_dtype() const override { return compute_dtype_; }
    std::size_t weight_bytes() const override;
    std::size_t weight_bytes_per_token() const override;
    double linear_flops_per_token() const override;
    double attention_flops_at(std::int64_t pos) const override;
    using Model::forward;
    Status forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                   std::vector<float>* out) override;

 private:
    std::int64_t q_dim() const { return n_heads_ * config_.head_dim; }
    std::int64_t kv_dim() const { return n_kv_heads_ * config_.head_dim; }
    // Sums partial results over the TP group (no-op on one rank).
    Status tp_all_reduce(std::vector<float>& v, std::int64_t n);
    void embed(std::span<const std::int32_t> tokens, float* out);
    Status gather_logits(std::int64_t n_rows, std::vector<float>* logits);

    const ModelConfig config_;
    const DType compute_dtype_;
    const layers::TpShard tp_;
    dist::ProcessGroup* const tp_group_;  // nullptr when tp_.size == 1
    StageInfo stage_;
    std::int64_t n_heads_ = 0;     // this rank's query heads
    std::int64_t n_kv_heads_ = 0;  // this rank's KV heads
    std::int64_t intermediate_ = 0;
    layers::VocabShard vocab_shard_;
    DType embedding_dtype_ = DType::kF32;
    // embedding_dtype_ [vocab_shard_.rows.count, hidden], as stored; first stage only
    AlignedBuffer embedding_;
    std::vector<DecoderLayer> layers_;  // the stage's: layers_[i] is layer stage_.layer_begin + i
    std::vector<float> final_norm_;     // f32 [hidden]; last stage only
    // [vocab, hidden]; the embedding itself when tied; last stage only (empty elsewhere)
    layers::Linear lm_head_;
    std::vector<float> inv_freq_;

    // Activations, reused across steps. f32 [n_tokens, ...]
    std::vector<float> x_, h_, qkv_, attn_, gate_up_, act_, last_, shard_logits_, gathered_;
    std::vector<float> rope_cos_, rope_sin_;  // f32 [tokens, head_dim/2] of the current pass
};

Status DenseDecoder::load(const WeightSource& source, const StageInfo& stage) {
    const ModelConfig& c = config_;
    stage_ = stage;
    const std::int64_t hidden = c.hidden_size;
    const std::int64_t hd = c.head_dim;
    TSR_ASSIGN_OR_RETURN(auto heads, layers::shard_attention(c.num_attention_heads, c.num_key_value_heads, tp_));
    TSR_ASSIGN_OR_RETURN(auto inter, layers::even_shard("intermediate_size", c.intermediate_size, tp_));
    n_heads_ = heads.q_heads.count;
    n_kv_heads_ = heads.kv_heads.count;
    intermediate_ = inter.count;
    vocab_shard_ = layers::shard_vocab(c.vocab_size, tp_);

    if (stage_.first) {
        TSR_ASSIGN_OR_RETURN(auto embed, source.get("model.embed_tokens.weight", {c.vocab_size, hidden}));
        embedding_dtype_ = embed->dtype == DType::kF16 ? DType::kF32 : embed->dtype;
        const std::int64_t shard_rows = vocab_shard_.rows.count;
        embedding_ = AlignedBuffer(static_cast<std::size_t>(shard_rows * hidden) * dtype_size(embedding_dtype_));
        const auto* embed_rows = reinterpret_cast<const unsigned char*>(embed->data) +
                                 static_cast<std::size_t>(vocab_shard_.rows.begin * hidden) *
                                     dtype_size(embed->dtype);
        if (embed->dtype == DType::kF16) {
            convert_to_f32(embed_rows, embed->dtype, embedding_.as<float>(),
                           static_cast<std::size_t>(shard_rows * hidden));
        } else {
            std::memcpy(embedding_.data(), embed_rows, embedding_.size());
        }
    }
    const auto column_parallel = [&](std::vector<layers::LinearPart> parts, bool bias) {
        return layers::Linear::load(source, {std::move(parts), hidden, 0, -1, bias, compute_dtype_});
    };
    const auto row_parallel = [&](const std::string& name, layers::Range cols) {
        return layers::Linear::load(source, {{{name, hidden}}, cols.count * tp_.size, cols.begin, cols.count, false,
                                             compute_dtype_});
    };
    const layers::Range q_rows{heads.q_heads.begin * hd, heads.q_heads.count * hd};
    const layers::Range kv_rows{heads.kv_heads.begin * hd, heads.kv_heads.count * hd};
    const std::int64_t q_total = c.num_attention_heads * hd;
    const std::int64_t kv_total = c.num_key_value_heads * hd;
    // Tensor names keep the global layer index: every stage reads the same checkpoint.
    for (int l = stage_.layer_begin; l < stage_.layer_end; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        DecoderLayer layer;
        TSR_ASSIGN_OR_RETURN(layer.input_norm, load_vector(source, p + "input_layernorm.weight", hidden));
        TSR_ASSIGN_OR_RETURN(layer.qkv_proj,
                             column_parallel({{p + "self_attn.q_proj.weight", q_total, q_rows.begin, q_rows.count},
                                              {p + "self_attn.k_proj.weight", kv_total, kv_rows.begin, kv_rows.count},
                                              {p + "self_attn.v_proj.weight", kv_total, kv_rows.begin, kv_rows.count}},
                                             c.attention_bias));
        if (c.qk_norm) {
            TSR_ASSIGN_OR_RETURN(layer.q_norm, load_vector(source, p + "self_attn.q_norm.weight", hd));
            TSR_ASSIGN_OR_RETURN(layer.k_norm, load_vector(source, p + "self_attn.k_norm.weight", hd));
        }
        TSR_ASSIGN_OR_RETURN(layer.o_proj, row_parallel(p + "self_attn.o_proj.weight", q_rows));
        TSR_ASSIGN_OR_RETURN(layer.post_attention_norm,
                             load_vector(source, p + "post_attention_layernorm.weight", hidden));
        TSR_ASSIGN_OR_RETURN(layer.gate_up_proj,
                             column_parallel({{p + "mlp.gate_proj.weight", c.intermediate_size, inter.begin, inter.count},
                                              {p + "mlp.up_proj.weight", c.intermediate_size, inter.begin, inter.count}},
                                             false));
        TSR_ASSIGN_OR_RETURN(layer.down_proj, row_parallel(p + "mlp.down_proj.weight", inter));
        layers_.push_back(std::move(layer));
    }
    if (stage_.last) {
        TSR_ASSIGN_OR_RETURN(final_norm_, load_vector(source, "model.norm.weight", hidden));
        const bool tied = c.tie_word_embeddings || !source.contains("lm_head.weight");
        TSR_ASSIGN_OR_RETURN(lm_head_,
                             column_parallel({{tied ? "model.embed_tokens.weight" : "lm_head.weight", c.vocab_size,
                                               vocab_shard_.rows.begin, vocab_shard_.rows.count}},
                                             false));
    }
    inv_freq_ = loader::rope_inv_freq(c);
    return Status::Ok();
}

Status DenseDecoder::tp_all_reduce(std::vector<float>& v, std::int64_t n) {
    if (tp_group_ == nullptr) return Status::Ok();
    return tp_group_->all_reduce(std::span<float>(v.data(), static_cast<std::size_t>(n)));
}

void DenseDecoder::embed(std::span<const std::int32_t> tokens, float* out) {
    const std::int64_t hidden = config_.hidden_size;
    const std::size_t row_bytes = static_cast<std::size_t>(hidden) * dtype_size(embedding_dtype_);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::int64_t row = tokens[i] - vocab_shard_.rows.begin;
        float* dst = out + static_cast<std::int64_t>(i) * hidden;
        if (row < 0 || row >= vocab_shard_.rows.count) {
            std::fill(dst, dst + hidden, 0.0f);  // another rank's row: it contributes through the all_reduce
        } else {
            convert_to_f32(embedding_.data() + static_cast<std::size_t>(row) * row_bytes, embedding_dtype_, dst,
                           static_cast<std::size_t>(hidden));
        }
    }
}

Status DenseDecoder::gather_logits(std::int64_t n_rows, std::vector<float>* logits) {
    const std::int64_t vocab = config_.vocab_size;
    const std::int64_t per = vocab_shard_.rows_per_rank;
    const std::int64_t local = vocab_shard_.rows.count;
    logits->resize(static_cast<std::size_t>(n_rows * vocab));
    if (tp_group_ == nullptr) {
        std::copy(shard_logits_.begin(), shard_logits_.begin() + n_rows * vocab, logits->begin());
        return Status::Ok();
    }
    // Pad every shard to `per` columns so that all ranks send the same count.
    std::vector<float> padded(static_cast<std::size_t>(n_rows * per), 0.0f);
    for (std::int64_t r = 0; r < n_rows; ++r)
        std::copy(shard_logits_.begin() + r * local, shard_logits_.begin() + (r + 1) * local, padded.begin() + r * per);
    gathered_.resize(static_cast<std::size_t>(tp_.size * n_rows * per));
    TSR_RETURN_IF_ERROR(tp_group_->all_gather(padded, gathered_));
    for (int rank = 0; rank < tp_.size; ++rank) {
        const std::int64_t begin = rank * per;
        const std::int64_t count = std::max<std::int64_t>(0, std::min(vocab, begin + per) - begin);
        for (std::int64_t r = 0; r < n_rows; ++r) {
            const float* src = gathered_.data() + (rank * n_rows + r) * per;
            std::copy(src, src + count, logits->data() + r * vocab + begin);
        }
    }
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
    // QKᵀ and PV over pos + 1 keys, per head and layer of this stage.
    return 2.0 * 2.0 * static_cast<double>(pos + 1) * config_.head_dim * n_heads_ *
           stage_.num_layers();
}

Status DenseDecoder::forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                             std::vector<float>* out) {
    const ModelConfig& c = config_;
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    if (n == 0) return Status::InvalidArgument("forward of zero tokens");
    std::int64_t covered = 0;
    for (const auto& seq : batch.seqs) covered += seq.n_tokens;
    if (covered != n)
        return Status::InvalidArgument("batch sequences cover " + std::to_string(covered) + " of " +
                                       std::to_string(n) + " tokens");
    const std::int64_t hidden = c.hidden_size;
    if (stage_.first) {
        if (!batch.hidden_in.empty())
            return Status::InvalidArgument("the first pipeline stage embeds its tokens but was given " +
                                           std::to_string(batch.hidden_in.size()) + " hidden-state values");
        // Only the stage that indexes the embedding table needs the ids to be in range.
        for (std::int32_t t : batch.tokens) {
            if (t < 0 || t >= c.vocab_size) {
                return Status::InvalidArgument("token id " + std::to_string(t) +
                                               " is outside the vocabulary [0, " +
                                               std::to_string(c.vocab_size) + ")");
            }
        }
    } else if (static_cast<std::int64_t>(batch.hidden_in.size()) != n * hidden) {
        return Status::InvalidArgument("hidden_in holds " + std::to_string(batch.hidden_in.size()) +
                                       " values but the pipeline stage of layers [" +
                                       std::to_string(stage_.layer_begin) + ", " + std::to_string(stage_.layer_end) +
                                       ") needs " + std::to_string(n) + " tokens x hidden_size " +
                                       std::to_string(hidden) + " = " + std::to_string(n * hidden));
    }
    if (static_cast<int>(kv.k.size()) != stage_.num_layers() || kv.v.size() != kv.k.size())
        return Status::InvalidArgument("the KV view holds " + std::to_string(kv.k.size()) + " K and " +
                                       std::to_string(kv.v.size()) + " V layers; this pipeline stage has " +
                                       std::to_string(stage_.num_layers()));
    const std::int64_t qkv_dim = q_dim() + 2 * kv_dim();
    const std::int64_t inter = intermediate_;
    x_.resize(n * hidden);
    h_.resize(n * hidden);
    qkv_.resize(n * qkv_dim);
    attn_.resize(n * q_dim());
    gate_up_.resize(n * 2 * inter);
    act_.resize(n * inter);
    // Position and KV row of every new token, in batch order.
    std::vector<std::int32_t> positions(static_cast<std::size_t>(n));
    std::vector<std::int64_t> kv_rows(static_cast<std::size_t>(n));
    std::vector<std::int64_t> logit_rows;  // token index whose hidden state yields a logits row
    std::int64_t t0 = 0;
    for (const auto& seq : batch.seqs) {
        for (std::int64_t i = 0; i < seq.n_tokens; ++i) {
            const std::int64_t pos = seq.start_pos + i;
            positions[t0 + i] = static_cast<std::int32_t>(pos);
            kv_rows[t0 + i] = seq.slots == nullptr ? pos : seq.slots[pos];
        }
        if (stage_.last && seq.logits == LogitsMode::kAll) {
            for (std::int64_t i = 0; i < seq.n_tokens; ++i) logit_rows.push_back(t0 + i);
        } else if (stage_.last && seq.logits == LogitsMode::kLast && seq.n_tokens > 0) {
            logit_rows.push_back(t0 + seq.n_tokens - 1);
        }
        t0 += seq.n_tokens;
    }

    if (stage_.first) {
        embed(batch.tokens, x_.data());
        TSR_RETURN_IF_ERROR(tp_all_reduce(x_, n * hidden));
    } else {
        std::copy(batch.hidden_in.begin(), batch.hidden_in.end(), x_.begin());
    }
    const float eps = static_cast<float>(c.rms_norm_eps);
    // Rotary angles once per pass; every layer rotates with the same ones.
    const std::int64_t half = c.head_dim / 2;
    rope_cos_.resize(static_cast<std::size_t>(n * half));
    rope_sin_.resize(static_cast<std::size_t>(n * half));
    kernels::rope_angles(positions.data(), n, inv_freq_.data(), half, rope_cos_.data(), rope_sin_.data());
    const kernels::AttentionShape attn_shape{n_heads_, n_kv_heads_,
                                             c.head_dim,
                                             1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    for (std::size_t l = 0; l < layers_.size(); ++l) {
        DecoderLayer& layer = layers_[l];
        kernels::rms_norm(x_.data(), layer.input_norm.data(), h_.data(), n, hidden, eps, pool);
        layer.qkv_proj.forward(h_.data(), n, qkv_.data(), pool);
        void* k_cache = kv.k[l];
        void* v_cache = kv.v[l];
        const bool kv_bf16 = kv.dtype == DType::kBF16;
        // Per token: q/k norms (qwen3), the rotation with this pass's angles, and K/V into
        // the token's cache row.
        const auto finish_qkv = [&](std::int64_t t_begin, std::int64_t t_end) {
            for (std::int64_t t = t_begin; t < t_end; ++t) {
                float* q = qkv_.data() + t * qkv_dim;
                float* k = q + q_dim();
                if (c.qk_norm) {
                    kernels::rms_norm(q, layer.q_norm.data(), q, n_heads_, c.head_dim, eps);
                    kernels::rms_norm(k, layer.k_norm.data(), k, n_kv_heads_, c.head_dim, eps);
                }
                const float* cos = rope_cos_.data() + t * half;
                const float* sin = rope_sin_.data() + t * half;
                kernels::rope_rotate(q, n_heads_, c.head_dim, cos, sin, /*neox=*/true);
                kernels::rope_rotate(k, n_kv_heads_, c.head_dim, cos, sin, /*neox=*/true);
                const std::int64_t row = kv_rows[t] * kv_dim();
                if (kv_bf16) {
                    auto* kd = static_cast<std::uint16_t*>(k_cache) + row;
                    auto* vd = static_cast<std::uint16_t*>(v_cache) + row;
                    for (std::int64_t i = 0; i < kv_dim(); ++i) {
                        kd[i] = f32_to_bf16(k[i]);
                        vd[i] = f32_to_bf16(k[kv_dim() + i]);
                    }
                } else {
                    std::memcpy(static_cast<float*>(k_cache) + row, k, static_cast<std::size_t>(kv_dim()) * 4);
                    std::memcpy(static_cast<float*>(v_cache) + row, k + kv_dim(),
                                static_cast<std::size_t>(kv_dim()) * 4);
                }
            }
        };
        if (pool != nullptr && n >= 8) {
            pool->parallel_for(n, finish_qkv);
        } else {
            finish_qkv(0, n);
        }
        std::vector<kernels::AttentionArgs> attention_args;
        std::int64_t first = 0;
        for (const auto& seq : batch.seqs) {
            kernels::AttentionArgs args;
            args.q = qkv_.data() + first * qkv_dim;
            args.k = k_cache;
            args.v = v_cache;
            args.out = attn_.data() + first * q_dim();
            args.n_q = seq.n_tokens;
            args.start_pos = seq.start_pos;
            args.q_stride = qkv_dim;
            args.kv_slots = seq.slots;
            args.kv_bf16 = kv_bf16;
            if (seq.n_tokens > 0) attention_args.push_back(args);
            first += seq.n_tokens;
        }
        kernels::attention_batch(attention_args, attn_shape, pool);
        layer.o_proj.forward(attn_.data(), n, h_.data(), pool);
        TSR_RETURN_IF_ERROR(tp_all_reduce(h_, n * hidden));
        kernels::add_inplace(x_.data(), h_.data(), n * hidden);

        kernels::rms_norm(x_.data(), layer.post_attention_norm.data(), h_.data(), n, hidden, eps, pool);
        layer.gate_up_proj.forward(h_.data(), n, gate_up_.data(), pool);
        kernels::silu_and_mul(gate_up_.data(), act_.data(), n, inter, pool);
        layer.down_proj.forward(act_.data(), n, h_.data(), pool);
        TSR_RETURN_IF_ERROR(tp_all_reduce(h_, n * hidden));
        kernels::add_inplace(x_.data(), h_.data(), n * hidden);
    }
    if (!stage_.last) {
        out->assign(x_.begin(), x_.begin() + n * hidden);
        return Status::Ok();
    }
    const auto n_out = static_cast<std::int64_t>(logit_rows.size());
    out->clear();
    // Every rank runs the same batch, so all of them skip (or issue) the gather together.
    if (n_out == 0) return Status::Ok();
    last_.resize(n_out * hidden);
    for (std::int64_t r = 0; r < n_out; ++r)
        std::copy(x_.begin() + logit_rows[r] * hidden, x_.begin() + (logit_rows[r] + 1) * hidden,
                  last_.begin() + r * hidden);
    kernels::rms_norm(last_.data(), final_norm_.data(), last_.data(), n_out, hidden, eps, pool);
    shard_logits_.resize(static_cast<std::size_t>(n_out * vocab_shard_.rows.count));
    lm_head_.forward(last_.data(), n_out, shard_logits_.data(), pool);
    return gather_logits(n_out, out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> load_dense_decoder(const ModelConfig& config,
                                                    const WeightSource& source, DType compute_dtype,
                                                    const LoadOptions& options) {
    if (options.pp_size < 1)
        return Status::InvalidArgument("pp_size must be at least 1, got " + std::to_string(options.pp_size));
    if (options.pp_rank < 0 || options.pp_rank >= options.pp_size)
        return Status::InvalidArgument("pp_rank " + std::to_string(options.pp_rank) + " is outside [0, pp_size " +
                                       std::to_string(options.pp_size) + ")");
    TSR_ASSIGN_OR_RETURN(dist::LayerRange range,
                         dist::pp_layer_range(static_cast<int>(config.num_hidden_layers), options.pp_rank,
                                              options.pp_size, options.layer_partition));
    const StageInfo stage{range.begin, range.end, dist::owns_embedding(options.pp_rank),
                          dist::owns_lm_head(options.pp_rank, options.pp_size)};
    auto model = std::make_unique<DenseDecoder>(config, compute_dtype, options);
    TSR_RETURN_IF_ERROR(model->load(source, stage));
    return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tessera::models
