// `tessera serve`: the OpenAI-compatible server. Every rank loads its shard of the model and
// sizes the same KV pool; the leader (rank 0) runs the HTTP server, the tokenizer and the
// scheduler, and broadcasts each step to the other ranks of its TP group, which follow.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/engine.h"
#include "app/rank_runtime.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "executor/model_runner.h"
#include "executor/tp_batch_runner.h"
#include "kvcache/kv_pool.h"
#include "models/model.h"
#include "scheduler/memory_plan.h"
#include "server/http_server.h"

namespace tessera::app {

namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal.store(sig); }

int fail(const Status& s) {
    TSR_LOG(ERROR, "{}", s.message());
    return 1;
}

// The rank's memory: MemAvailable-independent total host memory (or the cgroup limit when
// lower), divided by the ranks on this host.
std::int64_t rank_capacity_bytes(int local_ranks) {
    std::int64_t total = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    std::string limit;
    if (cgroup >> limit && limit != "max") {
        try {
            total = std::min<std::int64_t>(total, std::stoll(limit));
        } catch (const std::exception&) {
        }
    }
    return total / std::max(1, local_ranks);
}

scheduler::SchedulePolicy parse_policy(const std::string& name) {
    if (name == "lpm") return scheduler::SchedulePolicy::kLpm;
    if (name == "lof") return scheduler::SchedulePolicy::kLof;
    if (name == "random") return scheduler::SchedulePolicy::kRandom;
    if (name == "priority") return scheduler::SchedulePolicy::kPriority;
    return scheduler::SchedulePolicy::kFcfs;
}

}  // namespace

