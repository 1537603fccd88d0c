#pragma once
// eplb/balancer.h — where each expert's physical copies go, from the load each logical expert
// had: DeepSeek's EPLB algorithm (deepseek-ai/EPLB eplb.py, as SGLang runs it in
// eplb/eplb_algorithms/deepseek.py `rebalance_experts`):
//   hierarchical: expert groups are packed onto nodes (each node gets num_groups/num_nodes
//     groups, heaviest first onto the lightest node with room), each node's experts are
//     replicated to its share of physical slots (a copy to the expert with the largest
//     load per copy, one slot at a time), and the node's copies are packed onto its GPUs
//     the same way;
//   global: the same with one group and one node.
// Arithmetic is f32 and ties go to the lower index, as the reference's torch code on CPU
// (stable descending sort, first index of a maximum / minimum), so placements equal the
// reference's exactly. Pure; thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::eplb {

// --eplb-algorithm (SGLang's eplb/eplb_algorithms/__init__.py names).
enum class EplbAlgorithm { kAuto, kDeepseek, kDeepseekHierarchical };

StatusOr<EplbAlgorithm> parse_eplb_algorithm(const std::string& name);
const char* eplb_algorithm_name(EplbAlgorithm algorithm);
// `auto`: hierarchical when the model has expert groups (num_groups > 0) that divide evenly
// over the nodes, else global (`compute_algorithm`).
EplbAlgorithm resolve_eplb_algorithm(EplbAlgorithm algorithm, std::int64_t num_groups, std::int64_t num_nodes);

struct BalancerInput {
    std::vector<float> weight;  // f32 [num_layers, num_logical]: tokens per logical expert
    std::int64_t num_layers = 0;
    std::int64_t num_logical = 0;
    std::int64_t num_replicas = 0;  // physical experts
    std::int64_t num_groups = 1;
    std::int64_t num_nodes = 1;
    std::int64_t num_gpus = 1;
};

struct Placement {
    std::int64_t num_layers = 0;
    std::int64_t num_logical = 0;
    std::int64_t num_physical = 0;
    std::int64_t max_copies = 0;         // num_physical - num_logical + 1
    std::vector<std::int32_t> phy2log;   // [num_layers, num_physical]
    std::vector<std::int32_t> log2phy;   // [num_layers, num_logical, max_copies], -1 padded
    std::vector<std::int32_t> logcnt;    // [num_layers, num_logical]
};

// InvalidArgument naming the rule when the shapes do not divide as the algorithm needs.
StatusOr<Placement> rebalance_experts(const BalancerInput& input, bool hierarchical);

// log2phy and logcnt from phy2log (replica order = ascending physical index), for
// placements that come from a file instead of the balancer.
Placement placement_from_phy2log(std::vector<std::int32_t> phy2log, std::int64_t num_layers,
                                 std::int64_t num_logical, std::int64_t num_physical);

}  // namespace tessera::eplb
