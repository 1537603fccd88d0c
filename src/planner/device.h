#pragma once
// planner/device.h — what `tessera plan` assumes of the machines: memory per device (one
// rank per device), devices per node, memory bandwidth, dense bf16 FLOP/s, and the link
// bandwidth inside a node and between nodes. Presets carry vendors' public figures; `cpu`
// is this host, with memory shared by the ranks on it as `tessera serve` shares it.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::planner {

struct DeviceSpec {
    std::string name;
    std::int64_t memory_bytes = 0;  // per device; 0 for `cpu`: the host's memory / ranks on it
    // `cpu`: the ranks of a node share its cores and memory bandwidth (the figures below are
    // the host's): a rank computes on cores / ranks-on-node threads (tessera serve's default)
    // and streams at most `core_bandwidth` per thread, and the host's bandwidth is split among
    // the ranks running at the same moment. A GPU's figures are its own.
    bool shared_by_node_ranks = false;
    int cores = 1;
    double core_bandwidth = 0;  // bytes/s one thread streams alone
    // FLOP/s one thread computes at alone on the host: more than flops / cores, since a lone
    // busy core shares nothing (0: flops / cores).
    double core_flops = 0;
    int devices_per_node = 8;
    double memory_bandwidth = 0;    // bytes/s one device reads its memory at
    double flops = 0;               // dense bf16 FLOP/s per device
    double intra_node_bandwidth = 0;  // bytes/s per device, one direction (NVLink, shared memory)
    double inter_node_bandwidth = 0;  // bytes/s per device, one direction (the NIC's share)
    double collective_latency_s = 0;  // fixed cost of one collective that waits for compute (Traffic::syncs)
    // Measured fractions of the peaks that kernels reach (the cost model's knobs).
    double bandwidth_efficiency = 0.8;
    double flops_efficiency = 0.6;
    double expert_efficiency = 1.0;            // routed-expert GEMMs' FLOP/s relative to dense ones
    double expert_bandwidth_efficiency = 1.0;  // and the rate decode streams experts at, relative
    std::string source;  // where the figures come from
};

// cpu, h20, h800, h100, a100. Unknown names fail listing these.
StatusOr<DeviceSpec> device_preset(const std::string& name);
std::vector<std::string> device_preset_names();

}  // namespace tessera::planner
