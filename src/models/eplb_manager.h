#pragma once
// models/eplb_manager.h — expert load balancing of one model stage on one rank (SGLang's
// eplb/eplb_manager.py and the recorder hooks of eplb/expert_distribution.py):
//   - the initial placement (trivial, or --init-expert-location) the MoE layers load with;
//   - after every forward pass: the router's counts of this stage's MoE layers (summed over
//     the EP ranks under the all_to_all dispatcher, where each rank routes its own tokens)
//     go to the recorder, and the pass's balancedness to the log / /metrics;
//   - --enable-eplb: every --eplb-rebalance-num-iterations passes, the balancer places the
//     recorded load; --eplb-rebalance-layers-per-chunk layers are moved per pass. A layer's
//     new slots come from a local copy or from the EP rank that holds the expert (one
//     all_to_all_v per chunk between the ranks of the TP group, peers with the same moe_tp
//     rank); a probe batch through each moved layer must give the same output as before,
//     else every rank puts the old slots back. A layer is only moved when the new placement
//     lowers its busiest rank's load on the recorded counts by 5% or more.
//   - With a transfer group (EplbOptions::transfer_group), a chunk's experts are packed and
//     sent on a thread of their own while the next pass runs, and installed (probe, roll
//     back) when that pass ends. Without one, a chunk moves and installs at one pass boundary.
// Every rank of a TP group runs the same passes, so all of them rebalance at the same pass
// with the same (integer) counts and compute the same placement. Owned by the model; called
// by its forward thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "eplb/eplb_options.h"
#include "eplb/expert_distribution.h"
#include "eplb/expert_location.h"
#include "layers/moe.h"

namespace tessera::models {

class EplbManager {
 public:
    static StatusOr<std::unique_ptr<EplbManager>> create(const eplb::EplbOptions& options,
                                                         const eplb::ExpertLocationShape& shape);

    ~EplbManager();

    // The placement and dispatch the MoE layers load with.
    std::shared_ptr<const eplb::ExpertDispatch> initial_dispatch() const { return dispatch_; }
    // This stage's MoE layers, once loaded.
    void attach(std::vector<layers::MoeLayer*> moe_layers, const layers::LayerParallel& par);

    Status on_command(eplb::ExpertRecordCommand command);
    Status on_forward_pass_end(layers::Scratch& scratch, ThreadPool* pool);

    std::int64_t rebalances() const { return rebalances_; }

 private:
    EplbManager(const eplb::EplbOptions& options, const eplb::ExpertLocationShape& shape);

    struct Chunk;  // a chunk of a rebalance in flight (eplb_manager.cpp)

    Status record_pass();
    Status start_rebalance();
    // Plans the next pending chunk and starts its transfer (on the transfer thread when there
    // is a transfer group, else here and installs it at once).
    Status begin_chunk(layers::Scratch& scratch, ThreadPool* pool);
    // Packs the experts this rank sends and exchanges them; the transfer thread's work.
    Status transfer(Chunk& chunk, dist::ProcessGroup* group);
    // Waits for the chunk in flight, installs it, probes it and rolls it back on a mismatch.
    Status end_chunk(layers::Scratch& scratch, ThreadPool* pool);
    Status dump();
    bool logs() const;  // this rank writes the stage's log lines and dumps
    // Rows of the probe batch a moved layer must map to the same output before and after.
    std::int64_t probe_tokens() const { return std::max<std::int64_t>(64, 2 * shape_.num_physical); }

    const eplb::EplbOptions options_;
    const eplb::ExpertLocationShape shape_;
    std::shared_ptr<const eplb::ExpertDispatch> dispatch_;  // the initial placement
    eplb::ExpertDistributionRecorder recorder_;
    std::vector<layers::MoeLayer*> layers_;
    layers::LayerParallel par_;
    std::int64_t pass_id_ = 0;
    std::int64_t since_rebalance_ = 0;
    std::int64_t rebalances_ = 0;
    // A rebalance in progress: the layers still to move, one chunk per pass.
    std::vector<std::vector<layers::MoeLayer*>> pending_;
    std::shared_ptr<const eplb::ExpertDispatch> pending_dispatch_;
    std::chrono::steady_clock::time_point rebalance_start_;
    std::unique_ptr<Chunk> in_flight_;  // begun, not yet installed
    // Reused across rebalances: the transfer buffers and the old weights of the slots a chunk
    // overwrites (its roll-back copy). While a chunk is in flight only its transfer touches them.
    AlignedBuffer send_, recv_, staging_;
};

}  // namespace tessera::models
