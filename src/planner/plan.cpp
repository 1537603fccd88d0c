#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/core.h>

#include "base/env.h"
#include "dist/pp_partition.h"
#include "planner/cost_model.h"
#include "scheduler/memory_plan.h"

namespace tessera::planner {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Above this the pool leaves too little of a device for activations: a fix never asks for more.
constexpr double kMaxUsefulMemFraction = 0.95;

struct Sizing {
    std::vector<RankPlan> ranks;
    std::string first_error;
};

RankPlace place_of(const server::ServerArgs& a, const dist::ParallelLayout& layout, const dist::RankCoords& c,
                   int pp_size) {
    RankPlace place;
    place.tp_rank = c.tp_rank;
    place.tp_size = a.tp_size;
    place.pp_rank = c.pp_rank;
    place.pp_size = pp_size;
    place.layer_partition = pp_size == a.pp_size ? env().pp_layer_partition : std::nullopt;
    place.ep_rank = c.moe_ep_rank;
    place.ep_size = a.ep_size;
    place.moe_tp_rank = c.moe_tp_rank;
    place.moe_tp_size = layout.moe_tp_size();
    place.num_redundant_experts = a.ep_num_redundant_experts;
    place.attn_tp_rank = c.attn_tp_rank;
    place.attn_tp_size = layout.attn_tp_size();
    place.dp_attention = layout.attn_dp_size() > 1;
    place.dp_lm_head = place.dp_attention && a.enable_dp_lm_head;
    place.dense_mlp_replicated = a.moe_dense_tp_size == 1;
    // SGLang's DeepEP also keeps shared experts whole (deepseek_v2.py DeepseekV2MoE.__init__).
    place.moe_all_to_all = a.moe_a2a_backend == "all_to_all" || a.moe_a2a_backend == "deepep";
    return place;
}

std::int64_t capacity_of(const PlanRequest& req, const dist::ParallelLayout& layout, int node) {
    if (req.device.memory_bytes > 0) return req.device.memory_bytes;
    const auto local = static_cast<std::int64_t>(layout.ranks_on_node(node).size());
    return req.host_memory_bytes / std::max<std::int64_t>(1, local);
}

scheduler::RankMemoryRequest memory_request(const server::ServerArgs& a, const loader::ModelConfig& c,
                                            std::int64_t capacity, const RankSize& size, int pp_size) {
    scheduler::RankMemoryRequest r = rank_memory_request(a, c.max_position_embeddings, capacity, size.weight_bytes,
                                                         size.kv_bytes_per_token);
    r.pp_size = pp_size;
    return r;
}

// Sizes every rank of one replica's layout with `pp_size` stages (the asked one, or a
// candidate fix).
StatusOr<Sizing> size_ranks(const PlanRequest& req, const WeightTypes& types, int pp_size) {
    server::ServerArgs a = req.args;
    dist::ParallelConfig config = a.parallel_config();
    config.pp_size = pp_size;
    TSR_ASSIGN_OR_RETURN(dist::ParallelLayout layout, dist::ParallelLayout::create(config));
    Sizing out;
    std::map<std::tuple<int, int, int, int, int>, StatusOr<RankSize>> sizes;  // shared by equal places
    for (int r = 0; r < layout.world_size(); ++r) {
        RankPlan rank;
        rank.coords = layout.coords(r);
        rank.capacity_bytes = capacity_of(req, layout, rank.coords.node);
        const RankPlace place = place_of(a, layout, rank.coords, pp_size);
        const auto key = std::make_tuple(place.tp_rank, place.pp_rank, place.ep_rank, place.moe_tp_rank,
                                         place.attn_tp_rank);
        auto it = sizes.find(key);
        if (it == sizes.end()) it = sizes.emplace(key, rank_size(req.config, place, types)).first;
        if (!it->second.ok()) {
            rank.error = it->second.status().message();
        } else {
            rank.size = it->second.value();
            auto memory = scheduler::plan_rank_memory(memory_request(a, req.config, rank.capacity_bytes, rank.size,
                                                                     pp_size));
            if (memory.ok()) rank.own_max_total_num_tokens = memory->plan.max_total_num_tokens;
            else rank.error = memory.status().message();
        }
        if (!rank.error.empty() && out.first_error.empty())
            out.first_error = "rank " + std::to_string(r) + ": " + rank.error;
        out.ranks.push_back(std::move(rank));
    }
    return out;
}

// The smallest --mem-fraction-static that holds every rank's weights and one request of
// `context_len` tokens.
double fraction_needed(const std::vector<RankPlan>& ranks, std::int64_t context_len) {
    double needed = 0;
    for (const RankPlan& r : ranks) {
        if (!r.error.empty() && r.size.kv_bytes_per_token == 0) return 2.0;  // cannot split: no fraction helps
        const double bytes = static_cast<double>(r.size.weight_bytes) +
                             static_cast<double>(context_len) * static_cast<double>(r.size.kv_bytes_per_token);
        needed = std::max(needed, bytes / static_cast<double>(r.capacity_bytes));
    }
    return std::ceil(needed * 100.0 - 1e-9) / 100.0;
}

}  // namespace