int run_serve(const server::ServerArgs& args, std::optional<int> internal_rank, const std::string& internal_store) {
    if (args.schedule_policy == "dfs-weight" || args.schedule_policy == "routing-key")
        return fail(Status::Unimplemented("--schedule-policy " + args.schedule_policy +
                                          " is not implemented yet; use fcfs, lpm, lof, random or priority"));
    auto runtime = init_rank_runtime(args, internal_rank, internal_store);
    if (!runtime.ok()) return fail(runtime.status());
    const bool leader = runtime->coords.global_rank == 0;

    models::LoadOptions load{args.model_path, args.dtype};
    load.tp_rank = runtime->coords.tp_rank;
    load.tp_size = args.tp_size;
    load.tp_group = runtime->tp_group.get();
    auto model = models::load_model(load);
    if (!model.ok()) return fail(model.status());
    models::Model& m = **model;
    const auto& config = m.config();

    // Memory plan (reference §8), identical on every rank: the MIN over the TP group.
    const int local_ranks = static_cast<int>(runtime->layout.ranks_on_node(args.node_rank).size());
    const std::int64_t capacity = rank_capacity_bytes(local_ranks);
    const std::int64_t capacity_mib = capacity >> 20;
    const std::int64_t chunked = args.chunked_prefill_size.value_or(scheduler::default_chunked_prefill_size(capacity_mib));
    scheduler::MemFractionInput mf;
    mf.capacity_mib = capacity_mib;
    mf.chunked_prefill_size = chunked;
    mf.max_prefill_tokens = args.max_prefill_tokens;
    mf.tp_size = args.tp_size;
    mf.pp_size = args.pp_size;
    const double mem_fraction = args.mem_fraction_static.value_or(scheduler::default_mem_fraction_static(mf));
    const std::int64_t context_len = args.context_length.value_or(config.max_position_embeddings);
    scheduler::MemoryPlanInput in;
    in.capacity_bytes = capacity;
    in.weight_bytes = static_cast<std::int64_t>(m.weight_bytes());
    in.mem_fraction_static = mem_fraction;
    in.kv_bytes_per_token = m.kv_cache_shape().bytes_per_token();
    in.page_size = *args.page_size;
    in.context_len = context_len;
    if (args.max_running_requests) in.max_running_requests = *args.max_running_requests;
    if (args.max_total_tokens) in.max_total_tokens = *args.max_total_tokens;
    auto plan = scheduler::plan_memory(in);
    if (!plan.ok()) return fail(plan.status());
    for (const auto& w : plan->warnings) TSR_LOG(WARN, "{}", w);
    std::int64_t n_slots = plan->max_total_num_tokens;
    if (runtime->tp_group) {
        std::vector<float> v = {static_cast<float>(n_slots)};
        Status s = runtime->tp_group->all_reduce(v, dist::ReduceOp::kMin);
        if (!s.ok()) return fail(s);
        n_slots = static_cast<std::int64_t>(v[0]) / *args.page_size * *args.page_size;
    }
    kvcache::KvPool kv_pool({m.kv_cache_shape(), n_slots, *args.page_size});
    const kvcache::KvView kv = kv_pool.view();
    ThreadPool pool(runtime->threads);

    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    if (!leader) {
        Status s = executor::follow_leader(m, kv, &pool, *runtime->tp_group);
        if (!s.ok()) return fail(s);
        return 0;
    }

    auto tok = tokenizer::Tokenizer::load(args.tokenizer_path);
    if (!tok.ok()) return fail(tok.status());
    std::optional<tokenizer::ChatTemplate> chat;
    if (!(*tok)->chat_template().empty()) {
        auto compiled = tokenizer::ChatTemplate::compile((*tok)->chat_template(), (*tok)->bos_token(), (*tok)->eos_token());
        if (!compiled.ok()) return fail(compiled.status());
        chat.emplace(std::move(compiled).value());
    }
    executor::ModelRunner local_runner(m, kv, &pool);
    std::unique_ptr<executor::TpLeaderRunner> tp_runner;
    executor::BatchRunner* runner = &local_runner;
    if (runtime->tp_group) {
        tp_runner = std::make_unique<executor::TpLeaderRunner>(local_runner, *runtime->tp_group);
        runner = tp_runner.get();
    }

    EngineConfig ec;
    ec.served_model_name = args.served_model_name;
    ec.model_path = args.model_path;
    ec.context_len = context_len;
    ec.eos_token_ids = config.eos_token_ids;
    for (std::int32_t id : (*tok)->eos_token_ids())
        if (std::find(ec.eos_token_ids.begin(), ec.eos_token_ids.end(), id) == ec.eos_token_ids.end())
            ec.eos_token_ids.push_back(id);
    ec.random_seed = static_cast<std::uint64_t>(args.random_seed.value_or(static_cast<std::int64_t>(time(nullptr))));
    auto& sc = ec.scheduler;
    sc.max_total_num_tokens = n_slots;
    sc.page_size = *args.page_size;
    sc.max_running_requests = plan->max_running_requests;
    sc.max_prefill_tokens = args.max_prefill_tokens;
    sc.chunked_prefill_size = chunked;
    sc.prefill_max_requests = args.prefill_max_requests.value_or(-1);
    sc.context_len = context_len;
    sc.schedule_policy = parse_policy(args.schedule_policy);
    sc.disable_radix_cache = args.disable_radix_cache;
    sc.new_token_ratio.schedule_conservativeness = args.schedule_conservativeness;
    sc.decode_log_interval = args.decode_log_interval;
    sc.random_seed = ec.random_seed;
    if (Status s = sc.validate(); !s.ok()) return fail(s);
    const double available_gb = static_cast<double>(capacity - in.weight_bytes - n_slots * in.kv_bytes_per_token) / (1 << 30);
    ec.startup_info_json = nlohmann::json{{"tp_size", args.tp_size},
                                          {"page_size", *args.page_size},
                                          {"chunked_prefill_size", chunked},
                                          {"max_prefill_tokens", args.max_prefill_tokens},
                                          {"max_running_requests", plan->max_running_requests},
                                          {"mem_fraction_static", mem_fraction},
                                          {"schedule_policy", args.schedule_policy},
                                          {"disable_radix_cache", args.disable_radix_cache},
                                          {"dtype", dtype_name(m.compute_dtype())}}
                               .dump();
    Engine engine(ec, **tok, std::move(chat), *runner);
    // SGLang's start-up line, with the same field names.
    TSR_LOG(INFO,
            "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, "
            "context_len={}, available_gpu_mem={:.2f} GB",
            n_slots, chunked, args.max_prefill_tokens, plan->max_running_requests, context_len, available_gb);
    engine.start();

    server::HttpServerOptions ho;
    ho.host = args.host;
    ho.port = args.port;
    if (args.max_queued_requests) ho.max_pending_requests = *args.max_queued_requests;
    server::HttpServer http(engine, ho);
    if (Status s = http.start(); !s.ok()) return fail(s);
    TSR_LOG(INFO, "serving {} on http://{}:{} (POST /v1/chat/completions, /v1/completions, /generate)",
            args.served_model_name, args.host, http.port());
    while (g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    TSR_LOG(INFO, "signal {}: draining in-flight requests", g_stop_signal.load());
    http.stop();
    engine.stop();
    if (tp_runner) {
        Status s = tp_runner->stop_followers();
        if (!s.ok()) TSR_LOG(WARN, "{}", s.message());
    }
    TSR_LOG(INFO, "stopped");
    return 0;
}

}  // namespace tessera::app
