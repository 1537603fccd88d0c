#pragma once
// app/model_rank.h — what `serve` and `generate` share on every rank process: the rank's
// place and process groups, its part of the model (TP shard of its pipeline stage), the
// memory plan and KV pool (the same slot count on every rank), the compute threads and the
// scheduler settings; then either the follower loop (every rank but global rank 0) or the
// leader's step runner that the scheduler drives. Setup and shutdown only; owned by the
// rank's main thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "app/rank_runtime.h"
#include "base/status.h"
#include "executor/forward_batch.h"
#include "kvcache/kv_pool.h"
#include "models/model.h"
#include "scheduler/scheduler.h"
#include "server/server_args.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::executor {
class PipelineTrace;
}

namespace tessera::app {

struct ModelRank {
    explicit ModelRank(RankRuntime rt);
    ~ModelRank();
    ModelRank(ModelRank&&) = delete;

    RankRuntime runtime;
    std::unique_ptr<models::Model> model;
    std::unique_ptr<kvcache::KvPool> kv_pool;
    std::unique_ptr<ThreadPool> threads;
    std::unique_ptr<executor::PipelineTrace> trace;  // --enable-pipeline-trace
    double load_s = 0.0;

    // Resolved settings (the start-up line and /get_server_info report them).
    scheduler::SchedulerConfig scheduler;
    std::int64_t context_len = 0;
    double mem_fraction_static = 0.0;
    double available_gb = 0.0;
    std::shared_ptr<eplb::BalancednessReport> balancedness;  // output rank, when reported to /metrics

    // Rank 0 of its replica (each --dp-size replica has its own leader).
    bool leader() const { return runtime.is_output_rank(); }
};

StatusOr<std::unique_ptr<ModelRank>> setup_model_rank(const server::ServerArgs& args, std::optional<int> internal_rank,
                                                      const std::string& internal_store);

// Every rank but the leader: runs the leader's steps until it stops them, then hands this
// rank's trace to the leader.
Status run_follower(ModelRank& rank);

// The leader's runner: the local model, the TP leader over it, or the first pipeline stage.
class LeaderRunner {
 public:
    // Under PP with --enable-dynamic-chunking, also profiles stage 0 and sets
    // rank.scheduler.dynamic_chunking (falling back to fixed chunks, with a warning, if the
    // profile cannot be fitted).
    static StatusOr<std::unique_ptr<LeaderRunner>> create(ModelRank& rank, const server::ServerArgs& args);
    ~LeaderRunner();

    executor::BatchRunner& runner() { return *runner_; }
    // Stops the other ranks and writes the pipeline trace. Idempotent.
    Status stop();

 private:
    struct Parts;
    LeaderRunner(ModelRank& rank, std::string trace_path);

    ModelRank& rank_;
    const std::string trace_path_;
    std::unique_ptr<Parts> parts_;
    executor::BatchRunner* runner_ = nullptr;
    bool stopped_ = false;
};

// The leader's start-up line, with SGLang's field names.
void log_startup_line(const ModelRank& rank);

}  // namespace tessera::app
