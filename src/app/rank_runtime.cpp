#include "app/rank_runtime.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "app/launcher.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "dist/group_factory.h"
#include "eplb/balancedness_report.h"
#include "kernels/batch_invariance.h"

namespace tessera::app {

namespace {

// The local address this host uses to reach `host`: what peers on other nodes can reach
// our Gloo device at (on one host: the loopback address itself).
std::string local_address_towards(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return host;
    std::string result = host;
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        sockaddr_in local{};
        socklen_t len = sizeof(local);
        char text[INET_ADDRSTRLEN] = {};
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
            inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) {
            result = text;
        }
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return result;
}

// The address Gloo binds to: that of GLOO_SOCKET_IFNAME when set (as PyTorch), else the
// one this host uses to reach the store.
StatusOr<std::string> gloo_address(const std::string& store_host) {
    const std::string& ifname = env().gloo_socket_ifname;
    if (ifname.empty()) return local_address_towards(store_host);
    if (ifname.find(',') != std::string::npos)
        return Status::InvalidArgument("GLOO_SOCKET_IFNAME=" + ifname + " lists several interfaces; tessera binds "
                                       "Gloo to one: name one interface");
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return Status::Internal(std::string("getifaddrs: ") + std::strerror(errno));
    std::string found;
    std::vector<std::string> names;
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
        if (std::find(names.begin(), names.end(), a->ifa_name) == names.end()) names.emplace_back(a->ifa_name);
        if (ifname != a->ifa_name || !found.empty()) continue;
        char text[INET_ADDRSTRLEN] = {};
        if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text)) != nullptr)
            found = text;
    }
    freeifaddrs(list);
    if (found.empty()) {
        std::string have;
        for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
        return Status::InvalidArgument("GLOO_SOCKET_IFNAME=" + ifname + ": this host has no interface of that name "
                                       "with an IPv4 address (it has: " + have + ")");
    }
    return found;
}

std::string stage_key(int rank) { return "stage/" + std::to_string(rank); }

std::int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Every rank of the world checks in at the store before any group forms, so a rank that
// never starts (a node not launched, a wrong --dist-init-addr) is named with its node when
// the timeout runs out, instead of surfacing as a timed-out key of some group's handshake.
Status await_world(dist::Store& store, const dist::ParallelLayout& layout, int rank, const std::string& address,
                   std::chrono::milliseconds timeout) {
    const std::string me = fmt::format("node {} pid {}", layout.coords(rank).node, ::getpid());
    TSR_RETURN_IF_ERROR(store.set("arrival/" + std::to_string(rank), std::vector<std::uint8_t>(me.begin(), me.end())));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 0; r < layout.world_size(); ++r) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        auto got = store.get("arrival/" + std::to_string(r), std::max(left, std::chrono::milliseconds(1)));
        if (got.ok()) continue;
        if (got.status().code() != StatusCode::kDeadlineExceeded) return got.status();
        std::vector<std::string> missing;
        std::vector<int> nodes;
        for (int m = r; m < layout.world_size(); ++m) {
            auto there = store.check("arrival/" + std::to_string(m));
            if (there.ok() && *there) continue;
            missing.push_back(std::to_string(m));
            const int node = layout.coords(m).node;
            if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
        }
        std::string which, on;
        for (const auto& m : missing) which += (which.empty() ? "" : ", ") + m;
        for (int n : nodes) on += (on.empty() ? "" : ", ") + std::to_string(n);
        return Status(StatusCode::kDeadlineExceeded, fmt::format(
            "rank{} {} (node{} {}) did not arrive at the rendezvous store {} within {} s: start every node with the "
            "same command and its --node-rank, --nnodes {} and --dist-init-addr {} (or raise --dist-timeout)",
            missing.size() > 1 ? "s" : "", which, nodes.size() > 1 ? "s" : "", on, address,
            timeout.count() / 1000, layout.config().nnodes, address));
    }
    return Status::Ok();
}

}  // namespace

