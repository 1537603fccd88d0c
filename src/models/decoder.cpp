#include "models/decoder.h"

#include <optional>
#include <span>
#include <variant>

#include <fmt/core.h>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "dist/pp_partition.h"
#include "kernels/ops.h"
#include "layers/attention_layer.h"
#include "layers/embedding.h"
#include "layers/kv_scales.h"
#include "layers/logits_head.h"
#include "layers/mla_attention.h"
#include "layers/mlp.h"
#include "loader/kv_cache_scales_file.h"
#include "models/eplb_manager.h"

namespace tessera::models {

using loader::ModelConfig;
using loader::WeightSource;

layers::MoeSpec standard_moe_spec(const ModelConfig& c, int layer, const std::string& block) {
    layers::MoeSpec s;
    s.prefix = "model.layers." + std::to_string(layer) + "." + block;
    s.routing = layers::RouterConfig::from(c.moe);
    s.correction_bias = c.moe.e_score_correction_bias;
    s.experts.num_experts = c.moe.num_experts;
    s.experts.hidden = c.hidden_size;
    s.experts.intermediate = c.moe.moe_intermediate_size;
    s.shared_intermediate = c.moe.shared_expert_intermediate_size;
    s.shared_gate = c.moe.shared_expert_gate;
    return s;
}

namespace {

struct DecoderLayer {
    std::vector<float> input_norm;  // f32 [hidden]
    std::variant<layers::GqaAttention, layers::MlaAttention> attention;
    std::vector<float> post_attention_norm;
    std::variant<layers::GatedMlp, layers::MoeLayer> ffn;
};

// load_model (registry.cpp) has refused a bad --kv-cache-dtype before any model is built.
DType kv_dtype_of(const LoadOptions& options, DType compute_dtype) {
    auto resolved = resolve_kv_cache_dtype(options.kv_cache_dtype, compute_dtype);
    return resolved.ok() ? *resolved : compute_dtype;
}

class Decoder final : public Model {
 public:
    Decoder(ModelConfig config, DType compute_dtype, const LoadOptions& options)
        : config_(std::move(config)),
          compute_dtype_(compute_dtype),
          linear_dtype_(options.quantization == "fp8" ? DType::kF8E4M3 : compute_dtype),
          kv_dtype_(kv_dtype_of(options, compute_dtype)) {
        par_.tp = {options.tp_rank, options.tp_size};
        par_.tp_group = options.tp_group;
        par_.moe = options.moe;
        dpa_ = options.dp_attention;
        const layers::LayerParallel replicated{{0, 1}, nullptr, options.moe};
        attn_par_ = embed_par_ = head_par_ = dense_par_ = par_;
        if (dpa_.enabled()) {
            // SGLang's DP-attention models: attention sharded over attention TP, the embedding
            // replicated (VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())), the
            // LM head over attention TP under --enable-dp-lm-head.
            attn_par_.tp = {dpa_.tp_rank, dpa_.tp_size};
            attn_par_.tp_group = dpa_.attn_tp_group;
            embed_par_ = replicated;
            if (dpa_.dp_lm_head) head_par_ = attn_par_;
        }
        dense_replicated_ = options.dense_mlp_replicated;
        if (dense_replicated_) dense_par_ = replicated;
        output_rank_ = attn_par_.tp.rank == 0 && options.pp_rank == 0;
    }

    Status load(const WeightSource& source, const StageInfo& stage, const DecoderSpec& spec, const LoadOptions& options);

    // Model
    const ModelConfig& config() const override { return config_; }
    kvcache::KvCacheShape kv_cache_shape() const override {
        const DType dtype = kv_dtype_;
        if (config_.is_mla())
            return {stage_.num_layers(), 1, config_.mla.kv_lora_rank + config_.mla.qk_rope_head_dim, dtype,
                    kvcache::KvKind::kLatent};
        return {stage_.num_layers(), n_kv_heads_, config_.head_dim, dtype};
    }
    StageInfo stage() const override { return stage_; }
    DType compute_dtype() const override { return compute_dtype_; }
    DType linear_weight_dtype() const override { return config_.fp8 ? DType::kF8E4M3 : linear_dtype_; }
    std::size_t weight_bytes() const override;
    std::size_t weight_bytes_per_token() const override;
    double linear_flops_per_token() const override;
    double attention_flops_at(std::int64_t pos) const override;
    layers::MoeTraffic moe_traffic() const override;
    using Model::forward;
    Status forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                   std::vector<float>* out) override;

