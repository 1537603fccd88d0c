// The flag table: every flag of ServerArgs with SGLang's names, aliases, defaults and
// choices, registered on a CLI11 (sub)command so that it also drives --help. Each flag says
// whether tessera implements it yet; a flag that is accepted for compatibility but not
// implemented fails loudly at start-up when the user sets it (FlagTable::check_unimplemented).

#include <CLI/CLI.hpp>

#include "server/server_args.h"

namespace tessera::server {

namespace {

enum class Support {
    kYes,        // implemented
    kServeOnly,  // implemented by `serve`; `generate` does not schedule yet, so it rejects it
    kNotYet,     // accepted for SGLang compatibility; setting it is an error until implemented
};

}  // namespace

struct FlagTable::Impl {
    bool serve = true;
    std::vector<std::pair<CLI::Option*, std::string>> not_yet;  // option, its first name

    void track(CLI::Option* option, Support support) {
        if (support == Support::kNotYet || (support == Support::kServeOnly && !serve))
            not_yet.emplace_back(option, option->get_name());
    }
    Support effective(Support support) const {
        return support == Support::kServeOnly ? (serve ? Support::kYes : Support::kNotYet) : support;
    }
};

namespace {

std::string help_text(const std::string& help, Support support, const FlagTable::Impl& impl) {
    return impl.effective(support) == Support::kNotYet ? help + " [not implemented yet: setting it is an error]" : help;
}

// --name value (with CLI11 check `check` when given).
template <typename T>
CLI::Option* value(CLI::App& app, FlagTable::Impl& impl, const std::string& names, T& field,
                   const std::string& help, Support support) {
    CLI::Option* o = app.add_option(names, field, help_text(help, support, impl))->capture_default_str();
    // As SGLang's argparse: a flag given twice takes the later value, so a wrapper script's
    // default (e.g. --port in scripts/run.sh) can be overridden by its caller.
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    impl.track(o, support);
    return o;
}

// --name value into an optional (unset = SGLang's None).
template <typename T>
CLI::Option* optional(CLI::App& app, FlagTable::Impl& impl, const std::string& names, std::optional<T>& field,
                      const std::string& help, Support support) {
    CLI::Option* o = app.add_option_function<T>(names, [&field](const T& v) { field = v; },
                                                 help_text(help + " [default: auto]", support, impl));
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    impl.track(o, support);
    return o;
}

CLI::Option* flag(CLI::App& app, FlagTable::Impl& impl, const std::string& names, bool& field,
                  const std::string& help, Support support) {
    CLI::Option* o = app.add_flag(names, field, help_text(help, support, impl));
    impl.track(o, support);
    return o;
}

constexpr Support kYes = Support::kYes;
constexpr Support kNotYet = Support::kNotYet;
constexpr Support kServe = Support::kServeOnly;

}  // namespace

FlagTable::FlagTable(CLI::App& app, ServerArgs& a, Mode mode) : impl_(new Impl) {
    Impl& t = *impl_;
    t.serve = mode == Mode::kServe;
    // Model and process.
    value(app, t, "--model-path,--model", a.model_path, "Hugging Face model folder", kYes)->required();
    value(app, t, "--tokenizer-path", a.tokenizer_path, "tokenizer folder (default: --model-path)", kYes);
    value(app, t, "--served-model-name", a.served_model_name, "model name in the API (default: the model folder's name)", kServe);
    value(app, t, "--dtype", a.dtype, "compute weight type", kYes)
        ->check(CLI::IsMember({"auto", "half", "float16", "bfloat16", "bf16", "float", "float32", "f32"}));
    value(app, t, "--host", a.host, "HTTP listen address", kServe);
    value(app, t, "--port", a.port, "HTTP port", kServe);
    value(app, t, "--api-key", a.api_key,
          "require `Authorization: Bearer KEY` on every route but /health (default: env TESSERA_API_KEY)", kServe);
    value(app, t, "--admin-api-key", a.admin_api_key, "key for routes that change state (/flush_cache)", kServe);
    value(app, t, "--allowed-hosts", a.allowed_hosts,
          "comma-separated Host header names accepted besides the bound address", kServe);
    optional(app, t, "--random-seed", a.random_seed, "server-wide random seed", kYes);
    optional(app, t, "--context-length", a.context_length, "override the model's context length", kYes);
    value(app, t, "--threads-per-rank,--threads", a.threads_per_rank,
          "compute threads per rank (0: the host's cores / its ranks)", kYes)
        ->check(CLI::Range(0, 1024));
    flag(app, t, "--log-all-ranks", a.log_all_ranks, "INFO logs from every rank, not only rank 0", kYes);

    // Topology (reference §1.1).
    value(app, t, "--tp-size,--tp,--tensor-parallel-size", a.tp_size, "tensor parallel size", kYes);
    value(app, t, "--pp-size,--pipeline-parallel-size", a.pp_size, "pipeline parallel size", kYes);
    value(app, t, "--dp-size,--data-parallel-size", a.dp_size,
          "data parallel size (replicas; attention DP groups with --enable-dp-attention)", kNotYet);
    value(app, t, "--ep-size,--expert-parallel-size,--ep", a.ep_size, "expert parallel size inside the TP group",
          kYes);
    value(app, t, "--moe-dp-size,--moe-data-parallel-size", a.moe_dp_size, "MoE data parallel size", kNotYet);
    value(app, t, "--attn-cp-size,--attention-context-parallel-size", a.attn_cp_size,
          "attention context parallel size", kNotYet);
    value(app, t, "--dcp-size,--decode-context-parallel-size", a.dcp_size, "decode context parallel size", kNotYet);
    flag(app, t, "--enable-dp-attention", a.enable_dp_attention,
         "data parallelism for attention and tensor parallelism for FFN", kNotYet);
    flag(app, t, "--enable-dp-lm-head", a.enable_dp_lm_head, "vocab-parallel LM head across the attention-TP group",
         kNotYet);
    optional(app, t, "--moe-dense-tp-size", a.moe_dense_tp_size, "TP width of dense MLPs in MoE models", kNotYet);
    value(app, t, "--nnodes", a.nnodes, "number of nodes", kYes);
    value(app, t, "--node-rank", a.node_rank, "this node's rank", kYes);
    value(app, t, "--dist-init-addr,--nccl-init-addr", a.dist_init_addr, "HOST:PORT of the rendezvous (node 0)",
          kYes);
    optional(app, t, "--nccl-port", a.nccl_port, "port of the collective backend", kNotYet);
    optional(app, t, "--dist-timeout", a.dist_timeout, "collective timeout in seconds", kYes);
    value(app, t, "--base-gpu-id", a.base_gpu_id, "first device id", kNotYet);
    value(app, t, "--gpu-id-step", a.gpu_id_step, "device id step", kNotYet);
    value(app, t, "--load-balance-method", a.load_balance_method, "DP request routing", kNotYet)
        ->check(CLI::IsMember({"auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens"}));
    flag(app, t, "--enable-p2p-check", a.enable_p2p_check, "check GPU peer access (no meaning on CPU)", kNotYet);
    optional(app, t, "--pp-max-micro-batch-size", a.pp_max_micro_batch_size, "requests per PP micro-batch", kYes);
    value(app, t, "--pp-async-batch-depth", a.pp_async_batch_depth, "extra in-flight PP micro-batches", kYes);
    value(app, t, "--enable-pipeline-trace", a.pipeline_trace_path,
          "write a Chrome-trace / Perfetto timeline of every rank's compute, send, recv and idle spans to FILE",
          kYes);

    // Memory and scheduling (§1.2).
    optional(app, t, "--mem-fraction-static", a.mem_fraction_static, "(weights + KV pool) / rank memory", kYes);
    optional(app, t, "--max-running-requests", a.max_running_requests, "cap on running requests", kYes);
    optional(app, t, "--max-queued-requests", a.max_queued_requests, "cap on queued requests", kServe);
    optional(app, t, "--max-total-tokens", a.max_total_tokens, "cap on the KV pool size in tokens", kYes);
    optional(app, t, "--chunked-prefill-size", a.chunked_prefill_size, "max tokens per prefill chunk; -1 disables",
             kYes);
    flag(app, t, "--enable-dynamic-chunking", a.enable_dynamic_chunking, "dynamic chunk sizes under PP", kYes);
    value(app, t, "--max-prefill-tokens", a.max_prefill_tokens, "max tokens in one prefill batch", kYes);
    optional(app, t, "--prefill-max-requests", a.prefill_max_requests, "max requests in one prefill batch", kYes);
    value(app, t, "--prefill-decode-interval", a.prefill_decode_interval, "decode rounds between prefills", kNotYet);
    value(app, t, "--schedule-policy", a.schedule_policy, "waiting-queue order", kYes)
        ->check(CLI::IsMember({"lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"}));
    flag(app, t, "--enable-priority-scheduling", a.enable_priority_scheduling, "schedule by request priority", kNotYet);
    value(app, t, "--priority-scheduling-preemption-threshold", a.priority_scheduling_preemption_threshold,
          "min priority gap to preempt", kNotYet);
    value(app, t, "--retraction-policy", a.retraction_policy, "which requests to retract when KV is full", kNotYet)
        ->check(CLI::IsMember({"length", "priority"}));
    value(app, t, "--schedule-conservativeness", a.schedule_conservativeness, "admission conservativeness", kYes);
    optional(app, t, "--page-size", a.page_size, "tokens per KV page (default 1)", kYes);
    flag(app, t, "--disable-radix-cache", a.disable_radix_cache, "no prefix reuse", kYes);
    optional(app, t, "--max-cached-tokens", a.max_cached_tokens,
             "tessera: tokens the prefix cache keeps once no request uses them (least recently used go first); "
             "default an eighth of the rank's memory, -1 = no cap (SGLang)", kServe);
    value(app, t, "--radix-eviction-policy", a.radix_eviction_policy, "prefix cache eviction", kNotYet)
        ->check(CLI::IsMember({"lru", "lfu", "slru", "priority"}));
    flag(app, t, "--disable-overlap-schedule", a.disable_overlap_schedule, "no CPU/compute overlap", kNotYet);
    value(app, t, "--num-continuous-decode-steps", a.num_continuous_decode_steps, "decode steps per schedule",
          kNotYet);
    value(app, t, "--scheduler-recv-interval", a.scheduler_recv_interval, "steps between request polls", kNotYet);
    flag(app, t, "--enable-mixed-chunk", a.enable_mixed_chunk, "mix a prefill chunk into the decode batch", kNotYet);
    value(app, t, "--decode-log-interval", a.decode_log_interval, "decode steps between log lines", kYes);
    value(app, t, "--stream-interval", a.stream_interval, "tokens between stream chunks", kNotYet);
    flag(app, t, "--enable-metrics", a.enable_metrics, "Prometheus metrics", kServe);
    value(app, t, "--kv-cache-dtype", a.kv_cache_dtype,
          "KV cache element type: auto (the model's dtype), bf16, fp8_e4m3 or fp8_e5m2 (one byte per value: twice "
          "the tokens; scale 1, values clamped to the format's range)",
          kYes)
        ->check(CLI::IsMember({"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                               "fp4_mx_block16", "fp4_e2m1"}));
    value(app, t, "--quantization", a.quantization,
          "weight quantization: fp8 quantizes an unquantized checkpoint's linear weights to e4m3 in 128 x 128 "
          "blocks at load (FP8 checkpoints are detected from config.json without it)",
          kYes);

    // MoE / EP / EPLB (§1.3).
    value(app, t, "--moe-a2a-backend", a.moe_a2a_backend,
          "MoE dispatch/combine backend: none (masked EP + all-reduce) or all_to_all (tokens sent to their "
          "experts' ranks); SGLang's GPU backends are refused",
          kYes)
        ->check(CLI::IsMember({"none", "all_to_all", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep",
                               "flashinfer", "megamoe", "deepep_v2", "pplx", "ascend_tp"}));
    value(app, t, "--moe-runner-backend", a.moe_runner_backend,
          "MoE expert kernel backend (auto: grouped GEMMs per expert on CPU)", kYes);
    value(app, t, "--deepep-mode", a.deepep_mode, "DeepEP mode", kNotYet)
        ->check(CLI::IsMember({"auto", "normal", "low_latency"}));
    value(app, t, "--ep-num-redundant-experts", a.ep_num_redundant_experts, "extra physical expert slots (copies of hot experts); physical experts must divide by --ep-size", kYes);
    value(app, t, "--ep-dispatch-algorithm", a.ep_dispatch_algorithm, "which copy serves a token: static (per-rank table), dynamic (hashed per token), fake (uniform random router for load tests)", kYes)
        ->check(CLI::IsMember({"static", "dynamic", "fake", "lp"}));
    value(app, t, "--init-expert-location", a.init_expert_location, "initial expert placement: trivial, a .json file or inline JSON with a physical_to_logical_map or a logical_count (a recorder dump)", kYes);
    flag(app, t, "--enable-eplb", a.enable_eplb, "rebalance expert placement while serving, from the recorded load", kYes);
    value(app, t, "--eplb-algorithm", a.eplb_algorithm, "EPLB algorithm", kYes)
        ->check(CLI::IsMember({"auto", "deepseek", "deepseek_hierarchical", "deepseek_vec",
                               "deepseek_vec_hierarchical", "elasticity_aware"}));
    value(app, t, "--eplb-rebalance-num-iterations", a.eplb_rebalance_num_iterations,
          "forward passes between rebalances", kYes);
    optional(app, t, "--eplb-rebalance-layers-per-chunk", a.eplb_rebalance_layers_per_chunk,
             "layers updated per pass during a rebalance", kYes);
    value(app, t, "--eplb-min-rebalancing-utilization-threshold", a.eplb_min_rebalancing_utilization_threshold,
          "skip a rebalance when the window's balancedness is above this (1.0: never skip)", kYes);
    value(app, t, "--expert-distribution-recorder-mode", a.expert_distribution_recorder_mode,
          "expert load recording: stat, stat_approx, per_pass, per_token", kYes)
        ->check(CLI::IsMember({"stat", "stat_approx", "per_pass", "per_token"}));
    optional(app, t, "--expert-distribution-recorder-buffer-size", a.expert_distribution_recorder_buffer_size,
             "recorder window in forward passes (-1: unbounded; default --eplb-rebalance-num-iterations)", kYes);
    value(app, t, "--expert-balancedness-report-mode", a.expert_balancedness_report_mode, "balancedness reporting: off, server_log, prometheus (/metrics), both", kYes)
        ->check(CLI::IsMember({"off", "server_log", "prometheus", "both"}));
    flag(app, t, "--enable-two-batch-overlap", a.enable_two_batch_overlap, "two-batch overlap", kNotYet);
    flag(app, t, "--enable-single-batch-overlap", a.enable_single_batch_overlap, "single-batch overlap", kNotYet);
    flag(app, t, "--disable-shared-experts-fusion", a.disable_shared_experts_fusion, "keep shared experts apart",
         kNotYet);
    flag(app, t, "--enforce-shared-experts-fusion", a.enforce_shared_experts_fusion, "fuse shared experts", kNotYet);
}

FlagTable::~FlagTable() { delete impl_; }

Status FlagTable::check_unimplemented() const {
    for (const auto& [option, name] : impl_->not_yet) {
        if (option->count() > 0) {
            return Status::Unimplemented(name + " is accepted for SGLang compatibility but tessera does not implement "
                                         "it yet; remove it from the command line");
        }
    }
    return Status::Ok();
}

}  // namespace tessera::server