StatusOr<RankRuntime> init_rank_runtime(const server::ServerArgs& args, std::optional<int> internal_rank,
                                        const std::string& internal_store) {
    TSR_ASSIGN_OR_RETURN(auto layout, dist::ParallelLayout::create(args.parallel_config()));
    kernels::set_batch_invariant(args.enable_deterministic_inference);
    const int rank = internal_rank.value_or(0);
    if (rank < 0 || rank >= layout.world_size())
        return Status::InvalidArgument("--internal-rank " + std::to_string(rank) + " is outside the world of " +
                                       std::to_string(layout.world_size()));
    RankRuntime rt{layout, layout.coords(rank)};
    const int local_ranks = static_cast<int>(layout.ranks_on_node(args.node_rank).size());
    rt.threads = args.threads_per_rank > 0 ? args.threads_per_rank
                                           : std::max(1, default_thread_count() / std::max(1, local_ranks));
    if (layout.world_size() == 1) return rt;

    // Every line of this rank names it; INFO only from rank 0 unless --log-all-ranks.
    logging::set_prefix((layout.n_schedulers() > 1 ? "dp" + std::to_string(rt.scheduler_index()) + " " : std::string()) + "tp" +
                        std::to_string(rt.coords.tp_rank) +
                        (args.pp_size > 1 ? " pp" + std::to_string(rt.coords.pp_rank) : ""));
    if (!rt.is_output_rank() && !args.log_all_ranks) logging::set_min_level(logging::Level::kWarn);

    TSR_ASSIGN_OR_RETURN(auto host_port, parse_host_port(internal_store, "--internal-store"));
    dist::TcpStoreOptions so;
    so.host = host_port.first;
    so.port = host_port.second;
    so.token = env().job_token;
    TSR_ASSIGN_OR_RETURN(rt.store, dist::make_tcp_store(so));

    dist::GroupFactoryOptions go;
    go.rank_order_reduce = args.enable_deterministic_inference;
    if (args.dist_timeout) go.timeout = std::chrono::seconds(*args.dist_timeout);
    TSR_RETURN_IF_ERROR(await_world(*rt.store, layout, rank, internal_store, go.timeout));
    TSR_ASSIGN_OR_RETURN(go.hostname, gloo_address(so.host));
    rt.address = go.hostname;
    TSR_LOG(DEBUG, "Gloo binds to {} ({})", go.hostname,
            env().gloo_socket_ifname.empty() ? "the route to " + so.host : "GLOO_SOCKET_IFNAME=" + env().gloo_socket_ifname);
    report_stage(rt, "forming process groups");
    auto tp_group = dist::create_group(layout, dist::GroupKind::kTp, rank, *rt.store, go);
    if (!tp_group.ok()) return with_peer_stages(rt, tp_group.status());
    rt.tp_group = std::move(tp_group).value();
    if (rt.tp_group->size() == 1) rt.tp_group.reset();
    if (args.pp_size > 1) {
        dist::GroupFactoryOptions pp_options = go;
        // Stages on one node pass hidden states through shared memory: a decode step's fit in the
        // ring at once, a prefill chunk's stream through it while the sender computes on.
        pp_options.p2p_buffer_bytes = std::size_t{4} << 20;
        pp_options.force_gloo = env().pp_over_gloo;
        auto pp_group = dist::create_group(layout, dist::GroupKind::kPp, rank, *rt.store, pp_options);
        if (!pp_group.ok()) return with_peer_stages(rt, pp_group.status());
        rt.pp_group = std::move(pp_group).value();
    }
    if (args.enable_eplb && rt.tp_group && !env().eplb_transfer_between_passes) {
        dist::GroupFactoryOptions transfer_options = go;
        transfer_options.name_prefix = "eplb_";
        auto transfer_group = dist::create_group(layout, dist::GroupKind::kTp, rank, *rt.store, transfer_options);
        if (!transfer_group.ok()) return with_peer_stages(rt, transfer_group.status());
        rt.eplb_transfer_group = std::move(transfer_group).value();
    }
    if (layout.attn_dp_size() > 1 && layout.attn_tp_size() > 1) {
        auto attn_tp_group = dist::create_group(layout, dist::GroupKind::kAttnTp, rank, *rt.store, go);
        if (!attn_tp_group.ok()) return with_peer_stages(rt, attn_tp_group.status());
        rt.attn_tp_group = std::move(attn_tp_group).value();
    }
    if (args.enable_prefill_delayer && layout.attn_dp_size() > 1) {
        dist::GroupFactoryOptions agreement_options = go;
        agreement_options.name_prefix = "prefill_delayer_";
        auto attn_dp_group = dist::create_group(layout, dist::GroupKind::kAttnDp, rank, *rt.store, agreement_options);
        if (!attn_dp_group.ok()) return with_peer_stages(rt, attn_dp_group.status());
        rt.attn_dp_group = std::move(attn_dp_group).value();
    }
    const std::string attention = layout.attn_dp_size() > 1 ? fmt::format(" (attn_dp {} attn_tp {})",
                                                                           rt.coords.attn_dp_rank, rt.coords.attn_tp_rank)
                                                               : std::string();
    const std::string pp_link = rt.pp_group ? ", pp group over " + rt.pp_group->backend_name() : std::string();
    TSR_LOG(INFO, "rank {} of {}: tp_rank {}{} pp_rank {} on node {}, tp group over {}{}, {} threads", rank,
            layout.world_size(), rt.coords.tp_rank, attention, rt.coords.pp_rank, rt.coords.node,
            rt.tp_group ? rt.tp_group->backend_name() : "none", pp_link, rt.threads);
    return rt;
}

