#include "dist/parallel_layout.h"

#include <algorithm>

namespace tessera::dist {

namespace {
std::string str(int v) { return std::to_string(v); }

Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string divisors(int n) {
    std::string out;
    for (int d = 1; d <= n; ++d)
        if (n % d == 0) out += (out.empty() ? "" : ", ") + str(d);
    return out;
}

// The nodes one replica's tp x pp world spans.
int nodes_per_replica(const ParallelConfig& c) {
    if (c.dp_size <= 1 || c.enable_dp_attention || c.nnodes == 1) return c.nnodes;
    return c.dp_size % c.nnodes == 0 ? 1 : c.nnodes / c.dp_size;
}

Status validate(const ParallelConfig& c) {
    const std::pair<const char*, int> sizes[] = {
        {"--tp-size", c.tp_size},   {"--pp-size", c.pp_size},           {"--dp-size", c.dp_size},
        {"--ep-size", c.ep_size},   {"--moe-dp-size", c.moe_dp_size},   {"--attn-cp-size", c.attn_cp_size},
        {"--nnodes", c.nnodes}};
    for (const auto& [flag, v] : sizes)
        if (v < 1) return invalid(std::string(flag) + " must be at least 1, got " + str(v));
    if (c.node_rank < 0 || c.node_rank >= c.nnodes)
        return invalid("--node-rank " + str(c.node_rank) + " must be in [0, --nnodes " + str(c.nnodes) + ")");
    // Plain DP over several nodes (SGLang refuses it; tessera places whole replicas): each node
    // holds dp / nnodes replicas, or each replica spans nnodes / dp nodes.
    const bool plain_dp = c.dp_size > 1 && !c.enable_dp_attention;
    if (plain_dp && c.nnodes > 1 && c.dp_size % c.nnodes != 0 && c.nnodes % c.dp_size != 0)
        return invalid("--dp-size " + str(c.dp_size) + " replicas cannot be placed on --nnodes " + str(c.nnodes) +
                       ": give a --dp-size that is a multiple of --nnodes (whole replicas on each node) or divides "
                       "it (each replica on nnodes / dp_size nodes)");
    const int nodes = nodes_per_replica(c);
    const std::string where = nodes == c.nnodes ? "--nnodes " + str(c.nnodes)
                                                : str(nodes) + " nodes per replica (--nnodes / --dp-size)";
    if ((c.tp_size * c.pp_size) % nodes != 0)
        return invalid("tp_size must be divisible by number of nodes: --tp-size " + str(c.tp_size) +
                       " x --pp-size " + str(c.pp_size) + " = " + str(c.tp_size * c.pp_size) +
                       " ranks cannot be spread evenly over " + where);
    // SGLang's placement puts whole stages on a node (pp >= nnodes) or spreads a stage's TP
    // group over nnodes / pp nodes; anything else would leave ranks without a node.
    const bool stages_fill_nodes = c.pp_size >= nodes && c.pp_size % nodes == 0;
    const bool tp_spans_nodes = c.pp_size < nodes && nodes % c.pp_size == 0 && c.tp_size % (nodes / c.pp_size) == 0;
    if (nodes > 1 && !stages_fill_nodes && !tp_spans_nodes)
        return invalid("cannot place --pp-size " + str(c.pp_size) + " x --tp-size " + str(c.tp_size) + " on " + where +
                       ": --pp-size must be a multiple of the nodes, or divide them with --tp-size "
                       "divisible by nodes / pp_size");
    if (c.enable_dp_attention && c.tp_size % c.dp_size != 0)
        return invalid("--enable-dp-attention needs --tp-size divisible by --dp-size: " + str(c.tp_size) +
                       " % " + str(c.dp_size) + " != 0; valid --dp-size: " + divisors(c.tp_size));
    if (c.tp_size % c.attn_cp_size != 0)
        return invalid("tp_size must be divisible by attn_cp_size: --tp-size " + str(c.tp_size) +
                       ", --attn-cp-size " + str(c.attn_cp_size));
    const int attn_dp = c.enable_dp_attention ? c.dp_size : 1;
    if (c.tp_size % (attn_dp * c.attn_cp_size) != 0)
        return invalid("Invalid attention topology: --tp-size " + str(c.tp_size) +
                       " must be divisible by attention dp (" + str(attn_dp) + ") x --attn-cp-size (" +
                       str(c.attn_cp_size) + ")");
    if (c.moe_dense_tp_size && *c.moe_dense_tp_size != 1 && *c.moe_dense_tp_size != c.tp_size)
        return invalid("moe_dense_tp_size only supports None, 1, or tp_size currently: --moe-dense-tp-size " +
                       str(*c.moe_dense_tp_size) + " with --tp-size " + str(c.tp_size));
    if (c.tp_size % c.ep_size != 0)
        return invalid("--ep-size " + str(c.ep_size) + " must divide --tp-size " + str(c.tp_size) +
                       " (experts are split inside the TP group); valid --ep-size: " + divisors(c.tp_size));
    if (c.moe_dp_size > 1) {
        if (c.tp_size % c.moe_dp_size != 0)
            return invalid("--moe-dp-size " + str(c.moe_dp_size) + " must divide --tp-size " + str(c.tp_size));
        if (c.ep_size * c.moe_dp_size > c.tp_size)
            return invalid("--ep-size x --moe-dp-size (" + str(c.ep_size * c.moe_dp_size) +
                           ") must not exceed --tp-size " + str(c.tp_size));
        if (c.pp_size != 1)
            return invalid("PP is not supported with context parallelism: --moe-dp-size " +
                           str(c.moe_dp_size) + " needs --pp-size 1");
        if (c.ep_size > 1 && c.ep_size * c.moe_dp_size != c.tp_size)
            return invalid("with --ep-size > 1, --ep-size x --moe-dp-size must equal --tp-size: " +
                           str(c.ep_size) + " x " + str(c.moe_dp_size) + " != " + str(c.tp_size));
    }
    if ((c.tp_size / c.ep_size) % c.moe_dp_size != 0)
        return invalid("--tp-size " + str(c.tp_size) + " must be divisible by --ep-size x --moe-dp-size");
    if (c.attn_cp_size != c.moe_dp_size && c.moe_dp_size != 1)
        return invalid("--attn-cp-size (" + str(c.attn_cp_size) + ") may differ from --moe-dp-size (" +
                       str(c.moe_dp_size) + ") only when --moe-dp-size is 1");
    return Status::Ok();
}
}  // namespace

std::string group_kind_name(GroupKind kind) {
    switch (kind) {
        case GroupKind::kTp: return "tp";
        case GroupKind::kPp: return "pp";
        case GroupKind::kAttnTp: return "attn_tp";
        case GroupKind::kAttnCp: return "attn_cp";
        case GroupKind::kAttnDp: return "attn_dp";
        case GroupKind::kMoeEp: return "moe_ep";
        case GroupKind::kMoeTp: return "moe_tp";
        case GroupKind::kMoeDp: return "moe_dp";
        case GroupKind::kWorld: return "world";
    }
    return "?";
}

StatusOr<ParallelLayout> ParallelLayout::create(const ParallelConfig& config) {
    ParallelConfig c = config;
    // SGLang turns DP-attention off when there is nothing to split (dp_size == 1).
    if (c.dp_size == 1) c.enable_dp_attention = false;
    TSR_RETURN_IF_ERROR(validate(c));
    return ParallelLayout(c);
}

int ParallelLayout::node_of(int replica, int pp_rank, int tp_rank) const {
    const int nnodes = nodes_per_replica(config_);
    // Plain DP over several nodes: replicas in order, dp / nnodes per node or nnodes / dp nodes each.
    int first_node = 0;
    if (plain_dp() && config_.nnodes > 1)
        first_node = nnodes == 1 ? replica / (config_.dp_size / config_.nnodes) : replica * nnodes;
    // SGLang's placement inside a replica: a TP group spans nnodes / pp nodes (at least 1),
    // stages fill the rest.
    const int nnodes_per_tp_group = std::max(nnodes / config_.pp_size, 1);
    const int tp_per_node = config_.tp_size / nnodes_per_tp_group;
    const int pp_per_node = std::max(config_.pp_size / nnodes, 1);
    return first_node + (pp_rank / pp_per_node) * nnodes_per_tp_group + tp_rank / tp_per_node;
}

RankCoords ParallelLayout::coords(int global_rank) const {
    const ParallelConfig& c = config_;
    RankCoords r;
    r.global_rank = global_rank;
    r.replica = global_rank / replica_world_size();
    const int in_replica = global_rank % replica_world_size();
    r.pp_rank = in_replica / c.tp_size;
    r.tp_rank = in_replica % c.tp_size;
    const int attn_tp = attn_tp_size();
    r.attn_tp_rank = r.tp_rank % attn_tp;
    r.attn_cp_rank = (r.tp_rank / attn_tp) % c.attn_cp_size;
    r.attn_dp_rank = r.tp_rank / (attn_tp * c.attn_cp_size);
    const int moe_tp = moe_tp_size();
    const int per_moe_dp = c.tp_size / c.moe_dp_size;
    r.moe_tp_rank = r.tp_rank % moe_tp;
    r.moe_ep_rank = (r.tp_rank % per_moe_dp) / moe_tp;
    r.moe_dp_rank = r.tp_rank / per_moe_dp;
    r.node = node_of(r.replica, r.pp_rank, r.tp_rank);
    return r;
}

std::vector<int> ParallelLayout::group_of(GroupKind kind, int global_rank) const {
    for (auto& g : groups(kind))
        if (std::find(g.begin(), g.end(), global_rank) != g.end()) return g;
    return {};
}

std::vector<std::vector<int>> ParallelLayout::groups(GroupKind kind) const {
    const ParallelConfig& c = config_;
    const int T = c.tp_size;
    const int attn_tp = attn_tp_size();
    const int cp = c.attn_cp_size;
    const int moe_tp = moe_tp_size();
    const int moe_ep = c.ep_size;
    const int moe_dp = c.moe_dp_size;
    std::vector<std::vector<int>> out;
    auto add_range = [&out](int begin, int end, int step) {
        std::vector<int> g;
        for (int r = begin; r < end; r += step) g.push_back(r);
        out.push_back(std::move(g));
    };
    if (kind == GroupKind::kWorld) {
        // Each plain-DP replica is its own world.
        for (int k = 0; k < n_replicas(); ++k)
            add_range(k * replica_world_size(), (k + 1) * replica_world_size(), 1);
        return out;
    }
    if (kind == GroupKind::kMoeDp && cp > moe_dp) {
        // CP partners share tokens before the MoE, so SGLang reuses the attention-CP group.
        return groups(GroupKind::kAttnCp);
    }
    if (kind == GroupKind::kPp) {
        for (int k = 0; k < n_replicas(); ++k) {
            const int base = k * replica_world_size();
            for (int i = 0; i < T; ++i) add_range(base + i, base + replica_world_size(), T);
        }
        return out;
    }
    // Every other kind lives inside one TP group; g * T is the TP group's first rank.
    const int n_tp_groups = world_size() / T;
    for (int g = 0; g < n_tp_groups; ++g) {
        const int base = g * T;
        switch (kind) {
            case GroupKind::kTp:
                add_range(base, base + T, 1);
                break;
            case GroupKind::kAttnTp:
                for (int j = 0; j < T / attn_tp; ++j) add_range(base + j * attn_tp, base + (j + 1) * attn_tp, 1);
                break;
            case GroupKind::kAttnCp:
                for (int dp_idx = 0; dp_idx < T / (attn_tp * cp); ++dp_idx)
                    for (int t = 0; t < attn_tp; ++t)
                        add_range(base + dp_idx * attn_tp * cp + t, base + (dp_idx + 1) * attn_tp * cp + t, attn_tp);
                break;
            case GroupKind::kAttnDp:
                for (int c = 0; c < cp; ++c)
                    for (int t = 0; t < attn_tp; ++t)
                        add_range(base + c * attn_tp + t, base + T, attn_tp * cp);
                break;
            case GroupKind::kMoeTp:
                for (int j = 0; j < T / moe_tp; ++j) add_range(base + j * moe_tp, base + (j + 1) * moe_tp, 1);
                break;
            case GroupKind::kMoeEp:
                for (int d = 0; d < moe_dp; ++d)
                    for (int t = 0; t < moe_tp; ++t) {
                        const int start = base + d * moe_ep * moe_tp + t;
                        add_range(start, start + moe_ep * moe_tp, moe_tp);
                    }
                break;
            case GroupKind::kMoeDp:
                for (int col = 0; col < moe_tp * moe_ep; ++col) add_range(base + col, base + T, moe_tp * moe_ep);
                break;
            default:
                break;
        }
    }
    return out;
}

std::vector<int> ParallelLayout::ranks_on_node(int node) const {
    std::vector<int> ranks;
    for (int r = 0; r < world_size(); ++r)
        if (coords(r).node == node) ranks.push_back(r);
    return ranks;
}

}  // namespace tessera::dist
