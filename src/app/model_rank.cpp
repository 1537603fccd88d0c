#include "app/model_rank.h"


#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/logging.h"
#include "base/process_memory.h"
#include "base/thread_pool.h"
#include "executor/dp_attention_runner.h"
#include "executor/model_runner.h"
#include "executor/overlap_runner.h"
#include "executor/pipeline_trace.h"
#include "executor/pp_runner.h"
#include "executor/tp_batch_runner.h"
#include "kernels/batch_invariance.h"
#include "kernels/isa.h"
#include "kvcache/prefix_cache.h"
#include "models/reloadable_model.h"
#include "planner/plan.h"
#include "scheduler/memory_plan.h"

namespace tessera::app {

namespace {

// The rank's memory: total host memory (or the cgroup limit when lower), divided by the
// ranks on this host.
std::int64_t rank_capacity_bytes(int local_ranks) { return host_memory_bytes() / std::max(1, local_ranks); }

scheduler::SchedulePolicy parse_policy(const std::string& name) {
    if (name == "lpm") return scheduler::SchedulePolicy::kLpm;
    if (name == "lof") return scheduler::SchedulePolicy::kLof;
    if (name == "random") return scheduler::SchedulePolicy::kRandom;
    if (name == "priority") return scheduler::SchedulePolicy::kPriority;
    return scheduler::SchedulePolicy::kFcfs;
}

// Every rank must size the same pool: the minimum over the TP group, then over the PP group,
// is the minimum over the world.
StatusOr<std::int64_t> agree_on_slots(const RankRuntime& rt, std::int64_t n_slots) {
    for (dist::ProcessGroup* g : {rt.tp_group.get(), rt.pp_group.get()}) {
        if (g == nullptr) continue;
        std::int64_t slots[1] = {n_slots};
        TSR_RETURN_IF_ERROR(g->all_reduce(std::span<std::int64_t>(slots), dist::ReduceOp::kMin));
        n_slots = slots[0];
    }
    return n_slots;
}

std::string trace_key(int rank) { return "pipeline_trace/" + std::to_string(rank); }

}  // namespace

ModelRank::ModelRank(RankRuntime rt) : runtime(std::move(rt)) {}
ModelRank::~ModelRank() = default;

StatusOr<std::unique_ptr<ModelRank>> setup_model_rank(const server::ServerArgs& args, std::optional<int> internal_rank,
                                                      const std::string& internal_store) {
    if (args.schedule_policy == "dfs-weight" || args.schedule_policy == "routing-key")
        return Status::Unimplemented("--schedule-policy " + args.schedule_policy +
                                     " is not implemented yet; use fcfs, lpm, lof, random or priority");
    if (!args.pipeline_trace_path.empty() && args.pp_size < 2)
        return Status::InvalidArgument("--enable-pipeline-trace records pipeline stages; it needs --pp-size 2 or more");
    if (!args.pipeline_trace_path.empty() && args.dp_size > 1 && !args.enable_dp_attention)
        return Status::InvalidArgument("--enable-pipeline-trace with --dp-size " + std::to_string(args.dp_size) +
                                       ": every replica would write the same file; trace one replica (--dp-size 1)");
    if (!args.pipeline_trace_path.empty() && args.enable_dp_attention && args.dp_size > 1)
        return Status::Unimplemented("--enable-pipeline-trace with --enable-dp-attention is not implemented yet (the "
                                     "first stage's DP-attention rounds record no spans); trace without DP-attention");
    TSR_ASSIGN_OR_RETURN(RankRuntime runtime, init_rank_runtime(args, internal_rank, internal_store));
    auto rank = std::make_unique<ModelRank>(std::move(runtime));
    const RankRuntime& rt = rank->runtime;

    const auto t_load = std::chrono::steady_clock::now();
    report_stage(rt, "loading the model");
    TSR_ASSIGN_OR_RETURN(models::LoadOptions load, model_load_options(args, rt));
    auto model = models::load_model(load);
    if (!model.ok()) return with_peer_stages(rt, model.status());
    // /update_weights_from_disk swaps the weights behind this one object.
    rank->model = std::make_unique<models::ReloadableModel>(std::move(model).value(), load);
    rank->balancedness = load.eplb.metrics;
    rank->load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    const models::Model& m = *rank->model;
    const models::StageInfo stage = m.stage();
    const std::string weights =
        m.linear_weight_dtype() == m.compute_dtype()
            ? std::string(dtype_name(m.compute_dtype()))
            : fmt::format("{} projections, {}", dtype_name(m.linear_weight_dtype()), dtype_name(m.compute_dtype()));
    TSR_LOG(INFO, "model loaded in {:.2f} s: {:.1f} MB of {} weights (layers {}..{} of {}), {} threads, {} kernels{}",
            rank->load_s, m.weight_bytes() / 1e6, weights, stage.layer_begin, stage.layer_end - 1,
            m.config().num_hidden_layers, rt.threads, kernels::isa_name(kernels::active_isa()),
            kernels::batch_invariant() ? " (batch-invariant: deterministic inference)" : "");

    const kvcache::KvCacheShape kv_shape = m.kv_cache_shape();
    TSR_LOG(INFO, "KV cache: {} bytes per token ({} layers x {} of {} {} values{})", kv_shape.bytes_per_token(),
            kv_shape.n_layers, kv_shape.has_v() ? "K and V" : "one latent row", kv_shape.row_floats(),
            dtype_name(kv_shape.dtype), kv_shape.has_v() ? "" : ": MLA, kv_lora_rank + qk_rope_head_dim");

    // Memory plan (reference §8).
    const int local_ranks = static_cast<int>(rt.layout.ranks_on_node(args.node_rank).size());
    const std::int64_t capacity = rank_capacity_bytes(local_ranks);
    const scheduler::RankMemoryRequest request =
        planner::rank_memory_request(args, m.config().max_position_embeddings, capacity,
                                     static_cast<std::int64_t>(m.weight_bytes()), m.kv_cache_shape().bytes_per_token());
    TSR_ASSIGN_OR_RETURN(scheduler::RankMemory memory, scheduler::plan_rank_memory(request));
    const scheduler::MemoryPlan& plan = memory.plan;
    const std::int64_t chunked = memory.chunked_prefill_size;
    rank->mem_fraction_static = memory.mem_fraction_static;
    rank->context_len = memory.context_len;
    for (const auto& w : plan.warnings) TSR_LOG(WARN, "{}", w);
    report_stage(rt, "sizing the KV pool with the other ranks");
    auto agreed = agree_on_slots(rt, plan.max_total_num_tokens);
    if (!agreed.ok()) return with_peer_stages(rt, agreed.status());
    std::int64_t n_slots = *agreed;
    n_slots = n_slots / *args.page_size * *args.page_size;
    rank->kv_pool = std::make_unique<kvcache::KvPool>(kvcache::KvPoolConfig{m.kv_cache_shape(), n_slots, *args.page_size});
    rank->threads = std::make_unique<ThreadPool>(rt.threads);
    rank->available_gb =
        static_cast<double>(capacity - request.weight_bytes - n_slots * request.kv_bytes_per_token) / (1 << 30);
    if (!args.pipeline_trace_path.empty()) {
        rank->trace = std::make_unique<executor::PipelineTrace>(
            rt.coords.global_rank, "pp" + std::to_string(rt.coords.pp_rank) + " tp" + std::to_string(rt.coords.tp_rank));
    }

    scheduler::SchedulerConfig& sc = rank->scheduler;
    sc.max_total_num_tokens = n_slots;
    sc.page_size = *args.page_size;
    sc.max_running_requests = plan.max_running_requests;
    if (args.min_free_slots_delay && *args.min_free_slots_delay > 1)
        sc.min_free_slots = std::min<std::int64_t>(*args.min_free_slots_delay, plan.max_running_requests);
    sc.max_queued_requests = args.max_queued_requests.value_or(-1);
    sc.max_prefill_tokens = args.max_prefill_tokens;
    sc.chunked_prefill_size = chunked;
    sc.prefill_max_requests = args.prefill_max_requests.value_or(-1);
    sc.context_len = rank->context_len;
    sc.schedule_policy = parse_policy(args.schedule_policy);
    sc.schedule_low_priority_values_first = args.schedule_low_priority_values_first;
    sc.enable_priority_scheduling = args.enable_priority_scheduling;
    sc.enable_priority_preemption = args.enable_priority_scheduling && !args.disable_priority_preemption;
    sc.priority_preemption_threshold = args.priority_scheduling_preemption_threshold;
    sc.retract_by_priority = args.retraction_policy == "priority";
    sc.disable_radix_cache = args.disable_radix_cache;
    sc.prefill_decode_interval = args.prefill_decode_interval;
    TSR_ASSIGN_OR_RETURN(sc.radix_eviction_policy, kvcache::parse_eviction_policy(args.radix_eviction_policy));
    sc.max_cached_tokens = args.max_cached_tokens.value_or(
        scheduler::default_max_cached_tokens(capacity, request.kv_bytes_per_token));
    sc.new_token_ratio.schedule_conservativeness = args.schedule_conservativeness;
    sc.decode_log_interval = args.decode_log_interval;
    sc.log_request_time_stats = args.enable_request_time_stats_logging;
    sc.strip_thinking_cache = args.strip_thinking_cache;
    sc.enable_streaming_session = args.enable_streaming_session;
    sc.enable_session_radix_cache = args.enable_session_radix_cache;
    if (args.enable_return_routed_experts)
        sc.routed_experts_width = m.config().num_hidden_layers * m.config().moe.num_experts_per_tok;
    // A step's logits of scored prompt positions stay within 256 MiB: 441 rows of Qwen3's
    // 151936-token vocabulary. An 8192-token chunk would otherwise ask for 5 GiB.
    constexpr std::int64_t kScoredLogitsBytes = std::int64_t{256} << 20;
    const std::int64_t rows = kScoredLogitsBytes / (4 * std::max<std::int64_t>(m.config().vocab_size, 1));
    sc.max_scored_rows_per_step = std::max(sc.page_size, rows / sc.page_size * sc.page_size);
    // scheduler.py init_chunked_prefill: is_mixed_chunk needs chunked prefill.
    sc.enable_mixed_chunk = args.enable_mixed_chunk && chunked > 0;
    if (args.enable_mixed_chunk && chunked <= 0)
        TSR_LOG(WARN, "--enable-mixed-chunk has no effect without chunked prefill (--chunked-prefill-size -1)");
    sc.random_seed = static_cast<std::uint64_t>(args.random_seed.value_or(static_cast<std::int64_t>(time(nullptr))));
    if (args.pp_size > 1) {
        // Reference §6.3: pp_size + async depth micro-batches in flight, each of at most
        // max(max_running_requests / pp_size, 1) requests unless given.
        sc.max_in_flight_steps = args.pp_size + args.pp_async_batch_depth;
        sc.max_micro_batch_size = args.pp_max_micro_batch_size.value_or(
            std::max<std::int64_t>(plan.max_running_requests / args.pp_size, 1));
    } else if (args.enable_dynamic_chunking) {
        TSR_LOG(WARN, "--enable-dynamic-chunking only applies with --pp-size > 1; using fixed chunks");
    }
    // SGLang's default loop (scheduler.py event_loop_overlap); PP turned it off in the args.
    sc.overlap_schedule = !args.disable_overlap_schedule;
    if (args.enable_prefill_delayer) {
        sc.prefill_delayer = scheduler::PrefillDelayerConfig{
            .max_delay_passes = args.prefill_delayer_max_delay_passes,
            .token_usage_low_watermark = args.prefill_delayer_token_usage_low_watermark,
            .queue_min_ratio = args.prefill_delayer_queue_min_ratio,
            .max_delay_ms = args.prefill_delayer_max_delay_ms.value_or(5000.0),
            .dp_attention = args.enable_dp_attention,
            .dp_size = args.dp_size,
            .forward_passes_buckets = args.prefill_delayer_forward_passes_buckets,
            .wait_seconds_buckets = args.prefill_delayer_wait_seconds_buckets};
    }
    TSR_RETURN_IF_ERROR(sc.validate());
    report_stage(rt, "running");
    return rank;
}

Status run_follower(ModelRank& rank) {
    RankRuntime& rt = rank.runtime;
    const kvcache::KvView kv = rank.kv_pool->view();
    const layers::DpAttentionParallel dpa = rt.dp_attention(false);
    std::optional<executor::StageLinks> stages;
    if (rt.pp_group)
        stages = executor::StageLinks{rt.pp_group.get(), rt.tp_group.get(), rank.trace.get(),
                                      rank.scheduler.max_in_flight_steps, dpa.enabled(), dpa.tp_size};
    Status s = dpa.enabled() && rt.coords.pp_rank == 0
                   ? executor::follow_dp_attention_leader(*rank.model, kv, rank.threads.get(), dpa, stages)
               : stages ? executor::run_pipeline_worker(*rank.model, kv, rank.threads.get(), *stages)
                        : executor::follow_leader(*rank.model, kv, rank.threads.get(), *rt.tp_group);
    if (rank.trace && rt.store) {
        const std::string events = rank.trace->events_json();
        Status put = rt.store->set(trace_key(rt.coords.global_rank), {events.begin(), events.end()});
        if (!put.ok()) TSR_LOG(WARN, "handing the pipeline trace to rank 0: {}", put.message());
    }
    return s;
}

// ---- leader --------------------------------------------------------------------------------

struct LeaderRunner::Parts {
    std::unique_ptr<executor::ModelRunner> local;
    std::unique_ptr<executor::TpLeaderRunner> tp;
    std::unique_ptr<executor::PpFirstStageRunner> pp;
    std::unique_ptr<executor::DpAttentionLeaderRunner> dp_attention;
    std::unique_ptr<executor::OverlapRunner> overlap;  // last: stopped before what it drives
};

namespace {

// Reference §7, measured the cheap way: one request of 1.25 C random tokens prefilled on
// stage 0 alone in 16 chunks gives the cumulative runtime T(l) at 16 prefix lengths (SGLang
// times 128 fresh prefills of up to 1.25 C tokens, ~80 C tokens of work: minutes on a CPU).
// `run_local` runs one batch on stage 0 alone (PpFirstStageRunner or DpAttentionLeaderRunner
// run_local).
std::optional<scheduler::ChunkSizePredictor> profile_dynamic_chunking(
    const std::function<Status(const executor::ForwardBatch&)>& run_local, const ModelRank& rank) {
    const scheduler::SchedulerConfig& sc = rank.scheduler;
    const auto give_up = [](const std::string& why) {
        TSR_LOG(WARN, "[PP Dynamic Chunk] Failed to profile prefill latency: {} Dynamic chunking will be disabled.", why);
        return std::nullopt;
    };
    const std::int64_t C = sc.chunked_prefill_size;
    if (C <= 0) return give_up("--chunked-prefill-size is off.");
    auto smooth = scheduler::parse_dynamic_chunking_smooth_factor(env().dynamic_chunking_smooth_factor);
    if (!smooth.ok()) return give_up(smooth.status().message() + ".");
    const std::int64_t total = std::min<std::int64_t>(C + C / 4, sc.max_total_num_tokens);
    constexpr int kPieces = 16;
    const std::int64_t piece = std::max<std::int64_t>(1, total / kPieces);
    const std::int64_t vocab = std::min<std::int64_t>(10000, rank.model->config().vocab_size);
    std::mt19937 rng(0);
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
    std::vector<std::int32_t> slots(static_cast<std::size_t>(total));
    for (std::int64_t i = 0; i < total; ++i) slots[i] = static_cast<std::int32_t>(sc.page_size + i);  // slot 0 pads

    const auto chunk = [&](std::int64_t start, std::int64_t n) {
        executor::ForwardBatch b;
        executor::ForwardSequence seq;
        seq.rid = "dynamic-chunking-profile";
        for (std::int64_t i = 0; i < n; ++i) seq.tokens.push_back(token(rng));
        seq.start_pos = start;
        seq.slots.assign(slots.begin(), slots.begin() + start + n);
        b.seqs.push_back(std::move(seq));
        return b;
    };
    if (Status s = run_local(chunk(0, std::min<std::int64_t>(piece, 64))); !s.ok()) return give_up(s.message());
    std::vector<scheduler::PrefillSample> samples;
    double cumulative_ms = 0.0;
    for (std::int64_t pos = 0; pos < total; pos += piece) {
        const std::int64_t n = std::min(piece, total - pos);
        const executor::ForwardBatch b = chunk(pos, n);
        const auto t0 = std::chrono::steady_clock::now();
        if (Status s = run_local(b); !s.ok()) return give_up(s.message());
        cumulative_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        samples.push_back({pos + n, cumulative_ms});
    }
    auto fit = scheduler::fit_prefill_cost(samples);
    if (!fit.ok()) return give_up(fit.status().message());
    if (!fit->warning.empty()) TSR_LOG(WARN, "[PP Dynamic Chunk] {}", fit->warning);
    scheduler::ChunkSizePredictorConfig pc;
    pc.initial_chunk_size = C;
    pc.smooth_factor = *smooth;
    pc.page_size = static_cast<int>(sc.page_size);
    pc.context_len = sc.context_len;
    pc.max_prefill_tokens = sc.max_prefill_tokens;
    auto predictor = scheduler::ChunkSizePredictor::create(*fit, pc);
    if (!predictor.ok()) return give_up(predictor.status().message());
    std::string preview;
    std::int64_t history = 0;
    for (int i = 0; i < 6; ++i) {
        const std::int64_t next = predictor->next_chunk(history).value_or(C);
        preview += (preview.empty() ? "" : ", ") + std::to_string(next);
        history += next;
    }
    TSR_LOG(INFO,
            "[PP Dynamic Chunk] T(l) = {:.4g} l^2 + {:.4g} l + {:.4g} ms from {} samples up to {} tokens; "
            "smooth factor {}; chunks of a long prompt: {}, ...",
            fit->a, fit->b, fit->c, samples.size(), total, *smooth, preview);
    return std::move(predictor).value();
}

}  // namespace

LeaderRunner::LeaderRunner(ModelRank& rank, std::string trace_path)
    : rank_(rank), trace_path_(std::move(trace_path)), parts_(std::make_unique<Parts>()) {}

LeaderRunner::~LeaderRunner() {
    Status s = stop();
    if (!s.ok()) TSR_LOG(WARN, "{}", s.message());
}

StatusOr<std::unique_ptr<LeaderRunner>> LeaderRunner::create(ModelRank& rank, const server::ServerArgs& args) {
    std::unique_ptr<LeaderRunner> lr(new LeaderRunner(rank, args.pipeline_trace_path));
    RankRuntime& rt = rank.runtime;
    const kvcache::KvView kv = rank.kv_pool->view();
    Parts& p = *lr->parts_;
    if (const layers::DpAttentionParallel dpa = rt.dp_attention(false); dpa.enabled()) {
        std::optional<executor::StageLinks> stages;
        if (rt.pp_group)
            stages = executor::StageLinks{rt.pp_group.get(), rt.tp_group.get(), rank.trace.get(),
                                          rank.scheduler.max_in_flight_steps, true, dpa.tp_size};
        p.dp_attention =
            std::make_unique<executor::DpAttentionLeaderRunner>(*rank.model, kv, rank.threads.get(), dpa, stages);
        if (rt.attn_dp_group) p.dp_attention->enable_prefill_agreement(*rt.attn_dp_group);
        lr->runner_ = p.dp_attention.get();
        // Every group's leader profiles stage 0 at once with the same batches (their collectives
        // span all groups); each fits the same curve.
        if (rt.pp_group && args.enable_dynamic_chunking) {
            executor::DpAttentionLeaderRunner& runner = *p.dp_attention;
            rank.scheduler.dynamic_chunking =
                profile_dynamic_chunking([&runner](const executor::ForwardBatch& b) { return runner.run_local(b); }, rank);
        }
    } else if (rt.pp_group) {
        p.pp = std::make_unique<executor::PpFirstStageRunner>(
            *rank.model, kv, rank.threads.get(),
            executor::StageLinks{rt.pp_group.get(), rt.tp_group.get(), rank.trace.get(),
                                 rank.scheduler.max_in_flight_steps});
        lr->runner_ = p.pp.get();
        if (args.enable_dynamic_chunking) {
            executor::PpFirstStageRunner& runner = *p.pp;
            rank.scheduler.dynamic_chunking =
                profile_dynamic_chunking([&runner](const executor::ForwardBatch& b) { return runner.run_local(b); }, rank);
        }
    } else {
        p.local = std::make_unique<executor::ModelRunner>(*rank.model, kv, rank.threads.get());
        lr->runner_ = p.local.get();
        if (rt.tp_group) {
            p.tp = std::make_unique<executor::TpLeaderRunner>(*p.local, *rt.tp_group);
            lr->runner_ = p.tp.get();
        }
    }
    if (rank.scheduler.overlap_schedule) {
        p.overlap = std::make_unique<executor::OverlapRunner>(*lr->runner_);
        lr->runner_ = p.overlap.get();
        TSR_LOG(INFO, "overlap scheduling: steps run on their own thread while the scheduler prepares the next "
                      "(--disable-overlap-schedule turns it off)");
    }
    return lr;
}

Status LeaderRunner::stop() {
    if (stopped_) return Status::Ok();
    stopped_ = true;
    Status s = Status::Ok();
    // Steps launched and never collected (a failed request path) finish before what runs them stops.
    if (parts_->overlap) parts_->overlap->wait_idle();
    if (parts_->pp) s = parts_->pp->stop();
    if (parts_->dp_attention) s = parts_->dp_attention->stop();
    if (parts_->tp) s = parts_->tp->stop_followers();
    if (trace_path_.empty() || !rank_.trace) return s;
    std::vector<std::string> events = {rank_.trace->events_json()};
    for (int r = 1; r < rank_.runtime.layout.world_size(); ++r) {
        auto bytes = rank_.runtime.store->get(trace_key(r), std::chrono::seconds(60));
        if (!bytes.ok()) {
            TSR_LOG(WARN, "pipeline trace of rank {} missing: {}", r, bytes.status().message());
            continue;
        }
        events.emplace_back(bytes->begin(), bytes->end());
    }
    std::ofstream out(trace_path_, std::ios::trunc);
    out << executor::merge_trace_events(events);
    if (!out) return Status::Internal(trace_path_ + ": cannot write the pipeline trace");
    TSR_LOG(INFO, "pipeline trace of {} ranks written to {} (open in ui.perfetto.dev or chrome://tracing)",
            events.size(), trace_path_);
    return s;
}

void log_startup_line(const ModelRank& rank) {
    const scheduler::SchedulerConfig& sc = rank.scheduler;
    TSR_LOG(INFO,
            "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, "
            "context_len={}, available_gpu_mem={:.2f} GB",
            sc.max_total_num_tokens, sc.chunked_prefill_size, sc.max_prefill_tokens, sc.max_running_requests,
            rank.context_len, rank.available_gb);
    if (!sc.disable_radix_cache) {
        const std::int64_t kept = sc.max_cached_tokens < 0 ? sc.max_total_num_tokens
                                                           : std::min(sc.max_cached_tokens, sc.max_total_num_tokens);
        TSR_LOG(INFO, "prefix cache keeps at most {} unused tokens ({:.2f} GB of KV; --max-cached-tokens)", kept,
                static_cast<double>(kept * rank.model->kv_cache_shape().bytes_per_token()) / 1e9);
    }
}

}  // namespace tessera::app
