#include "dist/group_factory.h"

#include <algorithm>

namespace tessera::dist {

StatusOr<std::unique_ptr<ProcessGroup>> create_group(const ParallelLayout& layout, GroupKind kind,
                                                     int global_rank, Store& store,
                                                     const GroupFactoryOptions& options) {
    const std::vector<int> members = layout.group_of(kind, global_rank);
    if (members.empty())
        return Status::Internal("rank " + std::to_string(global_rank) + " is in no " + group_kind_name(kind) + " group");
    // Groups of one kind are told apart by their first member.
    const std::string name = options.name_prefix + group_kind_name(kind) + std::to_string(members.front());
    if (members.size() == 1) return make_single_group(name);
    const int node = layout.coords(members.front()).node;
    const bool one_node = std::all_of(members.begin(), members.end(),
                                      [&](int r) { return layout.coords(r).node == node; });
    ProcessGroupOptions o;
    o.name = name;
    o.rank = static_cast<int>(std::find(members.begin(), members.end(), global_rank) - members.begin());
    o.size = static_cast<int>(members.size());
    o.timeout = options.timeout;
    o.hostname = options.hostname;
    o.global_ranks = members;
    o.p2p_buffer_bytes = options.p2p_buffer_bytes;
    o.rank_order_reduce = options.rank_order_reduce;
    auto prefixed = make_prefix_store(name, store);
    if (one_node && !options.force_gloo) return make_shm_group(*prefixed, o);
    TSR_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> all, make_gloo_group(*prefixed, o));
    if (options.p2p_buffer_bytes == 0 || options.force_gloo) return all;
    // Members that share this rank's node pass point-to-point messages through shared memory.
    const int my_node = layout.coords(global_rank).node;
    std::vector<int> local_rank(members.size(), -1);
    std::vector<int> local_members;
    for (std::size_t i = 0; i < members.size(); ++i) {
        if (layout.coords(members[i]).node != my_node) continue;
        local_rank[i] = static_cast<int>(local_members.size());
        local_members.push_back(members[i]);
    }
    if (local_members.size() < 2) return all;
    ProcessGroupOptions lo = o;
    lo.name = name + "_node" + std::to_string(my_node);
    lo.rank = local_rank[static_cast<std::size_t>(o.rank)];
    lo.size = static_cast<int>(local_members.size());
    lo.global_ranks = local_members;
    auto local_store = make_prefix_store(lo.name, store);
    TSR_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> local, make_shm_group(*local_store, lo));
    return make_hybrid_group(std::move(all), std::move(local), std::move(local_rank));
}

}  // namespace tessera::dist
