#include "eplb/balancer.h"

#include <algorithm>
#include <numeric>

namespace tessera::eplb {

StatusOr<EplbAlgorithm> parse_eplb_algorithm(const std::string& name) {
    if (name == "auto") return EplbAlgorithm::kAuto;
    if (name == "deepseek") return EplbAlgorithm::kDeepseek;
    if (name == "deepseek_hierarchical") return EplbAlgorithm::kDeepseekHierarchical;
    if (name == "deepseek_vec" || name == "deepseek_vec_hierarchical" || name == "elasticity_aware" ||
        name == "elasticity_aware_hierarchical")
        return Status::Unimplemented("--eplb-algorithm " + name +
                                     " is not implemented yet; use auto, deepseek or deepseek_hierarchical "
                                     "(deepseek_vec gives the same placements)");
    return Status::InvalidArgument("--eplb-algorithm " + name +
                                   ": expected auto, deepseek or deepseek_hierarchical");
}

const char* eplb_algorithm_name(EplbAlgorithm algorithm) {
    switch (algorithm) {
        case EplbAlgorithm::kAuto: return "auto";
        case EplbAlgorithm::kDeepseek: return "deepseek";
        case EplbAlgorithm::kDeepseekHierarchical: return "deepseek_hierarchical";
    }
    return "?";
}

EplbAlgorithm resolve_eplb_algorithm(EplbAlgorithm algorithm, std::int64_t num_groups, std::int64_t num_nodes) {
    if (algorithm != EplbAlgorithm::kAuto) return algorithm;
    return num_groups > 0 && num_nodes > 0 && num_groups % num_nodes == 0 ? EplbAlgorithm::kDeepseekHierarchical
                                                                          : EplbAlgorithm::kDeepseek;
}

namespace {

using I32 = std::int32_t;
using I64 = std::int64_t;

// Rows of `weight` f32 [rows, n] into m packs of n/m items each: items by descending weight
// (stable), each onto the lightest pack with room (the first on a tie). `pack` and `rank`
// receive [rows, n].
void balanced_packing(const std::vector<float>& weight, I64 rows, I64 n, I64 m, std::vector<I32>& pack,
                      std::vector<I32>& rank) {
    pack.assign(static_cast<std::size_t>(rows * n), 0);
    rank.assign(static_cast<std::size_t>(rows * n), 0);
    const I64 per_pack = n / m;
    if (per_pack == 1) {
        for (I64 r = 0; r < rows; ++r)
            for (I64 i = 0; i < n; ++i) pack[r * n + i] = static_cast<I32>(i);
        return;
    }
    std::vector<I64> order(static_cast<std::size_t>(n));
    std::vector<float> load(static_cast<std::size_t>(m));
    std::vector<I64> items(static_cast<std::size_t>(m));
    for (I64 r = 0; r < rows; ++r) {
        const float* w = weight.data() + r * n;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](I64 a, I64 b) { return w[a] > w[b]; });
        std::fill(load.begin(), load.end(), 0.0f);
        std::fill(items.begin(), items.end(), 0);
        for (I64 item : order) {
            I64 best = -1;
            for (I64 p = 0; p < m; ++p)
                if (items[p] < per_pack && (best < 0 || load[p] < load[best])) best = p;
            pack[r * n + item] = static_cast<I32>(best);
            rank[r * n + item] = static_cast<I32>(items[best]);
            load[best] += w[item];
            ++items[best];
        }
    }
}

// Rows of `weight` f32 [rows, num_log] replicated onto num_phy slots: slot i < num_log holds
// expert i, each further slot a copy of the expert with the largest weight per copy.
void replicate_experts(const std::vector<float>& weight, I64 rows, I64 num_log, I64 num_phy, std::vector<I32>& phy2log,
                       std::vector<I32>& replica, std::vector<I32>& count) {
    phy2log.assign(static_cast<std::size_t>(rows * num_phy), 0);
    replica.assign(static_cast<std::size_t>(rows * num_phy), 0);
    count.assign(static_cast<std::size_t>(rows * num_log), 1);
    for (I64 r = 0; r < rows; ++r) {
        const float* w = weight.data() + r * num_log;
        I32* cnt = count.data() + r * num_log;
        for (I64 i = 0; i < num_phy; ++i) {
            if (i < num_log) {
                phy2log[r * num_phy + i] = static_cast<I32>(i);
                continue;
            }
            I64 best = 0;
            float best_load = w[0] / static_cast<float>(cnt[0]);
            for (I64 e = 1; e < num_log; ++e) {
                const float l = w[e] / static_cast<float>(cnt[e]);
                if (l > best_load) best = e, best_load = l;
            }
            phy2log[r * num_phy + i] = static_cast<I32>(best);
            replica[r * num_phy + i] = cnt[best];
            ++cnt[best];
        }
    }
}

