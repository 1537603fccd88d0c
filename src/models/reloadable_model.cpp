#include "models/reloadable_model.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "base/logging.h"
#include "dist/process_group.h"

namespace tessera::models {

namespace {

// The config.json fields that shape the weights and the KV cache, or change what a forward
// computes, as text: a folder that differs in any of them is another model.
std::vector<std::pair<std::string, std::string>> model_fields(const Model& m) {
    const loader::ModelConfig& c = m.config();
    const kvcache::KvCacheShape kv = m.kv_cache_shape();
    return {{"architectures", c.architecture},
            {"hidden_size", std::to_string(c.hidden_size)},
            {"intermediate_size", std::to_string(c.intermediate_size)},
            {"num_hidden_layers", std::to_string(c.num_hidden_layers)},
            {"num_attention_heads", std::to_string(c.num_attention_heads)},
            {"num_key_value_heads", std::to_string(c.num_key_value_heads)},
            {"head_dim", std::to_string(c.head_dim)},
            {"vocab_size", std::to_string(c.vocab_size)},
            {"max_position_embeddings", std::to_string(c.max_position_embeddings)},
            {"tie_word_embeddings", c.tie_word_embeddings ? "true" : "false"},
            {"rope_theta", fmt::format("{}", c.rope_theta)},
            {"rope_scaling", fmt::format("{} x{}", c.rope_scaling.type, c.rope_scaling.factor)},
            {"rms_norm_eps", fmt::format("{}", c.rms_norm_eps)},
            {"num_experts", std::to_string(c.moe.num_experts)},
            {"num_experts_per_tok", std::to_string(c.moe.num_experts_per_tok)},
            {"moe_intermediate_size", std::to_string(c.moe.moe_intermediate_size)},
            {"shared_expert_intermediate_size", std::to_string(c.moe.shared_expert_intermediate_size)},
            {"kv_lora_rank", std::to_string(c.mla.kv_lora_rank)},
            {"q_lora_rank", std::to_string(c.mla.q_lora_rank)},
            {"weight dtype", std::string(dtype_name(m.compute_dtype()))},
            {"projection dtype", std::string(dtype_name(m.linear_weight_dtype()))},
            {"KV cache bytes per token", std::to_string(kv.bytes_per_token())}};
}

}  // namespace

std::string weights_mismatch(const Model& served, const Model& fresh) {
    const auto a = model_fields(served);
    const auto b = model_fields(fresh);
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].second != b[i].second)
            return fmt::format("the new folder is another model: its {} is {}, the served model's is {}", a[i].first,
                               b[i].second, a[i].second);
    }
    return "";
}

ReloadableModel::ReloadableModel(std::unique_ptr<Model> model, LoadOptions options) : options_(std::move(options)) {
    serve(std::move(model));
}

void ReloadableModel::serve(std::unique_ptr<Model> model) {
    model_ = std::move(model);
    facts_ = {.config = model_->config(),
              .kv_cache_shape = model_->kv_cache_shape(),
              .stage = model_->stage(),
              .compute_dtype = model_->compute_dtype(),
              .linear_weight_dtype = model_->linear_weight_dtype(),
              .weight_bytes = model_->weight_bytes(),
              .weight_bytes_per_token = model_->weight_bytes_per_token(),
              .linear_flops_per_token = model_->linear_flops_per_token()};
}

Status ReloadableModel::forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                                std::vector<float>* out) {
    if (batch.release_memory.any()) {
        out->clear();
        // scheduler_update_weights_mixin.py release_memory_occupation: the scheduler dropped
        // every request's KV first.
        if (batch.release_memory.weights && model_ != nullptr) {
            model_.reset();
            staged_.reset();
            TSR_LOG(INFO, "weights released: {:.1f} MB", static_cast<double>(facts_.weight_bytes) / 1e6);
        }
        if (batch.release_memory.kv_cache) kvcache::release_pages(kv);
        return Status::Ok();
    }
    if (batch.load_weights == nullptr) {
        if (model_ == nullptr)
            return Status::Internal(
                "the weights were released by /release_memory_occupation: /resume_memory_occupation loads them again");
        return model_->forward(batch, kv, pool, out);
    }
    out->clear();
    const WeightsSource& source = *batch.load_weights;
    if (source.phase == WeightsPhase::kDiscard) {
        staged_.reset();
        return Status::Ok();
    }
    if (source.phase == WeightsPhase::kCommit) {
        if (staged_ == nullptr) return Status::Internal("a weight update committed with nothing loaded");
        serve(std::move(staged_));
        options_ = std::move(staged_options_);
        return Status::Ok();
    }
    staged_.reset();
    Status s = source.earlier_stages_loaded
                   ? load(source)
                   : Status::InvalidArgument("an earlier pipeline stage could not load its share of the weights");
    if (batch.weights_loaded != nullptr) *batch.weights_loaded = s.ok();
    if (s.ok() || (stage().first && options_.tp_rank == 0)) return s;
    if (source.earlier_stages_loaded && options_.tp_rank == 0)
        TSR_LOG(WARN, "update_weights_from_disk: {}", s.message());
    return Status::Ok();
}

Status ReloadableModel::load(const WeightsSource& source) {
    const auto t0 = std::chrono::steady_clock::now();
    LoadOptions options = options_;
    options.model_path = source.model_path;
    if (!source.load_format.empty()) options.load_format = source.load_format;
    std::string why;
    StatusOr<std::unique_ptr<Model>> fresh = Status::Internal("not loaded");
    if (options.load_format != "auto" && options.load_format != "safetensors") {
        // model_runner.py update_weights_from_disk takes DefaultModelLoader's formats only.
        why = "load_format " + options.load_format + " cannot update weights: use auto or safetensors";
    } else {
        fresh = load_model(options);
        // *this answers from what the served model is, also while its weights are released.
        why = fresh.ok() ? weights_mismatch(*this, **fresh) : fresh.status().message();
    }
    // Every rank of the group has its share, or none keeps one.
    if (options_.tp_group != nullptr) {
        std::int64_t loaded[1] = {why.empty() ? 1 : 0};
        TSR_RETURN_IF_ERROR(options_.tp_group->all_reduce(std::span<std::int64_t>(loaded), dist::ReduceOp::kMin));
        if (loaded[0] == 0 && why.empty())
            why = "another tensor parallel rank could not load its share of the weights (its log says why)";
    }
    // The reason alone: the weight-update route frames it as SGLang's message, a resume does not.
    if (!why.empty()) return Status::InvalidArgument(why);
    staged_ = std::move(fresh).value();
    staged_options_ = std::move(options);
    TSR_LOG(INFO, "weights of {} loaded in {:.2f} s", source.model_path,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return Status::Ok();
}

}  // namespace tessera::models
