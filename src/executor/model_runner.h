#pragma once
// executor/model_runner.h — the BatchRunner of one rank: runs a ForwardBatch through the
// model over the rank's shared KV pool and samples the next tokens (penalties, seeded
// sampling, log-probabilities). Owned and called by the rank's scheduler thread.

#include <memory>
#include <span>
#include <vector>

#include "executor/forward_batch.h"
#include "kvcache/kv_cache.h"
#include "models/model.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::executor {

// Buffers of sample_batch, one per thread of the pool.
using SamplingScratch = std::vector<std::vector<std::pair<float, std::int32_t>>>;

class ModelRunner final : public BatchRunner {
 public:
    // `kv`: the pool's K/V rows per layer; slots in every batch index into it.
    ModelRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool);

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override;
    // Under DP-attention: with every group's counts for this step (the batch may be empty).
    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch, const layers::DpAttentionStep* dp_attention);

 private:
    models::Model& model_;
    kvcache::KvView kv_;
    ThreadPool* pool_;
    std::vector<std::int32_t> tokens_;
    std::vector<float> logits_;
    std::vector<float> hidden_states_;            // BatchInput::hidden_out
    std::vector<std::int32_t> routed_experts_;    // BatchInput::routed_experts_out
    SamplingScratch scratch_;
};

// The sampling of one logits row f32 [vocab] for one sequence, as ModelRunner does it:
// penalties over `output_ids`, then log-probabilities (of the penalised logits, before
// temperature) when asked, those of `token_ids` too, then the seeded sampler. The RNG of
// step n is seeded from (seed, n), so a request samples the same tokens whatever it is
// batched with.
SampledToken sample_row(std::span<float> row, const SequenceSampling& sampling,
                        const std::vector<std::int32_t>& output_ids,
                        std::vector<std::pair<float, std::int32_t>>& scratch,
                        std::span<const std::int32_t> token_ids = {});

// sample_row for every sequence of `batch` that needs a token, on its row of `logits`
// (f32 [rows x vocab], one row per such sequence, in batch order; penalties are applied in
// place). The rows are split over the pool's threads: a batch's sampling is otherwise a
// serial tail of its step. One SampledToken per sequence (token -1 where none is sampled).
StatusOr<std::vector<SampledToken>> sample_batch(const ForwardBatch& batch, std::span<float> logits,
                                                 std::int64_t vocab, ThreadPool* pool, SamplingScratch& scratch);

// What the model's forward produced for a step, on the rank that answers it.
struct StepOutputs {
    std::span<float> rows;                         // one row per sequence that needs a token
    std::span<const float> hidden_states;          // BatchInput::hidden_out
    std::span<const std::int32_t> routed_experts;  // BatchInput::routed_experts_out
};

// What a step hands back for each sequence of `batch` from the model's output rows (in batch
// order): a sampled token (sample_batch), or for an embedding model (config.is_generation
// false) the row itself as the embedding; with each, its rows of hidden states when it asked
// for them, and its tokens' routed experts when the step records them.
StatusOr<std::vector<SampledToken>> step_results(const ForwardBatch& batch, const StepOutputs& outputs,
                                                 const loader::ModelConfig& config, ThreadPool* pool,
                                                 SamplingScratch& scratch);

}  // namespace tessera::executor