struct Hierarchical {
    std::vector<I32> phy2log, phyrank, logcnt;
};

Hierarchical rebalance_hierarchical(const BalancerInput& in, I64 num_groups, I64 num_nodes) {
    const I64 L = in.num_layers, E = in.num_logical, P = in.num_replicas, G = in.num_gpus;
    const I64 group_size = E / num_groups, groups_per_node = num_groups / num_nodes;
    const I64 per_gpu = P / G, log_per_node = E / num_nodes, phy_per_node = P / num_nodes;

    // 1. Groups onto nodes: logical expert → "meta-logical" index, node-major.
    std::vector<float> group_load(static_cast<std::size_t>(L * num_groups), 0.0f);
    for (I64 l = 0; l < L; ++l)
        for (I64 g = 0; g < num_groups; ++g)
            for (I64 j = 0; j < group_size; ++j)
                group_load[l * num_groups + g] += in.weight[l * E + g * group_size + j];
    std::vector<I32> group_pack, group_rank;
    balanced_packing(group_load, L, num_groups, num_nodes, group_pack, group_rank);
    std::vector<I32> log2mlog(static_cast<std::size_t>(L * E)), mlog2log(static_cast<std::size_t>(L * E));
    for (I64 l = 0; l < L; ++l)
        for (I64 g = 0; g < num_groups; ++g)
            for (I64 j = 0; j < group_size; ++j) {
                const I64 mlog = (group_pack[l * num_groups + g] * groups_per_node + group_rank[l * num_groups + g]) *
                                     group_size + j;
                log2mlog[l * E + g * group_size + j] = static_cast<I32>(mlog);
                mlog2log[l * E + mlog] = static_cast<I32>(g * group_size + j);
            }

    // 2. Each node's experts replicated onto its slots (rows = layer × node).
    std::vector<float> mlog_load(static_cast<std::size_t>(L * E));
    for (I64 l = 0; l < L; ++l)
        for (I64 m = 0; m < E; ++m) mlog_load[l * E + m] = in.weight[l * E + mlog2log[l * E + m]];
    std::vector<I32> phy2mlog, phyrank, mlogcnt;
    replicate_experts(mlog_load, L * num_nodes, log_per_node, phy_per_node, phy2mlog, phyrank, mlogcnt);

    // 3. Each node's copies onto its GPUs, by load per copy.
    std::vector<float> phy_load(static_cast<std::size_t>(L * P));
    for (I64 row = 0; row < L * num_nodes; ++row)
        for (I64 i = 0; i < phy_per_node; ++i) {
            const I32 m = phy2mlog[row * phy_per_node + i];
            phy_load[row * phy_per_node + i] =
                mlog_load[row * log_per_node + m] / static_cast<float>(mlogcnt[row * log_per_node + m]);
        }
    std::vector<I32> pack, rank;
    balanced_packing(phy_load, L * num_nodes, phy_per_node, G / num_nodes, pack, rank);

    Hierarchical out;
    out.phy2log.resize(static_cast<std::size_t>(L * P));
    out.phyrank.resize(static_cast<std::size_t>(L * P));
    out.logcnt.resize(static_cast<std::size_t>(L * E));
    for (I64 row = 0; row < L * num_nodes; ++row) {
        const I64 l = row / num_nodes, node = row % num_nodes;
        for (I64 i = 0; i < phy_per_node; ++i) {
            const I64 slot = pack[row * phy_per_node + i] * per_gpu + rank[row * phy_per_node + i];
            const I64 mlog = phy2mlog[row * phy_per_node + i] + node * log_per_node;
            out.phy2log[l * P + node * phy_per_node + slot] = mlog2log[l * E + mlog];
            out.phyrank[l * P + node * phy_per_node + slot] = phyrank[row * phy_per_node + i];
        }
    }
    for (I64 l = 0; l < L; ++l)
        for (I64 e = 0; e < E; ++e) {
            const I64 mlog = log2mlog[l * E + e];
            out.logcnt[l * E + e] = mlogcnt[(l * num_nodes + mlog / log_per_node) * log_per_node + mlog % log_per_node];
        }
    return out;
}

}  // namespace