 private:
    Status check_batch(const BatchInput& batch, const kvcache::KvView& kv) const;
    Status check_dp_attention(const BatchInput& batch) const;
    // One decoder layer on this rank's `n` tokens in x_; under DP-attention with the MLP / MoE
    // over every group's tokens (`gathered`: the layout of the step's tokens).
    Status layer_forward(DecoderLayer& layer, const kvcache::KvView& kv, std::size_t l, const layers::LayerBatch& lb,
                         const layers::DpBufferLayout* gathered, ThreadPool* pool);
    Status ffn_forward(DecoderLayer& layer, const float* h, std::int64_t rows, float* out, ThreadPool* pool,
                       const layers::LayerParallel& par, std::span<const std::uint8_t> padding = {});
    // DP-attention, all_to_all MoE layer: after attention (summed over attention TP), the
    // group's `n` rows, rows [row0, row0 + n) of the step's `rows`, stay on their ranks.
    Status scattered_moe_forward(layers::MoeLayer& moe, std::int64_t n, std::int64_t row0, std::int64_t rows,
                                 ThreadPool* pool, float eps, const std::vector<float>& norm);
    // The logits rows of this rank's group from the hidden states `last_` (n_out rows).
    Status logits_forward(std::int64_t n_out, const BatchInput& batch, ThreadPool* pool, std::vector<float>* out);
    // Fills batch.hidden_out from the last layer's output x_ (last stage).
    void capture_hidden_states(const BatchInput& batch, ThreadPool* pool);
    // Into routed_out_: the logical experts of this rank's n tokens at `moe`, from the rows h
    // f32 [n, hidden] the layer reads.
    void record_routing(const layers::MoeLayer& moe, const float* h, std::int64_t n, ThreadPool* pool);
    Status init_eplb(const LoadOptions& options);
    // --quantization-param-path's factors of this rank's layers (empty when none apply).
    StatusOr<std::vector<float>> kv_scales_from_file(const LoadOptions& options) const;
    // The fp8 KV cache's scales at start-up: how many layers took the checkpoint's or the
    // file's, and a warning where they run on 1.0.
    void log_kv_scales(const std::string& kv_cache_dtype) const;
    StatusOr<std::variant<layers::GqaAttention, layers::MlaAttention>> load_attention(const WeightSource& source,
                                                                                    const std::string& prefix,
                                                                                    const DecoderSpec& spec) const;

    const ModelConfig config_;
    const DType compute_dtype_;
    // What the attention and MLP / expert projections pack an unquantized checkpoint as: fp8
    // under --quantization fp8 (the router and the logits head keep compute_dtype_, as SGLang
    // leaves them unquantized).
    const DType linear_dtype_;
    const DType kv_dtype_;  // --kv-cache-dtype (registry.cpp resolve_kv_cache_dtype checked it)
    // What each part of a layer splits over: MLP / MoE over the TP group (par_); attention,
    // embedding, LM head and dense MLPs over the same unless DP-attention or
    // --moe-dense-tp-size says otherwise.
    layers::LayerParallel par_, attn_par_, embed_par_, head_par_, dense_par_;
    layers::DpAttentionParallel dpa_;
    bool dense_replicated_ = false;  // --moe-dense-tp-size 1
    StageInfo stage_;
    std::int64_t n_heads_ = 0;     // this rank's query heads
    std::int64_t n_kv_heads_ = 0;  // this rank's KV heads
    std::optional<layers::VocabParallelEmbedding> embedding_;  // first stage only
    std::vector<DecoderLayer> layers_;  // the stage's: layers_[i] is layer stage_.layer_begin + i
    std::vector<float> final_norm_;     // f32 [hidden]; last stage only
    std::optional<layers::LogitsHead> lm_head_;  // last stage only
    std::vector<float> inv_freq_;

