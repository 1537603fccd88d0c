#pragma once
// models/reloadable_model.h — the served model as /update_weights_from_disk sees it (SGLang's
// model_runner.py update_weights_from_disk): every call goes to the model it holds, and the
// update's control steps (BatchInput::load_weights) change it in two phases. kLoad loads the
// folder with the launch's options beside the current weights, checks that it describes the
// same model (architecture, sizes, KV layout, weight types) and agrees with the rest of the TP
// group that every rank has its share; kCommit then swaps the loaded weights in, kDiscard
// drops them. The leader commits only when every pipeline stage loaded, so any failure keeps
// the weights every rank had. /release_memory_occupation's step drops the weights (and gives
// the KV pool's pages back); the model then answers what it is from what it was, and a kLoad
// and kCommit of the served folder bring the weights back. Called by the executor thread only,
// as Model::forward.

#include <memory>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "models/model.h"

namespace tessera::models {

class ReloadableModel final : public Model {
 public:
    ReloadableModel(std::unique_ptr<Model> model, LoadOptions options);

    // The served model's, also while its weights are released.
    const loader::ModelConfig& config() const override { return facts_.config; }
    kvcache::KvCacheShape kv_cache_shape() const override { return facts_.kv_cache_shape; }
    StageInfo stage() const override { return facts_.stage; }
    DType compute_dtype() const override { return facts_.compute_dtype; }
    DType linear_weight_dtype() const override { return facts_.linear_weight_dtype; }
    std::size_t weight_bytes() const override { return facts_.weight_bytes; }
    std::size_t weight_bytes_per_token() const override { return facts_.weight_bytes_per_token; }
    double linear_flops_per_token() const override { return facts_.linear_flops_per_token; }
    double attention_flops_at(std::int64_t pos) const override {
        return model_ ? model_->attention_flops_at(pos) : 0.0;
    }
    layers::MoeTraffic moe_traffic() const override { return model_ ? model_->moe_traffic() : layers::MoeTraffic{}; }
    // /release_memory_occupation dropped the weights, and no update or resume loaded them since.
    bool weights_released() const { return model_ == nullptr; }

    // A weight update's step. A failed kLoad is an error on the leader (the first stage's TP
    // rank 0) only, since a failed forward ends any other rank's loop; every rank tells
    // BatchInput::weights_loaded.
    Status forward(const BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                   std::vector<float>* out) override;
    using Model::forward;

 private:
    // kLoad's work: staged_ on success, else why not.
    Status load(const WeightsSource& source);

    // Takes `model` as the served one, and what it is as facts_.
    void serve(std::unique_ptr<Model> model);

    // What the served model is: the weights may be gone, these stay.
    struct Facts {
        loader::ModelConfig config;
        kvcache::KvCacheShape kv_cache_shape;
        StageInfo stage;
        DType compute_dtype = DType::kF32;
        DType linear_weight_dtype = DType::kF32;
        std::size_t weight_bytes = 0;
        std::size_t weight_bytes_per_token = 0;
        double linear_flops_per_token = 0.0;
    };

    std::unique_ptr<Model> model_;  // null while released
    Facts facts_;
    LoadOptions options_;  // the launch's, with the folder the weights came from
    std::unique_ptr<Model> staged_;  // loaded, not yet committed
    LoadOptions staged_options_;
};

// Why a model loaded from another folder cannot take `served`'s place (the first field that
// differs, named as config.json names it), or "" when it can.
std::string weights_mismatch(const Model& served, const Model& fresh);

}  // namespace tessera::models