StatusOr<Placement> rebalance_experts(const BalancerInput& in, bool hierarchical) {
    const I64 L = in.num_layers, E = in.num_logical, P = in.num_replicas;
    if (L <= 0 || E <= 0) return Status::InvalidArgument("the load needs at least one layer and one expert");
    if (static_cast<I64>(in.weight.size()) != L * E)
        return Status::InvalidArgument("the load has " + std::to_string(in.weight.size()) + " values, expected layers " +
                                       std::to_string(L) + " x experts " + std::to_string(E));
    if (P < E)
        return Status::InvalidArgument("num_replicas " + std::to_string(P) + " is below the " + std::to_string(E) +
                                       " logical experts");
    if (in.num_gpus <= 0 || P % in.num_gpus != 0)
        return Status::InvalidArgument("num_replicas " + std::to_string(P) + " must be a multiple of num_gpus " +
                                       std::to_string(in.num_gpus));
    I64 groups = in.num_groups, nodes = in.num_nodes;
    if (!hierarchical) groups = 1, nodes = 1;
    if (groups <= 0 || nodes <= 0) return Status::InvalidArgument("num_groups and num_nodes must be positive");
    if (E % groups != 0)
        return Status::InvalidArgument(std::to_string(E) + " experts do not split into num_groups " +
                                       std::to_string(groups));
    if (groups % nodes != 0)
        return Status::InvalidArgument("num_groups " + std::to_string(groups) + " must be a multiple of num_nodes " +
                                       std::to_string(nodes) + " for the hierarchical balancer");
    if (in.num_gpus % nodes != 0)
        return Status::InvalidArgument("num_gpus " + std::to_string(in.num_gpus) + " must be a multiple of num_nodes " +
                                       std::to_string(nodes));
    if ((P / nodes) < (E / nodes) || P % nodes != 0)
        return Status::InvalidArgument("num_replicas " + std::to_string(P) + " must split evenly over num_nodes " +
                                       std::to_string(nodes));
    Hierarchical h = rebalance_hierarchical(in, groups, nodes);
    Placement out;
    out.num_layers = L;
    out.num_logical = E;
    out.num_physical = P;
    out.max_copies = P - E + 1;
    out.phy2log = std::move(h.phy2log);
    out.logcnt = std::move(h.logcnt);
    out.log2phy.assign(static_cast<std::size_t>(L * E * out.max_copies), -1);
    for (I64 l = 0; l < L; ++l)
        for (I64 p = 0; p < P; ++p)
            out.log2phy[(l * E + out.phy2log[l * P + p]) * out.max_copies + h.phyrank[l * P + p]] = static_cast<I32>(p);
    return out;
}

Placement placement_from_phy2log(std::vector<std::int32_t> phy2log, std::int64_t num_layers, std::int64_t num_logical,
                                 std::int64_t num_physical) {
    Placement out;
    out.num_layers = num_layers;
    out.num_logical = num_logical;
    out.num_physical = num_physical;
    out.max_copies = num_physical - num_logical + 1;
    out.phy2log = std::move(phy2log);
    out.logcnt.assign(static_cast<std::size_t>(num_layers * num_logical), 0);
    out.log2phy.assign(static_cast<std::size_t>(num_layers * num_logical * out.max_copies), -1);
    for (I64 l = 0; l < num_layers; ++l)
        for (I64 p = 0; p < num_physical; ++p) {
            const I64 e = out.phy2log[l * num_physical + p];
            I32& c = out.logcnt[l * num_logical + e];
            if (c < out.max_copies) out.log2phy[(l * num_logical + e) * out.max_copies + c] = static_cast<I32>(p);
            ++c;
        }
    return out;
}

}  // namespace tessera::eplb
