#pragma once
// executor/tp_batch_runner.h — tensor parallelism for the serving loop. The leader (tp rank
// 0) runs the scheduler; before each step it broadcasts the step's shape (tokens, positions,
// KV slots, which sequences need logits) over the TP group, and every follower runs the same
// forward, so all ranks issue the same collectives in the same order and keep identical KV
// pools. Only the leader samples. Each object is owned by its rank's main thread.

#include <cstdint>
#include <memory>
#include <vector>

#include "executor/forward_batch.h"
#include "kvcache/kv_cache.h"
#include "models/model.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::executor {

// Leader side: wraps the rank's own ModelRunner.
class TpLeaderRunner final : public BatchRunner {
 public:
    TpLeaderRunner(BatchRunner& local, dist::ProcessGroup& tp_group);
    ~TpLeaderRunner() override;
    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override;
    // Tells the followers to return from follow_leader(). Idempotent.
    Status stop_followers();

 private:
    BatchRunner& local_;
    dist::ProcessGroup& tp_group_;
    bool stopped_ = false;
};

// Follower side: runs every broadcast step until the leader stops it; returns the first error.
Status follow_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                     dist::ProcessGroup& tp_group);

// The step broadcast inside a TP group, from its rank 0: a size, then the encoded step
// (step_codec.h). An empty step means "stop". The root's `bytes` are the broadcast's buffer
// and come back unchanged.
Status broadcast_step(dist::ProcessGroup& tp_group, std::vector<std::uint8_t>& bytes);
StatusOr<std::vector<std::uint8_t>> receive_step(dist::ProcessGroup& tp_group);

}  // namespace tessera::executor
