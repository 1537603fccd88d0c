#pragma once
// app/rank_runtime.h — what one rank process sets up before running a model: its place in
// the ParallelLayout, the rendezvous store client, its process groups, its thread count and
// its log prefix. A single-process run (world size 1) gets the same struct with no groups.
// Setup only; owned by the rank's main thread.

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "dist/parallel_layout.h"
#include "dist/process_group.h"
#include "dist/store.h"
#include "layers/dp_attention.h"
#include "models/model.h"
#include "server/server_args.h"

namespace tessera::app {

struct RankRuntime {
    dist::ParallelLayout layout;
    dist::RankCoords coords;
    std::unique_ptr<dist::Store> store;           // null in a single-process run
    std::unique_ptr<dist::ProcessGroup> tp_group;  // null when tp_size == 1
    // The ranks with this rank's tp rank on every pipeline stage (group rank = stage); Gloo,
    // because stages hand data on point to point. Null when pp_size == 1.
    std::unique_ptr<dist::ProcessGroup> pp_group;
    // DP-attention: the ranks of this rank's attention-DP group (null when attn_tp_size == 1
    // or without DP-attention).
    std::unique_ptr<dist::ProcessGroup> attn_tp_group;
    // --enable-prefill-delayer under DP attention: the attention-DP groups' leaders (and, unused,
    // their attention-TP partners), who agree before each prefill (executor/prefill_agreement.h).
    std::unique_ptr<dist::ProcessGroup> attn_dp_group;
    // --enable-eplb with TP: the TP group's ranks again, for the expert transfers of live
    // rebalancing, which run beside the forward passes that use tp_group.
    std::unique_ptr<dist::ProcessGroup> eplb_transfer_group;
    int threads = 1;
    // The address other nodes reach this rank at (Gloo binds to it); empty in a single-process run.
    std::string address;

    // The rank that runs a scheduler: the first rank of its replica (plain DP), or of its
    // attention-DP group (DP-attention), on the first pipeline stage.
    bool is_output_rank() const { return coords.pp_rank == 0 && coords.attn_tp_rank == 0 && coords.attn_cp_rank == 0; }
    // Which scheduler this rank belongs to, of layout.n_schedulers().
    int scheduler_index() const { return coords.replica * layout.attn_dp_size() + coords.attn_dp_rank; }
    // This rank's place in the attention view of its TP group (disabled without DP-attention).
    layers::DpAttentionParallel dp_attention(bool dp_lm_head) const;
};

// `internal_rank` / `internal_store` come from the launcher (--internal-rank, --internal-store);
// absent for a single-process run.
StatusOr<RankRuntime> init_rank_runtime(const server::ServerArgs& args, std::optional<int> internal_rank,
                                        const std::string& internal_store);

// Start-up stages. Each rank notes at the store which stage it is in (forming process
// groups, loading the model, sizing the KV pool, running), so that when a collective of the
// start-up times out (--dist-timeout), the error says where each other rank was: still
// loading (raise --dist-timeout), or stalled somewhere else. No-ops in a single-process run.
void report_stage(const RankRuntime& rt, const std::string& stage);
// `s`, with the stage every other rank last reported when `s` broke the group; else `s`.
Status with_peer_stages(const RankRuntime& rt, Status s);

// What this rank loads of the model: its TP shard, pipeline stage and experts.
StatusOr<models::LoadOptions> model_load_options(const server::ServerArgs& args, const RankRuntime& rt);
// Its part of the EPLB settings (placement, dispatch, recorder, rebalancing).
StatusOr<eplb::EplbOptions> eplb_options(const server::ServerArgs& args, const RankRuntime& rt);

}  // namespace tessera::app
