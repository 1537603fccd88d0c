#pragma once
// executor/pp_runner.h — pipeline parallelism for the serving loop (reference §6.2, §6.3).
// The TP leader of stage 0 runs the scheduler and drives a PpFirstStageRunner: launch()
// broadcasts the step inside the stage's TP group, runs stage 0 and posts the step
// (metadata, sampling parameters and hidden states) to stage 1 without waiting for the send;
// collect() receives the sampled tokens of the oldest step from the last stage. Every other
// rank runs run_pipeline_worker(): receive a step, run its layers, pass the result on; the
// last stage's TP rank 0 samples and sends the tokens back to stage 0. All stages run steps
// in launch order, so a later step may read K/V that an earlier one wrote (chunked pipeline
// prefill). Each rank's TP peers on the next stage are its counterparts with the same tp rank;
// hidden states are whole on every TP rank after the all-reduce, so no gather is needed.
// Each object is owned by its rank's model thread.

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "executor/forward_batch.h"
#include "kvcache/kv_cache.h"
#include "models/model.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::dist {
class ProcessGroup;
class Work;
}  // namespace tessera::dist

namespace tessera::executor {

class PipelineTrace;

// Where a stage sits: its PP group (group rank = stage), its TP group (nullptr when tp is 1),
// the trace recorder (nullptr when not tracing), and the scheduler's bound on steps in flight
// (pp_size + --pp-async-batch-depth), which bounds the sends a stage keeps alive.
struct StageLinks {
    dist::ProcessGroup* pp_group = nullptr;
    dist::ProcessGroup* tp_group = nullptr;
    PipelineTrace* trace = nullptr;
    int max_in_flight_steps = 1;
    // DP-attention: steps carry every group's counts (step_codec.h encode_dp_step), and on the
    // last stage each group's attention-TP rank 0 samples and answers its group's leader.
    bool dp_attention = false;
    int attn_tp_size = 1;
};

// Keeps the buffers of posted sends alive until they complete. Gloo reports completion only
// through a wait, so the oldest is waited for once `max_pending` are kept: more than the steps
// that can be in flight, so that send has been received already (steps are received in order)
// and the wait returns at once, while the memory held stays bounded (hidden states of a long
// prefill chunk are megabytes).
class StageOutbox {
 public:
    StageOutbox(dist::ProcessGroup& group, int peer, int max_pending);
    ~StageOutbox();
    // A header of two i64 values, then (when non-empty) the step bytes and the hidden states.
    Status post(std::int64_t a, std::int64_t b, std::vector<std::uint8_t> bytes, std::vector<float> floats,
                int header_tag, int bytes_tag, int floats_tag);
    Status drain();

 private:
    struct Message;
    dist::ProcessGroup& group_;
    const int peer_;
    const std::size_t max_pending_;
    std::deque<std::unique_ptr<Message>> pending_;
};

// A step (its bytes and this stage's output hidden states) to the next stage, and the stop.
// When the step records routed experts, `routing` (I32 [tokens, num_hidden_layers, top_k], the
// layers up to this stage's) follows the hidden states in the same message.
Status post_step(StageOutbox& next, std::vector<std::uint8_t> bytes, std::vector<float> hidden,
                 const std::vector<std::int32_t>& routing = {});
// The routed experts of the stages before this one (`earlier`, the previous stage's `routing`
// of post_step for the step's n_tokens, or empty on stage 0) join this stage's own
// (BatchInput::routed_experts_out, its layers from `layer_begin` on).
void join_earlier_routing(std::span<const std::int32_t> earlier, std::int64_t n_tokens, int layer_begin,
                          std::int64_t top_k, std::vector<std::int32_t>& own);
Status post_stop(StageOutbox& next);
// On stage 0: the sampled tokens of the oldest step not yet received, from the last stage.
StatusOr<std::vector<SampledToken>> receive_tokens(dist::ProcessGroup& pp_group);
// Sends kept per link (StageOutbox) for a pipeline of `max_in_flight_steps`.
int outbox_depth(int max_in_flight_steps);

class PpFirstStageRunner final : public BatchRunner {
 public:
    PpFirstStageRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool, StageLinks links);
    ~PpFirstStageRunner() override;

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override;
    Status launch(const ForwardBatch& batch) override;
    StatusOr<std::vector<SampledToken>> collect() override;

    // Runs `batch` on stage 0 only (its TP group joins) and hands nothing on: timing the
    // stage for dynamic chunking. No step may be in flight.
    Status run_local(const ForwardBatch& batch);
    // Tells every other rank to leave run_pipeline_worker(). Idempotent.
    Status stop();

 private:
    Status launch_step(const ForwardBatch& batch);
    StatusOr<std::vector<SampledToken>> collect_step();

    models::Model& model_;
    const kvcache::KvView kv_;
    ThreadPool* const pool_;
    const StageLinks links_;
    StageOutbox outbox_;
    std::vector<std::int32_t> tokens_;
    std::int64_t launched_ = 0;
    std::int64_t collected_ = 0;
    bool stopped_ = false;
    // A weight update's kLoad that failed on this stage still goes down the pipeline (the later
    // stages learn not to load); its error is collect()'s answer.
    std::optional<Status> failed_load_;
};

// Every rank except the TP leader of stage 0. Returns OK when stopped, else the first error.
Status run_pipeline_worker(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool, StageLinks links);

}  // namespace tessera::executor
