#pragma once
// dist/group_factory.h — builds the ProcessGroup of one rank for one group kind of the
// ParallelLayout: shared memory when every member runs on the same node (--node-rank), Gloo
// over TCP otherwise (ranks of different nodes always talk over Gloo, even on one host). A
// Gloo group made with p2p_buffer_bytes sends point to point through shared memory to the
// members on its own node (make_hybrid_group).
// Every member of the group must call it (rendezvous through the store). Setup only.

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "dist/parallel_layout.h"
#include "dist/process_group.h"
#include "dist/store.h"

namespace tessera::dist {

struct GroupFactoryOptions {
    std::chrono::milliseconds timeout{300'000};
    std::string hostname = "127.0.0.1";  // the address peers reach this rank's Gloo device at
    bool force_gloo = false;             // tests and benchmarks: skip the shared-memory path
    // A second group over the same ranks (its own rendezvous and buffers) is told apart by
    // this prefix, e.g. "eplb_" for the expert transfer beside the TP group.
    std::string name_prefix;
    // Point-to-point through shared memory between members on one node: ring bytes per
    // ordered pair of ranks (see ProcessGroupOptions); 0 = a group on one node has none, and a
    // group across nodes sends everything over Gloo.
    std::size_t p2p_buffer_bytes = 0;
    bool rank_order_reduce = false;  // see ProcessGroupOptions
};

StatusOr<std::unique_ptr<ProcessGroup>> create_group(const ParallelLayout& layout, GroupKind kind,
                                                     int global_rank, Store& store,
                                                     const GroupFactoryOptions& options);

}  // namespace tessera::dist
