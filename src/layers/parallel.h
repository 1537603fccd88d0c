#pragma once
// layers/parallel.h — what a layer needs to know of the parallel layout: its TP shard and
// group (attention, dense MLP, vocabulary), and the MoE view of the same ranks
// (tp = moe_dp × moe_ep × moe_tp, dist::ParallelLayout) with the dispatcher that moves
// tokens to their experts. Built once per model from the layout; immutable.

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "layers/tensor_parallel.h"

namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::layers {

// --moe-a2a-backend: `none` is SGLang's masked EP (every EP rank runs its experts on every
// token, then the TP all-reduce sums); `all_to_all` sends each token only to the EP ranks
// that hold its experts (dist::ProcessGroup::all_to_all_v) and back.
enum class MoeA2aBackend { kNone, kAllToAll };

StatusOr<MoeA2aBackend> parse_moe_a2a_backend(const std::string& name);
const char* moe_a2a_backend_name(MoeA2aBackend backend);

// Bytes this rank moved for the MoE layers since the counters were reset.
struct MoeTraffic {
    std::int64_t tokens = 0;          // tokens through MoE layers (× layers)
    std::int64_t dispatch_bytes = 0;  // records sent to other ranks
    std::int64_t combine_bytes = 0;   // result rows sent back to other ranks
    std::int64_t gather_bytes = 0;    // owned output rows sent to the other ranks (all_gather)
    std::int64_t reduce_bytes = 0;    // payload of the all-reduces of MoE outputs
};

struct MoeParallel {
    int ep_rank = 0;
    int ep_size = 1;
    int moe_tp_rank = 0;
    int moe_tp_size = 1;
    MoeA2aBackend backend = MoeA2aBackend::kNone;
    // The EP group (all_to_all only; with it ep_size == tp_size, so this is the TP group).
    dist::ProcessGroup* ep_group = nullptr;

    // When a dispatcher moves tokens, every rank holds the shared experts whole and runs them
    // on the tokens it owns, so the MoE output needs no all-reduce (SGLang's
    // models/deepseek_v2.py DeepseekV2MoE gives them tp_size 1 under DeepEP).
    bool shared_experts_replicated() const { return backend == MoeA2aBackend::kAllToAll && ep_size > 1; }
};

struct LayerParallel {
    TpShard tp;
    dist::ProcessGroup* tp_group = nullptr;  // nullptr when tp.size == 1
    MoeParallel moe;
    // Leave row-parallel outputs as this rank's partial sums: the caller reduces them, folded
    // into a collective it runs anyway (DP-attention's gather and reduce-scatter).
    bool defer_reduce = false;

    // Sums f32 partial results over the TP group (no-op on one rank, or when deferred).
    Status all_reduce(std::span<float> data) const;
};

}  // namespace tessera::layers
