#pragma once
// eplb/expert_location.h — logical experts (the model's) and physical experts (the slots EP
// ranks hold): num_physical = num_logical + --ep-num-redundant-experts, split evenly over the
// EP ranks, slot p on EP rank p / (num_physical / ep_size). Per decoder layer: which logical
// expert each slot holds, every slot of each logical expert, and the copy counts. SGLang's
// eplb/expert_location.py `ExpertLocationMetadata`. Dense layers keep the trivial row. Every
// rank of an EP group holds the same ExpertLocation; immutable (a rebalance makes a new one).

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "eplb/balancer.h"

namespace tessera::eplb {

class ExpertLocation {
 public:
    ExpertLocation() = default;
    // Slot p holds logical expert p % num_logical: the redundant slots copy experts 0, 1, ...
    static StatusOr<ExpertLocation> trivial(std::int64_t num_layers, std::int64_t num_logical,
                                            std::int64_t num_physical, int ep_size);
    // Checks every logical expert has a slot and the slots divide over the EP ranks.
    static StatusOr<ExpertLocation> from_placement(Placement placement, int ep_size);

    std::int64_t num_layers() const { return placement_.num_layers; }
    std::int64_t num_logical() const { return placement_.num_logical; }
    std::int64_t num_physical() const { return placement_.num_physical; }
    std::int64_t max_copies() const { return placement_.max_copies; }
    int ep_size() const { return ep_size_; }
    std::int64_t local_physical() const { return placement_.num_physical / ep_size_; }
    int rank_of_physical(std::int64_t physical) const { return static_cast<int>(physical / local_physical()); }

    // [num_physical]: the logical expert of each slot.
    const std::int32_t* phy2log(std::int64_t layer) const {
        return placement_.phy2log.data() + layer * placement_.num_physical;
    }
    // [num_logical, max_copies]: the slots of each logical expert, -1 padded.
    const std::int32_t* log2phy(std::int64_t layer) const {
        return placement_.log2phy.data() + layer * placement_.num_logical * placement_.max_copies;
    }
    const std::int32_t* logcnt(std::int64_t layer) const {
        return placement_.logcnt.data() + layer * placement_.num_logical;
    }
    const Placement& placement() const { return placement_; }

 private:
    Placement placement_;
    int ep_size_ = 1;
};

// What --init-expert-location and the balancer need to know about the model and the launch.
struct ExpertLocationShape {
    std::int64_t num_layers = 0;    // decoder layers (num_hidden_layers)
    std::int64_t num_logical = 0;   // routed experts
    std::int64_t num_physical = 0;  // num_logical + ep_num_redundant_experts
    int ep_size = 1;
    std::int64_t num_groups = 0;    // the model's expert groups (n_group), 0: none
    std::int64_t num_nodes = 1;     // --nnodes
    EplbAlgorithm algorithm = EplbAlgorithm::kAuto;
};

// The placement the balancer gives for `logical_count` f32 [num_layers, num_logical].
StatusOr<ExpertLocation> balanced_expert_location(const std::vector<float>& logical_count,
                                                  const ExpertLocationShape& shape);

// --init-expert-location: "trivial"; a file ending in .json; or inline JSON, holding either
// "physical_to_logical_map" [num_layers][num_physical] or "logical_count" ([num_layers]
// [num_logical], or [passes][num_layers][num_logical], summed — a recorder dump), which the
// balancer turns into a placement. A .pt file is refused (tessera reads no pickles).
StatusOr<ExpertLocation> init_expert_location(const std::string& spec, const ExpertLocationShape& shape);

}  // namespace tessera::eplb