    // Reused across steps.
    std::vector<float> x_, h_, branch_, last_;  // branch_: an attention or FFN output
    std::vector<float> x_all_, h_all_, out_all_, dp_scratch_;  // DP-attention: every group's rows
    std::vector<float> slice_out_, group_out_;  // DP-attention, scattered MoE: this rank's slice, the gather's buffer
    std::vector<std::uint8_t> pad_rows_;  // DP-attention, max_len: 1 where a gathered row only pads a slot
    std::vector<std::int32_t>* routed_out_ = nullptr;  // BatchInput::routed_experts_out of the pass
    std::vector<std::int32_t> routing_ids_;
    std::vector<float> rope_cos_, rope_sin_;  // f32 [tokens, head_dim/2] of the current pass
    // Per pass: each new token's position and KV row, the tokens that yield logits rows, the
    // sequences as the layers see them.
    std::vector<std::int32_t> positions_;
    std::vector<std::int64_t> kv_rows_, logit_rows_;
    std::vector<layers::SeqSpan> seqs_;
    layers::Scratch scratch_;
    std::unique_ptr<EplbManager> eplb_;  // MoE models only
    bool output_rank_ = true;            // TP rank 0 of the first stage: reports a refused control step
};

Status Decoder::init_eplb(const LoadOptions& options) {
    const ModelConfig& c = config_;
    const eplb::EplbOptions& o = options.eplb;
    if (c.moe.num_experts == 0) {
        if (o.num_redundant_experts > 0 || o.enable || o.init_expert_location != "trivial" ||
            o.recorder_mode != eplb::RecorderMode::kOff || o.report != eplb::ReportMode::kOff)
            return Status::InvalidArgument("--ep-num-redundant-experts, --init-expert-location, --enable-eplb and the "
                                           "expert distribution recorder need a MoE model; " +
                                           c.architecture + " has no routed experts");
        return Status::Ok();
    }
    eplb::ExpertLocationShape shape;
    shape.num_layers = c.num_hidden_layers;
    shape.num_logical = c.moe.num_experts;
    shape.num_physical = c.moe.num_experts + o.num_redundant_experts;
    shape.ep_size = options.moe.ep_size;
    shape.num_groups = c.moe.n_group > 1 ? c.moe.n_group : 0;
    shape.num_nodes = o.num_nodes;
    shape.algorithm = o.algorithm;
    if (shape.num_physical % shape.ep_size != 0)
        return Status::InvalidArgument(std::to_string(c.moe.num_experts) + " experts + --ep-num-redundant-experts " +
                                       std::to_string(o.num_redundant_experts) + " = " +
                                       std::to_string(shape.num_physical) + " physical experts do not split evenly over "
                                       "--ep-size " + std::to_string(shape.ep_size));
    TSR_ASSIGN_OR_RETURN(eplb_, EplbManager::create(o, shape));
    return Status::Ok();
}

Status Decoder::load(const WeightSource& source, const StageInfo& stage, const DecoderSpec& spec,
                     const LoadOptions& options) {
    const ModelConfig& c = config_;
    stage_ = stage;
    const std::int64_t hidden = c.hidden_size;
    TSR_ASSIGN_OR_RETURN(const std::vector<float> file_kv_scales, kv_scales_from_file(options));
    if (stage_.first) {
        TSR_ASSIGN_OR_RETURN(embedding_, layers::VocabParallelEmbedding::load(source, "model.embed_tokens.weight",
                                                                            c.vocab_size, hidden, embed_par_));
        source.drop_resident_pages();
    }
    TSR_RETURN_IF_ERROR(init_eplb(options));
    // Tensor names keep the global layer index: every stage reads the same checkpoint.
    for (int l = stage_.layer_begin; l < stage_.layer_end; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        TSR_ASSIGN_OR_RETURN(auto input_norm, layers::load_f32_vector(source, p + "input_layernorm.weight", hidden));
        TSR_ASSIGN_OR_RETURN(auto attention, load_attention(source, p + "self_attn.", spec));
        TSR_ASSIGN_OR_RETURN(auto post_norm,
                             layers::load_f32_vector(source, p + "post_attention_layernorm.weight", hidden));
        if (c.is_moe_layer(l)) {
            layers::MoeSpec moe_spec = spec.moe(c, l);
            moe_spec.compute_dtype = linear_dtype_;
            moe_spec.layer = l;
            TSR_ASSIGN_OR_RETURN(auto moe, layers::MoeLayer::load(source, moe_spec, par_, eplb_->initial_dispatch()));
            layers_.push_back({std::move(input_norm), std::move(attention), std::move(post_norm), std::move(moe)});
        } else {
            TSR_ASSIGN_OR_RETURN(auto mlp, layers::GatedMlp::load_dense(source, p + "mlp.", hidden, c.intermediate_size,
                                                                        linear_dtype_, dense_par_));
            layers_.push_back({std::move(input_norm), std::move(attention), std::move(post_norm), std::move(mlp)});
        }
        source.drop_resident_pages();  // this layer's file bytes are packed now
    }
    // The file's factors replace the checkpoint's: SGLang loads them after the weights
    // (model_runner.py load_kv_cache_scales).
    for (std::size_t i = 0; i < file_kv_scales.size() && i < layers_.size(); ++i) {
        const float factor = file_kv_scales[i];
        std::visit([&](auto& a) { a.set_kv_scales({factor, factor, "the --quantization-param-path file"}); },
                   layers_[i].attention);
    }
    if (is_fp8(kv_dtype_) && output_rank_) log_kv_scales(options.kv_cache_dtype);
    TSR_ASSIGN_OR_RETURN(auto heads,
                         layers::shard_attention(c.num_attention_heads, c.num_key_value_heads, attn_par_.tp));
    n_heads_ = heads.q_heads.count;
    n_kv_heads_ = heads.kv_heads.count;
    if (stage_.last) {
        TSR_ASSIGN_OR_RETURN(final_norm_, layers::load_f32_vector(source, "model.norm.weight", hidden));
        const bool tied = c.tie_word_embeddings || !source.contains("lm_head.weight");
        TSR_ASSIGN_OR_RETURN(lm_head_, layers::LogitsHead::load(source, tied ? "model.embed_tokens.weight" : "lm_head.weight",
                                                                c.vocab_size, hidden, compute_dtype_, head_par_));
        source.drop_resident_pages();
    }
    inv_freq_ = loader::rope_inv_freq(c);
    if (eplb_) {
        std::vector<layers::MoeLayer*> moe_layers;
        for (auto& layer : layers_)
            if (auto* moe = std::get_if<layers::MoeLayer>(&layer.ffn)) moe_layers.push_back(moe);
        eplb_->attach(std::move(moe_layers), par_);
    }
    return Status::Ok();
}

StatusOr<std::vector<float>> Decoder::kv_scales_from_file(const LoadOptions& options) const {
    if (options.quantization_param_path.empty()) return std::vector<float>();
    // As SGLang (model_runner.py): the file serves an fp8_e4m3 cache only.
    if (options.kv_cache_dtype != "fp8_e4m3") {
        if (output_rank_)
            TSR_LOG(INFO, "--quantization-param-path {} has no effect with --kv-cache-dtype {}: it gives the scales "
                    "of an fp8_e4m3 cache", options.quantization_param_path, options.kv_cache_dtype);
        return std::vector<float>();
    }
    TSR_ASSIGN_OR_RETURN(std::vector<float> all,
                         loader::read_kv_cache_scales_file(options.quantization_param_path,
                                                           {options.tp_rank, options.tp_size,
                                                            static_cast<int>(config_.num_hidden_layers),
                                                            config_.model_type}));
    return std::vector<float>(all.begin() + stage_.layer_begin, all.begin() + stage_.layer_end);
}

void Decoder::log_kv_scales(const std::string& kv_cache_dtype) const {
    int scaled = 0, mla_split = 0;
    const layers::KvScales* first = nullptr;
    for (const DecoderLayer& layer : layers_) {
        const layers::KvScales& scales = std::visit([](const auto& a) -> const layers::KvScales& {
            return a.kv_scales();
        }, layer.attention);
        if (scales.source.empty()) continue;
        ++scaled;
        if (first == nullptr) first = &scales;
        if (std::holds_alternative<layers::MlaAttention>(layer.attention) && scales.v != scales.k) ++mla_split;
    }
    const auto total = layers_.size();
    if (first != nullptr) {
        TSR_LOG(INFO, "{} KV cache: k_scale / v_scale from {} in {} of {} layers (the first: k {}, v {})",
                kv_cache_dtype, first->source, scaled, total, first->k, first->v);
    }
    if (mla_split > 0) {
        TSR_LOG(WARN, "{} KV cache: {} MLA layers have a v_scale other than their k_scale; their latent is keys and "
                "values both, and is stored and read with k_scale", kv_cache_dtype, mla_split);
    }
    if (scaled < static_cast<int>(total)) {
        TSR_LOG(WARN, "{} KV cache with a scaling factor of 1.0 in {} of {} layers: the checkpoint has no k_scale / "
                "v_scale there; if that is not intended, check that its KV cache scales are saved, or give them "
                "with --quantization-param-path", kv_cache_dtype, static_cast<int>(total) - scaled, total);
    }
}

StatusOr<std::variant<layers::GqaAttention, layers::MlaAttention>> Decoder::load_attention(
    const WeightSource& source, const std::string& prefix, const DecoderSpec& spec) const {
    const ModelConfig& c = config_;
    const auto eps = static_cast<float>(c.rms_norm_eps);
    if (spec.mla) {
        auto mla = layers::MlaAttention::load(source,
                                              {prefix, c.hidden_size, c.num_attention_heads, c.mla, eps,
                                               c.attention_scale(), c.rope_magnitude(), linear_dtype_},
                                              attn_par_);
        if (!mla.ok()) return mla.status();
        // Built in place: GCC 12 misreports the moved-from temporary's vectors as uninitialized.
        return std::variant<layers::GqaAttention, layers::MlaAttention>(std::in_place_type<layers::MlaAttention>,
                                                                        std::move(*mla));
    }
    TSR_ASSIGN_OR_RETURN(auto gqa, layers::GqaAttention::load(source,
                                                              {prefix, c.hidden_size, c.num_attention_heads,
                                                               c.num_key_value_heads, c.head_dim, spec.qkv_bias,
                                                               spec.qk_norm, eps, linear_dtype_},
                                                              attn_par_));
    return std::variant<layers::GqaAttention, layers::MlaAttention>(std::move(gqa));
}

std::size_t Decoder::weight_bytes_per_token() const {
    std::size_t bytes = lm_head_ ? lm_head_->weight_bytes() : 0;
    for (const auto& l : layers_) {
        bytes += std::visit([](const auto& a) { return a.weight_bytes(); }, l.attention);
        if (const auto* mlp = std::get_if<layers::GatedMlp>(&l.ffn)) bytes += mlp->weight_bytes();
        if (const auto* moe = std::get_if<layers::MoeLayer>(&l.ffn)) bytes += moe->weight_bytes_per_token();
    }
    return bytes;
}

std::size_t Decoder::weight_bytes() const {
    std::size_t bytes = (lm_head_ ? lm_head_->weight_bytes() : 0) + (embedding_ ? embedding_->weight_bytes() : 0);
    for (const auto& l : layers_) {
        bytes += std::visit([](const auto& a) { return a.weight_bytes(); }, l.attention);
        if (const auto* mlp = std::get_if<layers::GatedMlp>(&l.ffn)) bytes += mlp->weight_bytes();
        if (const auto* moe = std::get_if<layers::MoeLayer>(&l.ffn)) bytes += moe->weight_bytes();
    }
    return bytes;
}

double Decoder::linear_flops_per_token() const {
    double flops = 0;
    for (const auto& l : layers_) {
        flops += std::visit([](const auto& a) { return a.flops_per_token(); }, l.attention);
        if (const auto* mlp = std::get_if<layers::GatedMlp>(&l.ffn)) flops += mlp->flops_per_token();
        if (const auto* moe = std::get_if<layers::MoeLayer>(&l.ffn)) flops += moe->flops_per_token();
    }
    return flops;
}

double Decoder::attention_flops_at(std::int64_t pos) const {
    // QKᵀ and PV over pos + 1 keys, per head and layer of this stage. MLA (absorbed, as decode
    // runs it): scores over the latent + rope row, values over the latent.
    const double per_key = config_.is_mla()
                               ? 2.0 * static_cast<double>(2 * config_.mla.kv_lora_rank + config_.mla.qk_rope_head_dim)
                               : 2.0 * 2.0 * static_cast<double>(config_.head_dim);
    return per_key * static_cast<double>(pos + 1) * n_heads_ * stage_.num_layers();
}

layers::MoeTraffic Decoder::moe_traffic() const {
    layers::MoeTraffic sum;
    for (const auto& l : layers_) {
        if (const auto* moe = std::get_if<layers::MoeLayer>(&l.ffn)) {
            const layers::MoeTraffic& t = moe->traffic();
            sum.tokens += t.tokens;
            sum.dispatch_bytes += t.dispatch_bytes;
            sum.combine_bytes += t.combine_bytes;
            sum.gather_bytes += t.gather_bytes;
            sum.reduce_bytes += t.reduce_bytes;
        }
    }
    return sum;
}

Status Decoder::check_batch(const BatchInput& batch, const kvcache::KvView& kv) const {
    const ModelConfig& c = config_;
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    // Under DP-attention a group with no requests still joins the step (an idle batch).
    if (n == 0 && !dpa_.enabled()) return Status::InvalidArgument("forward of zero tokens");
    std::int64_t covered = 0;
    for (const auto& seq : batch.seqs) covered += seq.n_tokens;
    if (covered != n)
        return Status::InvalidArgument("batch sequences cover " + std::to_string(covered) + " of " + std::to_string(n) +
                                       " tokens");
    const std::int64_t hidden = c.hidden_size;
    if (stage_.first) {
        if (!batch.hidden_in.empty())
            return Status::InvalidArgument("the first pipeline stage embeds its tokens but was given " +
                                           std::to_string(batch.hidden_in.size()) + " hidden-state values");
        // Only the stage that indexes the embedding table needs the ids to be in range.
        for (std::int32_t t : batch.tokens) {
            if (t < 0 || t >= c.vocab_size) {
                return Status::InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
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
    return check_dp_attention(batch);
}

Status Decoder::check_dp_attention(const BatchInput& batch) const {
    const layers::DpAttentionStep* step = batch.dp_attention;
    if (!dpa_.enabled()) {
        if (step != nullptr) return Status::Internal("a DP-attention step for a model loaded without DP-attention");
        return Status::Ok();
    }
    if (step == nullptr) return Status::Internal("DP-attention: the step carries no token counts of the other groups");
    const auto groups = static_cast<std::size_t>(dpa_.dp_size);
    if (step->num_tokens.size() != groups || step->num_logit_rows.size() != groups)
        return Status::Internal("DP-attention: token counts of " + std::to_string(step->num_tokens.size()) +
                                " groups for " + std::to_string(groups));
    std::int64_t logit_rows = 0;
    for (const auto& seq : batch.seqs)
        logit_rows += models::logit_rows(seq);
    const auto me = static_cast<std::size_t>(dpa_.dp_rank);
    if (step->num_tokens[me] != static_cast<std::int64_t>(batch.tokens.size()) ||
        (stage_.last && step->num_logit_rows[me] != logit_rows))
        return Status::Internal("DP-attention: group " + std::to_string(me) + " announced " +
                                std::to_string(step->num_tokens[me]) + " tokens / " +
                                std::to_string(step->num_logit_rows[me]) + " logits rows but runs " +
                                std::to_string(batch.tokens.size()) + " / " + std::to_string(logit_rows));
    return Status::Ok();
}

Status Decoder::ffn_forward(DecoderLayer& layer, const float* h, std::int64_t rows, float* out, ThreadPool* pool,
                            const layers::LayerParallel& par, std::span<const std::uint8_t> padding) {
    if (auto* mlp = std::get_if<layers::GatedMlp>(&layer.ffn))
        return mlp->forward_reduced(layers::LayerInput{.x = h}, rows, out, scratch_, pool, par);
    return std::get<layers::MoeLayer>(layer.ffn).forward(h, rows, out, scratch_, pool, par, padding);
}

Status Decoder::layer_forward(DecoderLayer& layer, const kvcache::KvView& kv, std::size_t l,
                              const layers::LayerBatch& lb, const layers::DpBufferLayout* gathered, ThreadPool* pool) {
    const std::int64_t n = lb.n_tokens;
    const std::int64_t hidden = config_.hidden_size;
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    // Under DP-attention the attention output stays this rank's partial sum: the gather before
    // the MLP sums it over attention TP (dp_gather_partial), residual included. Under an
    // all_to_all dispatcher a MoE layer's tokens stay with their group instead and go straight
    // to their experts' ranks: no gather before it, no scatter after (SGLang's
    // communicator.py LayerScatterModes._compute_mlp_mode keeps a2a MoE layers SCATTERED).
    auto* moe = std::get_if<layers::MoeLayer>(&layer.ffn);
    const bool scattered = gathered != nullptr && moe != nullptr &&
                           par_.moe.backend == layers::MoeA2aBackend::kAllToAll && par_.moe.ep_size > 1;
    layers::LayerParallel attn = attn_par_;
    attn.defer_reduce = gathered != nullptr && !scattered;
    if (n > 0) {
        // The input norm runs inside the attention's first projection (layers/layer_input.h).
        const layers::LayerInput normed{.x = x_.data(), .norm_weight = layer.input_norm.data(), .eps = eps};
        if (auto* mla = std::get_if<layers::MlaAttention>(&layer.attention)) {
            TSR_RETURN_IF_ERROR(mla->forward(normed, lb, kv.k[l], kv.dtype, branch_.data(), scratch_, attn));
        } else {
            TSR_RETURN_IF_ERROR(std::get<layers::GqaAttention>(layer.attention)
                                    .forward(normed, lb, kv.k[l], kv.v[l], kv.dtype, branch_.data(), scratch_, attn));
        }
    }
    if (scattered)
        return scattered_moe_forward(*moe, n, gathered->local_offset(dpa_.dp_rank), gathered->rows, pool, eps,
                                     layer.post_attention_norm);
    if (gathered == nullptr) {
        if (n == 0) return Status::Ok();
        const layers::LayerParallel& ffn_par = std::holds_alternative<layers::GatedMlp>(layer.ffn) ? dense_par_ : par_;
        if (moe == nullptr) {
            // A dense MLP's norm runs inside its gate / up projection's operand.
            kernels::add_inplace(x_.data(), branch_.data(), n * hidden, pool);
            const layers::LayerInput normed{
                .x = x_.data(), .norm_weight = layer.post_attention_norm.data(), .eps = eps};
            TSR_RETURN_IF_ERROR(std::get<layers::GatedMlp>(layer.ffn)
                                    .forward_reduced(normed, n, branch_.data(), scratch_, pool, ffn_par));
        } else {
            // The router and the experts read the same normed rows.
            kernels::add_rms_norm(x_.data(), branch_.data(), layer.post_attention_norm.data(), h_.data(), n, hidden,
                                  eps, pool);
            if (routed_out_ != nullptr) record_routing(*moe, h_.data(), n, pool);
            TSR_RETURN_IF_ERROR(ffn_forward(layer, h_.data(), n, branch_.data(), pool, ffn_par));
        }
        kernels::add_inplace(x_.data(), branch_.data(), n * hidden, pool);
        return Status::Ok();
    }
    // The residual joins once per group: from its attention-TP rank 0.
    if (n > 0 && dpa_.tp_rank == 0) kernels::add_inplace(branch_.data(), x_.data(), n * hidden, pool);
    const std::int64_t rows = gathered->rows;
    TSR_RETURN_IF_ERROR(layers::dp_gather({branch_.data(), static_cast<std::size_t>(n * hidden)}, hidden, *gathered,
                                          /*partial=*/true, dpa_, x_all_));
    h_all_.resize(static_cast<std::size_t>(rows * hidden));
    out_all_.resize(static_cast<std::size_t>(rows * hidden));
    kernels::rms_norm(x_all_.data(), layer.post_attention_norm.data(), h_all_.data(), rows, hidden, eps, pool);
    if (routed_out_ != nullptr && moe != nullptr)
        record_routing(*moe, h_all_.data() + gathered->local_offset(dpa_.dp_rank) * hidden, n, pool);
    // Under max_len padding the MLP leaves its output unreduced and the reduce-scatter back to
    // the groups sums it (SGLang's should_use_reduce_scatter).
    layers::LayerParallel ffn = par_;
    ffn.defer_reduce = gathered->mode == layers::DpPaddingMode::kMaxLen;
    TSR_RETURN_IF_ERROR(ffn_forward(layer, h_all_.data(), rows, out_all_.data(), pool, ffn, pad_rows_));
    if (ffn.defer_reduce) {
        TSR_RETURN_IF_ERROR(layers::dp_reduce_scatter(out_all_, hidden, *gathered, dpa_, dp_scratch_, branch_.data()));
    } else {
        layers::dp_scatter(out_all_, hidden, *gathered, dpa_, branch_.data());
    }
    if (n == 0) return Status::Ok();
    layers::dp_scatter(x_all_, hidden, *gathered, dpa_, x_.data());
    kernels::add_inplace(x_.data(), branch_.data(), n * hidden, pool);
    return Status::Ok();
}

Status Decoder::scattered_moe_forward(layers::MoeLayer& moe, std::int64_t n, std::int64_t row0, std::int64_t rows,
                                     ThreadPool* pool, float eps, const std::vector<float>& norm) {
    const std::int64_t hidden = config_.hidden_size;
    if (n > 0) {
        kernels::add_rms_norm(x_.data(), branch_.data(), norm.data(), h_.data(), n, hidden, eps, pool);
        if (routed_out_ != nullptr) record_routing(moe, h_.data(), n, pool);
    }
    // The attention-TP ranks of a group hold the same rows: each sends its slice, and the
    // slices' outputs are gathered back within the group.
    if (dpa_.tp_size == 1) {
        TSR_RETURN_IF_ERROR(moe.forward_scattered(h_.data(), n, row0, rows, branch_.data(), scratch_, pool, par_));
    } else {
        const layers::AttnTpSlice slice = layers::attn_tp_slice(n, dpa_);
        slice_out_.resize(static_cast<std::size_t>(slice.per * hidden));  // rows past the group's are dropped
        TSR_RETURN_IF_ERROR(moe.forward_scattered(h_.data() + slice.begin * hidden, slice.count, row0 + slice.begin,
                                                  rows, slice_out_.data(), scratch_, pool, par_));
        TSR_RETURN_IF_ERROR(layers::attn_tp_gather_slices(slice_out_, n, hidden, dpa_, group_out_, branch_.data()));
    }
    if (n > 0) kernels::add_inplace(x_.data(), branch_.data(), n * hidden, pool);
    return Status::Ok();
}

Status Decoder::logits_forward(std::int64_t n_out, const BatchInput& batch, ThreadPool* pool, std::vector<float>* out) {
    const std::int64_t hidden = config_.hidden_size;
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    out->clear();
    if (n_out > 0) kernels::rms_norm(last_.data(), final_norm_.data(), last_.data(), n_out, hidden, eps, pool);
    if (!config_.is_generation) {
        // SGLang's layers/pooler.py Pooler (LAST, normalize=True): the row is the pooled state.
        // No collective: every rank holds the whole hidden state, and every rank of the job
        // takes this path.
        out->assign(last_.begin(), last_.begin() + n_out * hidden);
        for (std::int64_t r = 0; r < n_out; ++r) kernels::l2_normalize(out->data() + r * hidden, hidden);
        return Status::Ok();
    }
    // Every rank of the head's group runs the same rows, so all of them skip (or issue) its
    // gather together: the attention-TP group under --enable-dp-lm-head, else the TP group.
    const layers::DpAttentionStep* step = batch.dp_attention;
    if (step == nullptr || dpa_.dp_lm_head) {
        if (n_out == 0) return Status::Ok();
        return lm_head_->forward(last_.data(), n_out, out, pool, head_par_);
    }
    // The head spans the TP group: every group's rows are gathered (replicated across attention
    // TP), the logits computed for all, and this group's taken back (logits_processor.py).
    std::int64_t total = 0;
    for (std::int64_t rows : step->num_logit_rows) total += rows;
    if (total == 0) return Status::Ok();
    const layers::DpBufferLayout layout = layers::dp_buffer_layout(
        layers::dp_padding_mode(step->any_extend, step->num_logit_rows), step->num_logit_rows, dpa_.tp_size);
    TSR_RETURN_IF_ERROR(layers::dp_gather({last_.data(), static_cast<std::size_t>(n_out * hidden)}, hidden, layout,
                                          /*partial=*/false, dpa_, x_all_));
    TSR_RETURN_IF_ERROR(lm_head_->forward(x_all_.data(), layout.rows, &out_all_, pool, head_par_));
    const std::int64_t vocab = config_.vocab_size;
    const auto begin = out_all_.begin() + layout.local_offset(dpa_.dp_rank) * vocab;
    out->assign(begin, begin + n_out * vocab);
    return Status::Ok();
}

void Decoder::record_routing(const layers::MoeLayer& moe, const float* h, std::int64_t n, ThreadPool* pool) {
    const std::int64_t k = moe.top_k(), width = config_.num_hidden_layers * k;
    routing_ids_.resize(static_cast<std::size_t>(n * k));
    moe.logical_topk(h, n, routing_ids_.data(), scratch_, pool);
    for (std::int64_t t = 0; t < n; ++t)
        std::copy_n(routing_ids_.begin() + t * k, k, routed_out_->begin() + t * width + moe.layer() * k);
}

void Decoder::capture_hidden_states(const BatchInput& batch, ThreadPool* pool) {
    const std::int64_t hidden = config_.hidden_size;
    std::vector<float>& rows = *batch.hidden_out;
    rows.clear();
    std::int64_t end = 0;  // one past the sequence's last token in x_
    for (const SequenceInput& seq : batch.seqs) {
        end += seq.n_tokens;
        const std::int64_t n = std::min(seq.hidden_rows, seq.n_tokens);
        rows.insert(rows.end(), x_.begin() + (end - n) * hidden, x_.begin() + end * hidden);
    }
    const auto n_rows = static_cast<std::int64_t>(rows.size()) / hidden;
    if (n_rows > 0)
        kernels::rms_norm(rows.data(), final_norm_.data(), rows.data(), n_rows, hidden,
                          static_cast<float>(config_.rms_norm_eps), pool);
}

Status Decoder::forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool, std::vector<float>* out) {
    if (batch.hidden_out != nullptr) batch.hidden_out->clear();
    const bool idle_everywhere = [&] {
        if (batch.dp_attention == nullptr) return batch.tokens.empty();
        for (std::int64_t n : batch.dp_attention->num_tokens)
            if (n > 0) return false;
        return true;
    }();
    if (batch.expert_record != eplb::ExpertRecordCommand::kNone) {
        // A refused command is the output rank's to report; any other rank goes on, because a
        // failed forward ends a follower (and with it the job). A pass with tokens anywhere
        // goes on everywhere: its collectives need every rank.
        Status s = eplb_ ? eplb_->on_command(batch.expert_record)
                         : Status::InvalidArgument("expert distribution recording needs a MoE model; " +
                                                   config_.architecture + " has no routed experts");
        if (!s.ok() && output_rank_ && idle_everywhere) return s;
        if (!s.ok() && output_rank_) TSR_LOG_C(ERROR, "eplb", "{}", s.message());
        if (batch.tokens.empty() && batch.seqs.empty() && idle_everywhere) {  // a control step
            out->clear();
            return Status::Ok();
        }
    }
    TSR_RETURN_IF_ERROR(check_batch(batch, kv));
    const ModelConfig& c = config_;
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    const std::int64_t hidden = c.hidden_size;
    routed_out_ = batch.routed_experts_out;
    if (routed_out_ != nullptr)
        routed_out_->assign(static_cast<std::size_t>(n * c.num_hidden_layers * c.moe.num_experts_per_tok), 0);
    x_.resize(n * hidden);
    h_.resize(n * hidden);
    branch_.resize(n * hidden);
    // Position and KV row of every new token, in batch order.
    // Members, so that a decode step allocates nothing once they have grown.
    std::vector<std::int32_t>& positions = positions_;
    std::vector<std::int64_t>& kv_rows = kv_rows_;
    std::vector<std::int64_t>& logit_rows = logit_rows_;  // token whose hidden state yields a logits row
    std::vector<layers::SeqSpan>& seqs = seqs_;
    positions.resize(static_cast<std::size_t>(n));
    kv_rows.resize(static_cast<std::size_t>(n));
    logit_rows.clear();
    seqs.clear();
    std::int64_t t0 = 0;
    for (const auto& seq : batch.seqs) {
        seqs.push_back({seq.n_tokens, seq.start_pos, seq.slots});
        for (std::int64_t i = 0; i < seq.n_tokens; ++i) {
            const std::int64_t pos = seq.start_pos + i;
            positions[t0 + i] = static_cast<std::int32_t>(pos);
            kv_rows[t0 + i] = seq.slots == nullptr ? pos : seq.slots[pos];
        }
        if (stage_.last)
            for (std::int64_t i = seq.n_tokens - models::logit_rows(seq); i < seq.n_tokens; ++i)
                logit_rows.push_back(t0 + i);
        t0 += seq.n_tokens;
    }

    if (n > 0 && stage_.first) {
        TSR_RETURN_IF_ERROR(embedding_->forward(batch.tokens, x_.data(), embed_par_));
    } else if (n > 0) {
        std::copy(batch.hidden_in.begin(), batch.hidden_in.end(), x_.begin());
    }
    // Rotary angles once per pass; every layer rotates with the same ones.
    const std::int64_t half = c.rope_dim() / 2;
    rope_cos_.resize(static_cast<std::size_t>(n * half));
    rope_sin_.resize(static_cast<std::size_t>(n * half));
    kernels::rope_angles(positions.data(), n, inv_freq_.data(), half, rope_cos_.data(), rope_sin_.data());
    const layers::LayerBatch lb{n, kv_rows.data(), rope_cos_.data(), rope_sin_.data(), seqs, pool};
    // DP-attention: where every group's tokens sit while the MLP / MoE runs over all of them.
    std::optional<layers::DpBufferLayout> gathered;
    if (const layers::DpAttentionStep* step = batch.dp_attention) {
        gathered = layers::dp_buffer_layout(layers::dp_padding_mode(step->any_extend, step->num_tokens),
                                            step->num_tokens, dpa_.tp_size);
        pad_rows_.assign(static_cast<std::size_t>(gathered->rows), 1);
        for (std::size_t g = 0; g < gathered->counts.size(); ++g)
            std::fill_n(pad_rows_.begin() + gathered->offsets[g], gathered->counts[g], 0);
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
        DecoderLayer& layer = layers_[l];
        const bool replicated_dense = dense_replicated_ && std::holds_alternative<layers::GatedMlp>(layer.ffn);
        TSR_RETURN_IF_ERROR(layer_forward(layer, kv, l, lb, gathered && !replicated_dense ? &*gathered : nullptr, pool));
    }
    if (eplb_) TSR_RETURN_IF_ERROR(eplb_->on_forward_pass_end(scratch_, pool));
    if (!stage_.last) {
        out->assign(x_.begin(), x_.begin() + n * hidden);
        return Status::Ok();
    }
    if (batch.hidden_out != nullptr) capture_hidden_states(batch, pool);
    const auto n_out = static_cast<std::int64_t>(logit_rows.size());
    last_.resize(n_out * hidden);
    for (std::int64_t r = 0; r < n_out; ++r)
        std::copy(x_.begin() + logit_rows[r] * hidden, x_.begin() + (logit_rows[r] + 1) * hidden,
                  last_.begin() + r * hidden);
    return logits_forward(n_out, batch, pool, out);
}
}  // namespace

StatusOr<std::unique_ptr<Model>> load_decoder(const ModelConfig& config, const WeightSource& source,
                                              DType compute_dtype, const LoadOptions& options,
                                              const DecoderSpec& spec) {
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
    auto model = std::make_unique<Decoder>(config, compute_dtype, options);
    TSR_RETURN_IF_ERROR(model->load(source, stage, spec, options));
    return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tessera::models