void report_stage(const RankRuntime& rt, const std::string& stage) {
    if (rt.store == nullptr) return;
    const std::string value = stage + "\n" + std::to_string(unix_seconds());
    Status s = rt.store->set(stage_key(rt.coords.global_rank), std::vector<std::uint8_t>(value.begin(), value.end()));
    if (!s.ok()) TSR_LOG(WARN, "noting start-up stage '{}' at the store: {}", stage, s.message());
}

Status with_peer_stages(const RankRuntime& rt, Status s) {
    if (s.ok() || rt.store == nullptr || !dist::breaks_group(s)) return s;
    std::string where;
    const std::int64_t now = unix_seconds();
    for (int r = 0; r < rt.layout.world_size(); ++r) {
        if (r == rt.coords.global_rank) continue;
        std::string stage = "no start-up stage reported";
        auto there = rt.store->check(stage_key(r));
        if (there.ok() && *there) {
            auto value = rt.store->get(stage_key(r), std::chrono::milliseconds(1000));
            if (value.ok()) {
                const std::string text(value->begin(), value->end());
                const auto newline = text.find('\n');
                std::int64_t since = now;
                try {
                    since = std::stoll(text.substr(newline + 1));
                } catch (const std::exception&) {
                }
                stage = fmt::format("{}, for {} s", text.substr(0, newline), std::max<std::int64_t>(0, now - since));
            }
        }
        where += fmt::format("{}rank {} (node {}): {}", where.empty() ? "" : "; ", r, rt.layout.coords(r).node, stage);
    }
    const bool ends_sentence = !s.message().empty() && std::strchr(".?!", s.message().back()) != nullptr;
    return Status(s.code(), fmt::format("{}{} Where the other ranks were: {}. A rank still loading the model when "
                                        "--dist-timeout runs out needs a longer --dist-timeout; one stuck elsewhere "
                                        "is stalled or its node is overloaded",
                                        s.message(), ends_sentence ? "" : ".", where));
}

layers::DpAttentionParallel RankRuntime::dp_attention(bool dp_lm_head) const {
    layers::DpAttentionParallel dpa;
    if (layout.attn_dp_size() <= 1) return dpa;
    dpa.dp_rank = coords.attn_dp_rank;
    dpa.dp_size = layout.attn_dp_size();
    dpa.tp_rank = coords.attn_tp_rank;
    dpa.tp_size = layout.attn_tp_size();
    dpa.attn_tp_group = attn_tp_group.get();
    dpa.tp_group = tp_group.get();
    dpa.dp_lm_head = dp_lm_head;
    return dpa;
}