scheduler::RankMemoryRequest rank_memory_request(const server::ServerArgs& a, std::int64_t model_context_len,
                                                 std::int64_t capacity_bytes, std::int64_t weight_bytes,
                                                 std::int64_t kv_bytes_per_token) {
    scheduler::RankMemoryRequest r;
    r.capacity_bytes = capacity_bytes;
    r.weight_bytes = weight_bytes;
    r.kv_bytes_per_token = kv_bytes_per_token;
    r.model_context_len = model_context_len;
    r.mem_fraction_static = a.mem_fraction_static;
    r.chunked_prefill_size = a.chunked_prefill_size;
    r.context_length = a.context_length;
    if (a.max_running_requests) r.max_running_requests = *a.max_running_requests;
    r.max_total_tokens = a.max_total_tokens;
    r.max_prefill_tokens = a.max_prefill_tokens;
    r.page_size = a.page_size.value_or(1);
    r.tp_size = a.tp_size;
    r.pp_size = a.pp_size;
    r.dp_size = a.dp_size;
    r.enable_dp_attention = a.enable_dp_attention;
    return r;
}

std::string bytes_text(std::int64_t bytes) {
    const auto b = static_cast<double>(bytes);
    if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
    if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
    return fmt::format("{:.1f} kB", b / 1e3);
}

