#pragma once
// dist/parallel_layout.h — the one place that derives every rank coordinate and every
// process group from the parallelism flags, exactly as SGLang does (reference §2):
//   replica world = tp × pp ranks, global rank = replica · tp · pp + tp · pp_rank + tp_rank;
//   attention view of a TP group: tp = attn_dp × attn_cp × attn_tp (outermost first);
//   MoE view of a TP group:       tp = moe_dp × moe_ep × moe_tp.
// Plain DP (dp > 1 without DP-attention) adds whole replicas (over several nodes: dp / nnodes
// replicas per node, or nnodes / dp nodes per replica, which SGLang does not offer);
// DP-attention carves the DP groups out of the TP group instead. Immutable value; thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::dist {

struct ParallelConfig {
    int tp_size = 1;
    int pp_size = 1;
    int dp_size = 1;
    int ep_size = 1;
    int moe_dp_size = 1;
    int attn_cp_size = 1;
    bool enable_dp_attention = false;
    std::optional<int> moe_dense_tp_size;  // unset = TP width for dense layers
    int nnodes = 1;
    int node_rank = 0;
};

struct RankCoords {
    int global_rank = 0;
    int replica = 0;  // plain-DP replica (0 with DP-attention)
    int pp_rank = 0;
    int tp_rank = 0;
    int attn_dp_rank = 0;
    int attn_cp_rank = 0;
    int attn_tp_rank = 0;
    int moe_dp_rank = 0;
    int moe_ep_rank = 0;
    int moe_tp_rank = 0;
    int node = 0;  // the --node-rank that runs this rank
};

// kAttnDp: the ranks of one TP group at the same attention-TP and attention-CP rank, one per
// attention-DP group (their leaders, at rank 0 of both, agree on prefills: --enable-prefill-delayer).
enum class GroupKind { kTp, kPp, kAttnTp, kAttnCp, kAttnDp, kMoeEp, kMoeTp, kMoeDp, kWorld };

std::string group_kind_name(GroupKind kind);

class ParallelLayout {
 public:
    // Validates `config` (the reference's rules, with messages naming the flags) and
    // derives the layout.
    static StatusOr<ParallelLayout> create(const ParallelConfig& config);

    const ParallelConfig& config() const { return config_; }
    int replica_world_size() const { return config_.tp_size * config_.pp_size; }
    int n_replicas() const { return plain_dp() ? config_.dp_size : 1; }
    int world_size() const { return replica_world_size() * n_replicas(); }
    // Schedulers of the launch, each with its own requests and KV pool: one per plain-DP
    // replica times one per attention-DP group.
    int n_schedulers() const { return n_replicas() * attn_dp_size(); }
    int attn_dp_size() const { return config_.enable_dp_attention ? config_.dp_size : 1; }
    int attn_tp_size() const { return config_.tp_size / attn_dp_size() / config_.attn_cp_size; }
    int moe_tp_size() const { return config_.tp_size / config_.ep_size / config_.moe_dp_size; }
    bool plain_dp() const { return config_.dp_size > 1 && !config_.enable_dp_attention; }

    RankCoords coords(int global_rank) const;
    // Ranks of `kind`'s group that holds `global_rank`, in group-rank order.
    std::vector<int> group_of(GroupKind kind, int global_rank) const;
    // Every group of `kind`: a partition of the world.
    std::vector<std::vector<int>> groups(GroupKind kind) const;
    // Global ranks started by --node-rank `node`, ascending.
    std::vector<int> ranks_on_node(int node) const;

 private:
    explicit ParallelLayout(const ParallelConfig& c) : config_(c) {}
    int node_of(int replica, int pp_rank, int tp_rank) const;

    ParallelConfig config_;
};

}  // namespace tessera::dist
