"""DeepSeek's expert-parallel load balancer (deepseek-ai/EPLB `rebalance_experts`), written
here from its published algorithm in PyTorch, as the trusted twin of eplb/balancer.cpp:

  balanced_packing   items by descending weight, each onto the lightest pack with room;
  replicate_experts  each extra slot to the expert with the largest weight per copy;
  hierarchical       groups onto nodes, replicas inside each node, replicas onto GPUs;
  global             the same with one group and one node.

Arithmetic in float32 on CPU as the reference's; ties: a stable descending sort, Python's
min() (first pack), torch.max (first index).
"""

import torch


def balanced_packing(weight, num_packs):
    rows, n = weight.shape
    per_pack = n // num_packs
    if per_pack == 1:
        return torch.arange(n).expand(rows, n).clone(), torch.zeros(rows, n, dtype=torch.int64)
    order = weight.float().sort(dim=-1, descending=True, stable=True).indices
    pack = torch.full((rows, n), -1, dtype=torch.int64)
    rank = torch.full((rows, n), -1, dtype=torch.int64)
    for r in range(rows):
        load = [torch.tensor(0.0)] * num_packs
        items = [0] * num_packs
        for item in order[r].tolist():
            best = min((p for p in range(num_packs) if items[p] < per_pack), key=lambda p: load[p])
            pack[r, item] = best
            rank[r, item] = items[best]
            load[best] = load[best] + weight[r, item]
            items[best] += 1
    return pack, rank


def replicate_experts(weight, num_phy):
    rows, num_log = weight.shape
    phy2log = torch.arange(num_phy).repeat(rows, 1)
    replica = torch.zeros(rows, num_phy, dtype=torch.int64)
    count = torch.ones(rows, num_log, dtype=torch.int64)
    every = torch.arange(rows)
    for slot in range(num_log, num_phy):
        best = (weight / count).max(dim=-1).indices
        phy2log[:, slot] = best
        replica[:, slot] = count[every, best]
        count[every, best] += 1
    return phy2log, replica, count


def hierarchical(weight, num_phy, num_groups, num_nodes, num_gpus):
    layers, num_log = weight.shape
    group_size = num_log // num_groups
    groups_per_node = num_groups // num_nodes
    per_gpu = num_phy // num_gpus

    def inverse(perm):
        inv = torch.empty_like(perm)
        inv.scatter_(1, perm, torch.arange(perm.size(1), dtype=torch.int64).expand(perm.shape))
        return inv

    group_load = weight.unflatten(-1, (num_groups, group_size)).sum(-1)
    group_pack, group_rank = balanced_packing(group_load, num_nodes)
    log2mlog = (((group_pack * groups_per_node + group_rank) * group_size).unsqueeze(-1) +
                torch.arange(group_size, dtype=torch.int64)).flatten(-2)
    mlog2log = inverse(log2mlog)

    mlog_load = weight.gather(-1, mlog2log).view(-1, num_log // num_nodes)
    phy2mlog, phyrank, mlogcnt = replicate_experts(mlog_load, num_phy // num_nodes)

    phy_load = (mlog_load / mlogcnt).gather(-1, phy2mlog)
    pack, rank = balanced_packing(phy_load, num_gpus // num_nodes)
    pphy2phy = inverse(pack * per_gpu + rank)

    pphy2mlog = phy2mlog.gather(-1, pphy2phy)
    pphy2mlog = (pphy2mlog.view(layers, num_nodes, -1) +
                 torch.arange(0, num_log, num_log // num_nodes).view(1, -1, 1)).flatten(-2)
    pphy2log = mlog2log.gather(-1, pphy2mlog)
    pphyrank = phyrank.gather(-1, pphy2phy).view(layers, -1)
    logcnt = mlogcnt.view(layers, -1).gather(-1, log2mlog)
    return pphy2log, pphyrank, logcnt


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus, use_hierarchical=None):
    weight = torch.as_tensor(weight).float().cpu()
    layers, num_log = weight.shape
    if use_hierarchical is None:
        use_hierarchical = num_groups % num_nodes == 0
    if use_hierarchical:
        phy2log, phyrank, logcnt = hierarchical(weight, num_replicas, num_groups, num_nodes, num_gpus)
    else:
        phy2log, phyrank, logcnt = hierarchical(weight, num_replicas, 1, 1, num_gpus)
    width = int(logcnt.max().item())
    log2phy = torch.full((layers, num_log, width), -1, dtype=torch.int64)
    log2phy.view(layers, -1).scatter_(-1, phy2log * width + phyrank,
                                      torch.arange(num_replicas, dtype=torch.int64).expand(layers, -1))
    return phy2log, log2phy, logcnt