namespace {

// Nodes of `per_node` devices for `devices` ranks, such that SGLang's rule holds:
// (tp x pp) divisible by the nodes.
int nodes_for(int devices, int per_node, int replica_ranks) {
    int nodes = (devices + per_node - 1) / per_node;
    while (replica_ranks % nodes != 0 && nodes < replica_ranks) ++nodes;
    return nodes;
}

// The most nodes any group of `kind` spans.
int nodes_spanned(const dist::ParallelLayout& layout, dist::GroupKind kind) {
    std::size_t most = 1;
    for (const auto& group : layout.groups(kind)) {
        std::set<int> nodes;
        for (int r : group) nodes.insert(layout.coords(r).node);
        most = std::max(most, nodes.size());
    }
    return static_cast<int>(most);
}

bool crosses_nodes(const dist::ParallelLayout& layout, dist::GroupKind kind) { return nodes_spanned(layout, kind) > 1; }

// How many nodes other than its own one token's routed experts sit on, on average, with the
// experts spread evenly over `nodes` nodes. DeepSeek's grouped routing keeps a token's experts
// in topk_group of n_group groups, and DeepSeek's balancer keeps whole groups on a node when
// the nodes divide the groups (eplb/deepseek.py rebalance_experts_hierarchical): a node is
// missed when none of its groups is picked. Otherwise top_k experts are drawn from them all.
double remote_nodes_per_token(const loader::ModelConfig& c, int nodes) {
    if (nodes <= 1) return 0.0;
    const bool grouped = c.moe.n_group > 1 && c.moe.topk_group < c.moe.n_group && c.moe.n_group % nodes == 0;
    const double total = static_cast<double>(grouped ? c.moe.n_group : c.moe.num_experts);
    const double picks = static_cast<double>(grouped ? c.moe.topk_group : c.moe.num_experts_per_tok);
    const double per_node = total / nodes;
    double missed = 1.0;  // C(total - per_node, picks) / C(total, picks)
    for (double i = 0; i < picks; ++i) missed *= std::max(0.0, total - per_node - i) / (total - i);
    return (nodes - 1) * (1.0 - missed);
}

// Layers of one kind: the most any pipeline stage has (a stage's pace in prefill) and how many
// the model has (a token's trip through every stage in decode).
struct LayerCount {
    std::int64_t stage = 0;
    std::int64_t total = 0;
};

struct StageLayers {
    LayerCount all, moe, dense;
};

// Seed 003's per-token volumes, per layer and per rank, in the activation type. MoE traffic
// happens at the MoE layers only (DeepSeek's first layers are dense).
std::vector<Traffic> traffic_of(const PlanRequest& req, const dist::ParallelLayout& layout, const WeightTypes& types,
                                const StageLayers& layers) {
    const server::ServerArgs& a = req.args;
    const loader::ModelConfig& c = req.config;
    const std::int64_t H = c.hidden_size;
    const auto act_bytes = static_cast<std::int64_t>(dtype_size(types.compute));
    std::vector<Traffic> out;
    const auto add = [&out](std::string kind, double bytes, LayerCount count, int syncs, bool inter_node,
                            std::string formula, TrafficPhase phase = TrafficPhase::kEvery) {
        if (count.total == 0) return;
        Traffic t{std::move(kind), static_cast<std::int64_t>(bytes), count.stage, syncs, inter_node, std::move(formula),
                  phase};
        t.total_layers = count.total;
        out.push_back(std::move(t));
    };
    const int attn_tp = layout.attn_tp_size();
    const int tp = a.tp_size;
    const auto row_bytes = static_cast<double>(H * act_bytes);
    auto ring = [](int n, double bytes) { return 2.0 * (n - 1) / n * bytes; };
    const bool expert_parallel = c.is_moe() && a.ep_size > 1;
    // SGLang's DeepEP, planned as SGLang runs it on GPUs; on this CPU tessera serve runs it as
    // its all_to_all exchange, and it is planned so.
    const bool on_gpus = req.device.memory_bytes > 0;
    const bool deepep = expert_parallel && a.moe_a2a_backend == "deepep" && on_gpus;
    const bool all_to_all = expert_parallel && (a.moe_a2a_backend == "all_to_all" ||
                                                (a.moe_a2a_backend == "deepep" && !on_gpus));
    const bool dense_replicated = a.moe_dense_tp_size == 1;
    if (!a.enable_dp_attention && tp > 1) {
        // With an all-to-all dispatcher a MoE layer's output returns through the combine,
        // shared experts included (layers/moe.cpp dispatch_all_to_all); a dense layer split
        // over TP still all-reduces its MLP.
        const bool mlp_reduce = !all_to_all && !deepep;
        const int reduces = mlp_reduce ? 2 : 1;
        add("tp all-reduce", reduces * ring(tp, row_bytes), layers.all, reduces,
            crosses_nodes(layout, dist::GroupKind::kTp),
            mlp_reduce ? "2 all-reduces (after attention, after the MLP) x 2(T-1)/T x H x bytes"
                       : "1 all-reduce (after attention) x 2(T-1)/T x H x bytes");
        if (!mlp_reduce && !dense_replicated)
            add("tp all-reduce, dense mlp", ring(tp, row_bytes), layers.dense, 1,
                crosses_nodes(layout, dist::GroupKind::kTp),
                "1 all-reduce after each dense layer's MLP x 2(T-1)/T x H x bytes");
    }
    if (a.enable_dp_attention) {
        if (attn_tp > 1)
            add("attention-tp all-reduce", ring(attn_tp, row_bytes), layers.all, 1,
                crosses_nodes(layout, dist::GroupKind::kAttnTp), "1 all-reduce after attention x 2(A-1)/A x H x bytes");
        // Under an all-to-all dispatcher a MoE layer's tokens stay with their DP group, and
        // so do a dense layer's with --moe-dense-tp-size 1 (SGLang's communicator.py
        // LayerScatterModes._compute_mlp_mode; models/decoder.cpp scattered_moe_forward):
        // only the other layers gather.
        const bool scattered_moe = all_to_all || deepep;
        LayerCount gathering = scattered_moe ? LayerCount{} : layers.moe;
        if (!dense_replicated) {
            gathering.stage = std::max(gathering.stage, scattered_moe ? layers.dense.stage : layers.all.stage);
            gathering.total += layers.dense.total;
        }
        // tessera sums attention over attention TP before a scattered MoE layer, then gathers
        // the slices its attention-TP ranks sent (DeepEP's reduce-scatter and all-gather move
        // what the all-reduce above counts).
        if (all_to_all && attn_tp > 1)
            add("attention-tp all-gather, moe slices", static_cast<double>(attn_tp - 1) / attn_tp * row_bytes,
                layers.moe, 1, crosses_nodes(layout, dist::GroupKind::kAttnTp),
                "each attention-TP rank's slice of the group's rows: (A-1)/A x H x bytes");
        add("dp-attention gather + scatter", 2.0 * (tp - 1) / tp * row_bytes, gathering, 2,
            crosses_nodes(layout, dist::GroupKind::kTp),
            "all-gather before the MLP/MoE + reduce-scatter after: 2 x (T-1)/T x H x bytes");
    }
    const double top_k = static_cast<double>(c.moe.num_experts_per_tok);
    const double share = static_cast<double>(a.ep_size - 1) / a.ep_size;
    // A token is sent by the one rank that owns it: per token a rank sends 1/A of the rows,
    // its share of the tokens it shares with the A - 1 other ranks holding them (its
    // attention-TP group, or the whole TP group without DP-attention).
    const double owners = attn_tp;
    if (all_to_all) {
        // The dispatch follows the router and the all-gather the combine: only the combine
        // waits for compute (the experts).
        add("ep dispatch + combine", 2.0 * top_k * share * row_bytes / owners, layers.moe, 1,
            crosses_nodes(layout, dist::GroupKind::kMoeEp),
            "top_k x (ep-1)/ep of the owned rows out and back: 2 x top_k x (ep-1)/ep x H x bytes / A");
        // Attention split over the TP group needs every token's output on every rank: the
        // owners' rows are all-gathered (under DP-attention they stay with their group).
        if (!a.enable_dp_attention)
            add("ep all-gather of owned rows", share * row_bytes, layers.moe, 0,
                crosses_nodes(layout, dist::GroupKind::kMoeEp), "the other ranks' owned rows: (ep-1)/ep x H x bytes");
    }
    if (deepep) {
        // DeepEP dispatches fp8 rows with one f32 scale per 128 (for DeepGEMM's fp8 experts;
        // bf16 otherwise) and combines in the activation type.
        const bool fp8 = types.linear == DType::kF8E4M3;
        const double dispatch_row = fp8 ? static_cast<double>(H) * (1.0 + 4.0 / 128.0) : row_bytes;
        const double row = (dispatch_row + row_bytes) / owners;
        const char* row_text = fp8 ? "(H x 1.03 fp8 + H x bytes) / A" : "2 x H x bytes / A";
        const bool normal_prefill = a.deepep_mode != "low_latency";
        const bool low_latency_decode = a.deepep_mode != "normal";
        auto phase = [](bool prefill, bool decode) {
            return prefill && decode ? TrafficPhase::kEvery : prefill ? TrafficPhase::kPrefill : TrafficPhase::kDecode;
        };
        const int nodes = nodes_spanned(layout, dist::GroupKind::kMoeEp);
        // Normal kernels send a token once to each other node holding one of its experts
        // (RDMA), which forwards it to those experts' GPUs there over NVLink.
        const bool uses_normal = normal_prefill || !low_latency_decode;
        const TrafficPhase normal = phase(normal_prefill, !low_latency_decode);
        const double remote_nodes = remote_nodes_per_token(c, nodes);
        if (uses_normal && nodes > 1)
            add("ep dispatch + combine (DeepEP normal, between nodes)", remote_nodes * row, layers.moe, 1, true,
                fmt::format("other nodes a token's experts are on ({:.2f}) x {}", remote_nodes, row_text), normal);
        if (uses_normal)
            add("ep dispatch + combine (DeepEP normal, inside nodes)", top_k * share * row, layers.moe, 1, false,
                fmt::format("top_k x (ep-1)/ep rows forwarded over NVLink x {}", row_text), normal);
        // Low-latency kernels send every (token, expert) pair straight to the expert's GPU.
        if (!normal_prefill || low_latency_decode)
            add("ep dispatch + combine (DeepEP low-latency)", top_k * share * row, layers.moe, 1, nodes > 1,
                fmt::format("top_k x (ep-1)/ep rows x {}", row_text), phase(!normal_prefill, low_latency_decode));
    }
    if (a.pp_size > 1) {
        add("pp send", 2.0 * row_bytes, {a.pp_size - 1, a.pp_size - 1}, 1, crosses_nodes(layout, dist::GroupKind::kPp),
            "hidden states and residual at each of the P-1 stage boundaries: 2 x H x bytes");
    }
    return out;
}

}  // namespace

