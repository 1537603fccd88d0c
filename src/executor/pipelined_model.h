#pragma once
// executor/pipelined_model.h — a pipeline stage seen as the whole model, for the offline
// paths that want every logits row (`tessera generate --logits-out`): every stage runs the
// same generate loop on the same tokens; forward() receives the previous stage's hidden
// states, runs this stage, sends its own to the next, and the last stage broadcasts the
// logits to all stages, so each rank samples the same token. One step at a time (no
// micro-batches): simple and exact, not fast. Used by one thread.

#include <memory>

#include "dist/process_group.h"
#include "models/model.h"

namespace tessera::executor {

class PipelinedModel final : public models::Model {
 public:
    // `pp_group`: the ranks with this rank's TP rank on every stage (group rank = stage).
    PipelinedModel(models::Model& stage, dist::ProcessGroup& pp_group) : stage_(stage), pp_(pp_group) {}

    const loader::ModelConfig& config() const override { return stage_.config(); }
    kvcache::KvCacheShape kv_cache_shape() const override { return stage_.kv_cache_shape(); }
    models::StageInfo stage() const override { return stage_.stage(); }
    DType compute_dtype() const override { return stage_.compute_dtype(); }
    std::size_t weight_bytes() const override { return stage_.weight_bytes(); }
    std::size_t weight_bytes_per_token() const override { return stage_.weight_bytes_per_token(); }
    double linear_flops_per_token() const override { return stage_.linear_flops_per_token(); }
    double attention_flops_at(std::int64_t pos) const override { return stage_.attention_flops_at(pos); }
    layers::MoeTraffic moe_traffic() const override { return stage_.moe_traffic(); }
    using Model::forward;
    Status forward(const models::BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                   std::vector<float>* out) override;

 private:
    models::Model& stage_;
    dist::ProcessGroup& pp_;
    std::vector<float> hidden_in_, hidden_out_;
};

}  // namespace tessera::executor