StatusOr<models::LoadOptions> model_load_options(const server::ServerArgs& args, const RankRuntime& rt) {
    models::LoadOptions load{args.model_path, args.dtype, args.quantization, args.kv_cache_dtype,
                             args.quantization_param_path};
    load.json_model_override_args = args.json_model_override_args;
    load.is_embedding = args.is_embedding;
    load.return_routed_experts = args.enable_return_routed_experts;
    load.load_format = args.load_format;
    load.tp_rank = rt.coords.tp_rank;
    load.tp_size = args.tp_size;
    load.tp_group = rt.tp_group.get();
    load.pp_rank = rt.coords.pp_rank;
    load.pp_size = args.pp_size;
    load.layer_partition = env().pp_layer_partition;
    TSR_ASSIGN_OR_RETURN(load.moe.backend, layers::parse_moe_a2a_backend(args.moe_a2a_backend));
    if (args.moe_a2a_backend == "deepep" && rt.coords.global_rank == 0)
        TSR_LOG(INFO, "--moe-a2a-backend deepep: tokens go to their experts' ranks and back by tessera's all_to_all "
                      "exchange (DeepEP's GPU kernels, normal and low-latency alike, are not on CPU)");
    load.moe.ep_rank = rt.coords.moe_ep_rank;
    load.moe.ep_size = args.ep_size;
    load.moe.moe_tp_rank = rt.coords.moe_tp_rank;
    load.moe.moe_tp_size = rt.layout.moe_tp_size();
    // all_to_all runs with ep_size == tp_size (ServerArgs::resolve): the EP group is the TP group.
    if (load.moe.backend == layers::MoeA2aBackend::kAllToAll) load.moe.ep_group = rt.tp_group.get();
    TSR_ASSIGN_OR_RETURN(load.eplb, eplb_options(args, rt));
    load.dp_attention = rt.dp_attention(args.enable_dp_lm_head);
    load.dense_mlp_replicated = args.moe_dense_tp_size == 1;
    return load;
}

StatusOr<eplb::EplbOptions> eplb_options(const server::ServerArgs& args, const RankRuntime& rt) {
    eplb::EplbOptions o;
    o.num_redundant_experts = args.ep_num_redundant_experts;
    o.init_expert_location = args.init_expert_location;
    if (!args.ep_dispatch_algorithm.empty()) {
        TSR_ASSIGN_OR_RETURN(o.dispatch, eplb::parse_dispatch_algorithm(args.ep_dispatch_algorithm));
    }
    o.enable = args.enable_eplb;
    TSR_ASSIGN_OR_RETURN(o.algorithm, eplb::parse_eplb_algorithm(args.eplb_algorithm));
    o.rebalance_num_iterations = args.eplb_rebalance_num_iterations;
    if (args.eplb_rebalance_layers_per_chunk) o.layers_per_chunk = *args.eplb_rebalance_layers_per_chunk;
    o.min_rebalancing_utilization_threshold = args.eplb_min_rebalancing_utilization_threshold;
    TSR_ASSIGN_OR_RETURN(o.recorder_mode, eplb::parse_recorder_mode(args.expert_distribution_recorder_mode));
    o.recorder_buffer_size = args.expert_distribution_recorder_buffer_size.value_or(args.eplb_rebalance_num_iterations);
    TSR_ASSIGN_OR_RETURN(o.report, eplb::parse_report_mode(args.expert_balancedness_report_mode));
    o.num_nodes = args.nnodes;
    o.dump_dir = env().expert_distribution_recorder_dir;
    o.global_rank = rt.coords.global_rank;
    o.transfer_group = rt.eplb_transfer_group.get();
    if (o.report != eplb::ReportMode::kOff && rt.is_output_rank()) o.metrics = std::make_shared<eplb::BalancednessReport>();
    return o;
}

}  // namespace tessera::app