bool Plan::fits() const {
    return std::all_of(checks.begin(), checks.end(), [](const Check& c) { return c.ok; });
}

StatusOr<Plan> make_plan(const PlanRequest& req) {
    const server::ServerArgs& a = req.args;
    const loader::ModelConfig& c = req.config;
    Plan p;
    p.rewrites = a.notes;
    if (a.enable_deterministic_inference)
        p.caveats.push_back("--enable-deterministic-inference: the estimates are the default kernels'; the "
                            "batch-invariant ones prefill slower (0.76 of the default for a 2048-token prompt on a "
                            "2-core AVX-512 CPU, docs/deterministic-inference.md), decode about the same");
    if (Status s = a.check_tessera_runs(); !s.ok()) p.tessera_refusal = s.message();
    p.parallel = a.parallel_config();
    TSR_ASSIGN_OR_RETURN(dist::ParallelLayout layout, dist::ParallelLayout::create(p.parallel));
    p.world_size = layout.world_size();
    p.pp_size = a.pp_size;
    TSR_ASSIGN_OR_RETURN(p.types, weight_types(c, a.dtype, a.quantization, a.kv_cache_dtype));
    TSR_ASSIGN_OR_RETURN(Sizing sizing, size_ranks(req, p.types, a.pp_size));
    p.ranks = std::move(sizing.ranks);

    // Rank 0's settings and the pool every rank agrees on (the smallest), as serve logs them.
    const RankPlan& first = p.ranks.front();
    p.context_len = a.context_length.value_or(c.max_position_embeddings);
    const scheduler::RankMemory defaults =
        scheduler::rank_memory_defaults(memory_request(a, c, first.capacity_bytes, first.size, a.pp_size));
    p.mem_fraction_static = defaults.mem_fraction_static;
    p.chunked_prefill_size = defaults.chunked_prefill_size;
    if (first.error.empty()) {
        auto memory = scheduler::plan_rank_memory(memory_request(a, c, first.capacity_bytes, first.size, a.pp_size));
        if (memory.ok()) p.max_running_requests = memory->plan.max_running_requests;
    }
    if (sizing.first_error.empty()) {
        std::int64_t agreed = first.own_max_total_num_tokens;
        for (const RankPlan& r : p.ranks) agreed = std::min(agreed, r.own_max_total_num_tokens);
        const std::int64_t page = a.page_size.value_or(1);
        p.max_total_num_tokens = agreed / page * page;
        p.available_gb_rank0 = static_cast<double>(first.capacity_bytes - first.size.weight_bytes -
                                                   p.max_total_num_tokens * first.size.kv_bytes_per_token) /
                               kGiB;
        p.startup_line = fmt::format(
            "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, "
            "context_len={}, available_gpu_mem={:.2f} GB",
            p.max_total_num_tokens, p.chunked_prefill_size, a.max_prefill_tokens, p.max_running_requests,
            p.context_len, p.available_gb_rank0);
    }

    // Pre-launch checks: every split the model needs, then one full-context request per rank.
    Check split{true, "every rank can hold its shard (heads, intermediate sizes, experts, fp8 blocks split evenly)", ""};
    bool split_error = false;
    for (const RankPlan& r : p.ranks) {
        if (r.error.empty() || r.size.kv_bytes_per_token > 0) continue;
        split = {false, "rank " + std::to_string(r.coords.global_rank) + ": " + r.error, ""};
        split_error = true;
        break;
    }
    p.checks.push_back(split);
    if (req.device.memory_bytes > 0) {  // a GPU cluster: one rank per device
        Check devices{true, fmt::format("every node runs at most its {} devices", req.device.devices_per_node), ""};
        for (int node = 0; node < a.nnodes; ++node) {
            const auto ranks = static_cast<int>(layout.ranks_on_node(node).size());
            if (ranks <= req.device.devices_per_node) continue;
            devices = {false,
                       fmt::format("node {} would run {} ranks on {} devices", node, ranks, req.device.devices_per_node),
                       fmt::format("set --nnodes {}", nodes_for(p.world_size, req.device.devices_per_node,
                                                                 a.tp_size * a.pp_size))};
            break;
        }
        p.checks.push_back(devices);
    }
    if (!split_error) {
        Check fit{true,
                  fmt::format("one request of the full context ({} tokens) fits every rank's KV pool", p.context_len), ""};
        const bool fits = sizing.first_error.empty() && p.max_total_num_tokens >= p.context_len;
        if (!fits) {
            const double needed = fraction_needed(p.ranks, p.context_len);
            fit.ok = false;
            const RankPlan* worst = &p.ranks.front();
            for (const RankPlan& r : p.ranks)
                if (fraction_needed({r}, p.context_len) > fraction_needed({*worst}, p.context_len)) worst = &r;
            fit.what = fmt::format(
                "rank {} needs {:.2f} of its {} for its weights ({}) and one request of the full context ({} tokens, "
                "{} of KV){}",
                worst->coords.global_rank, needed, bytes_text(worst->capacity_bytes),
                bytes_text(worst->size.weight_bytes), p.context_len,
                bytes_text(p.context_len * worst->size.kv_bytes_per_token),
                sizing.first_error.empty() ? fmt::format("; the pool holds {} tokens", p.max_total_num_tokens)
                                           : std::string(" (SGLang would stop: \"Not enough memory\")"));
            if (a.max_total_tokens && *a.max_total_tokens < p.context_len && sizing.first_error.empty()) {
                fit.fix = fmt::format("raise --max-total-tokens to at least {} (or drop it)", p.context_len);
            } else if (needed <= kMaxUsefulMemFraction) {
                fit.fix = fmt::format("set --mem-fraction-static to at least {:.2f}", needed);
            } else if (req.suggest_fixes) {
                for (int pp = a.pp_size + 1; pp <= c.num_hidden_layers && fit.fix.empty(); ++pp) {
                    auto candidate = size_ranks(req, p.types, pp);
                    if (!candidate.ok()) continue;
                    const double f = fraction_needed(candidate->ranks, p.context_len);
                    if (f > kMaxUsefulMemFraction) continue;
                    const RankPlan& head = candidate->ranks.front();
                    const double asked =
                        scheduler::rank_memory_defaults(memory_request(a, c, head.capacity_bytes, head.size, pp))
                            .mem_fraction_static;
                    const int devices = a.tp_size * pp * (p.world_size / (a.tp_size * a.pp_size));
                    const int nodes = req.device.memory_bytes > 0
                                          ? nodes_for(devices, req.device.devices_per_node, a.tp_size * pp)
                                          : a.nnodes;
                    fit.fix = fmt::format("set --pp-size {}{} ({} devices){}", pp,
                                          nodes > a.nnodes ? fmt::format(" and --nnodes {}", nodes) : "", devices,
                                          f > asked ? fmt::format(" with --mem-fraction-static at least {:.2f}", f) : "");
                }
                if (fit.fix.empty())
                    fit.fix = "no --pp-size up to the model's " + std::to_string(c.num_hidden_layers) +
                              " layers fits this device; use devices with more memory or a larger --tp-size";
            }
        }
        p.checks.push_back(fit);
    }

    // Traffic, bubble and the roofline estimate.
    // Each stage's layers as the launch partitions them (rank_size's ranges).
    StageLayers layers;
    for (int stage = 0; stage < a.pp_size; ++stage) {
        auto range = dist::pp_layer_range(static_cast<int>(c.num_hidden_layers), stage, a.pp_size,
                                          env().pp_layer_partition);
        if (!range.ok()) continue;  // the rank table already names the partition's problem
        const std::int64_t all = range->end - range->begin;
        std::int64_t moe = 0;
        for (int l = range->begin; l < range->end; ++l) moe += c.is_moe_layer(l) ? 1 : 0;
        for (auto [count, n] : {std::pair{&layers.all, all}, {&layers.moe, moe}, {&layers.dense, all - moe}}) {
            count->stage = std::max(count->stage, n);
            count->total += n;
        }
    }
    p.traffic = traffic_of(req, layout, p.types, layers);
    const std::int64_t chunk = p.chunked_prefill_size > 0 ? p.chunked_prefill_size : req.prompt_len;
    p.micro_batches = (req.prompt_len + chunk - 1) / chunk;
    p.bubble = a.pp_size > 1 ? static_cast<double>(a.pp_size - 1) / (a.pp_size - 1 + p.micro_batches) : 0.0;

    if (sizing.first_error.empty()) {
        const Estimate e = estimate(req, p, layout);
        p.ttft_s = e.ttft_s;
        p.decode_tokens_per_s = e.decode_tokens_per_s;
        p.prefill_tokens_per_s = e.prefill_tokens_per_s;
        p.all_groups_prefill_tokens_per_s = e.all_groups_prefill_tokens_per_s;
        p.batch_decode_tokens_per_s = e.batch_decode_tokens_per_s;
        p.batch_decode_step_s = e.batch_decode_step_s;
        p.micro_batches = e.chunks;
        p.bubble = a.pp_size > 1 ? static_cast<double>(a.pp_size - 1) / (a.pp_size - 1 + p.micro_batches) : 0.0;
    }
    return p;
}

}  // namespace tessera::planner
