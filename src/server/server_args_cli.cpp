// The flag table: every flag of ServerArgs with SGLang's names, aliases, defaults and
// choices, registered on a CLI11 (sub)command so that it also drives --help; then every other
// flag of SGLang's launch_server (sglang_flags.tsv), so that a pasted SGLang command is read
// whole. After ServerArgs::resolve() (SGLang's rewrites and validation, so its messages come
// first), FlagTable::check_supported() refuses values that ask for what tessera lacks.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <sstream>

#include "base/check.h"
#include "server/command_line.h"
#include "server/config_file.h"
#include "server/server_args.h"
#include "server/sglang_flags.h"

namespace tessera::server {

namespace {

enum class Support {
    kYes,        // implemented
    kServeOnly,  // implemented by `serve`; `generate` does not schedule yet, so it needs the default there
    kNotYet,     // accepted for SGLang compatibility; a value other than the default is refused until implemented
    kGpuOnly,    // validated as SGLang does, then ignored: it tunes GPU machinery
};

}  // namespace

struct FlagTable::Impl {
    struct NotYet {
        CLI::Option* option;
        std::function<bool()> asks_nothing;  // the value (after resolve) is what tessera does anyway
        std::function<std::string()> value;
        std::string neutral;  // what would work
        std::string help;
        bool serve_only;  // `serve` implements it
    };
    // A flag of SGLang's catalogue that tessera does not implement, with what the user gave.
    struct Foreign {
        const SglangFlag* flag;
        CLI::Option* option = nullptr;
        CLI::Option* negated = nullptr;  // --no-x of an optional switch
        bool on = false;
        bool off = false;
        std::vector<std::string> values;
    };

    bool serve = true;
    CLI::App* app = nullptr;
    std::vector<NotYet> not_yet;
    std::vector<CLI::Option*> gpu_only;
    std::deque<Foreign> foreign;  // stable addresses: CLI11 writes into them

    bool refused_here(Support support) const {
        return support == Support::kNotYet || (support == Support::kServeOnly && !serve);
    }
};

void register_sglang_flags(CLI::App& app, FlagTable::Impl& t);

namespace {

std::string help_text(const std::string& help, Support support, const FlagTable::Impl& impl) {
    return impl.refused_here(support) ? help + " [not implemented yet: only the default is accepted]" : help;
}

template <typename T>
std::string show(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) return v;
    else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>>) {
        std::ostringstream joined;
        for (std::size_t i = 0; i < v.size(); ++i) joined << (i ? " " : "") << v[i];
        return joined.str();
    }
    else {
        std::ostringstream out;
        out << v;
        return out.str();
    }
}

// Records a flag that is refused at a value other than its default (what it was registered with).
template <typename T>
void track(FlagTable::Impl& impl, CLI::Option* option, const T& field, Support support) {
    if (support == Support::kGpuOnly) impl.gpu_only.push_back(option);
    if (!impl.refused_here(support)) return;
    impl.not_yet.push_back({option, [&field, initial = field] { return field == initial; },
                            [&field] { return show(field); }, show(field), option->get_description(),
                            support == Support::kServeOnly});
}

template <typename T>
void track(FlagTable::Impl& impl, CLI::Option* option, const std::optional<T>& field, Support support) {
    if (!impl.refused_here(support)) return;
    impl.not_yet.push_back({option, [&field] { return !field.has_value(); },
                            [&field] { return field ? show(*field) : std::string("None"); }, "", option->get_description(),
                            support == Support::kServeOnly});
}

// --name value (with CLI11 check `check` when given).
template <typename T>
CLI::Option* value(CLI::App& app, FlagTable::Impl& impl, const std::string& names, T& field,
                   const std::string& help, Support support) {
    CLI::Option* o = app.add_option(names, field, help_text(help, support, impl))->capture_default_str();
    // As SGLang's argparse: a flag given twice takes the later value, so a wrapper script's
    // default (e.g. --port in scripts/run.sh) can be overridden by its caller.
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    track(impl, o, field, support);
    return o;
}

// --name v1 v2 ... (argparse nargs="+"): every value given, in order.
template <typename T>
CLI::Option* list(CLI::App& app, FlagTable::Impl& impl, const std::string& names, std::vector<T>& field,
                  const std::string& help, Support support) {
    return value(app, impl, names, field, help, support)
        ->expected(1, CLI::detail::expected_max_vector_size)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// --name value into an optional (unset = SGLang's None).
template <typename T>
CLI::Option* optional(CLI::App& app, FlagTable::Impl& impl, const std::string& names, std::optional<T>& field,
                      const std::string& help, Support support) {
    CLI::Option* o = app.add_option_function<T>(names, [&field](const T& v) { field = v; },
                                                 help_text(help + " [default: auto]", support, impl));
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    track(impl, o, field, support);
    return o;
}

CLI::Option* flag(CLI::App& app, FlagTable::Impl& impl, const std::string& names, bool& field,
                  const std::string& help, Support support) {
    CLI::Option* o = app.add_flag(names, field, help_text(help, support, impl));
    track(impl, o, field, support);
    return o;
}

// SGLang's human_readable_int (utils/common.py): SI suffixes k, M, G, T (decimals allowed:
// 25.6k = 25600) and IEC suffixes Ki, Mi, Gi, Ti (integers only); case-sensitive.
CLI::Validator human_readable_int() {
    return CLI::Validator(
        [](std::string& v) -> std::string {
            static const std::pair<const char*, double> kSuffixes[] = {
                {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
                {"k", 1e3},     {"M", 1e6},        {"G", 1e9},           {"T", 1e12}};
            for (const auto& [suffix, multiplier] : kSuffixes) {
                const std::size_t n = std::strlen(suffix);
                if (v.size() <= n || v.compare(v.size() - n, n, suffix) != 0) continue;
                const std::string number = v.substr(0, v.size() - n);
                const bool digits = std::all_of(number.begin(), number.end(), [](char c) { return std::isdigit(c) || c == '.'; });
                const auto dot = number.find('.');
                if (!digits || number.front() == '.' || number.back() == '.' ||
                    (dot != std::string::npos && number.find('.', dot + 1) != std::string::npos))
                    break;
                if (dot != std::string::npos && n == 2)
                    return "Decimals are not allowed with IEC suffixes like '" + std::string(suffix) +
                           "'. Use an integer IEC value such as '1" + suffix + "', or an SI value such as '1.5" +
                           std::string(1, suffix[0] == 'K' ? 'k' : suffix[0]) + "'.";
                // Exact for the integers this can reach: the product of a decimal and a power of ten or two.
                v = std::to_string(static_cast<long long>(std::stod(number) * multiplier + (dot == std::string::npos ? 0.0 : 1e-6)));
                return "";
            }
            return "";
        },
        "INT[k|M|G|T|Ki|Mi|Gi|Ti]");
}

CLI::Validator sglang_value_check(const SglangFlag& flag);  // below, beside the catalogue's flags

// SGLang's argparse check of catalogue flag `name` (its type and choices), for a flag this
// table registers itself.
CLI::Validator catalogue_check(const std::string& name) {
    for (const SglangFlag& flag : sglang_flags())
        if (flag.names.front() == name) return sglang_value_check(flag);
    TSR_CHECK(false) << name << " is not in sglang_flags.tsv";
    return {};
}

constexpr Support kYes = Support::kYes;
constexpr Support kNotYet = Support::kNotYet;
constexpr Support kServe = Support::kServeOnly;
constexpr Support kGpu = Support::kGpuOnly;

}  // namespace

FlagTable::FlagTable(CLI::App& app, ServerArgs& a, Mode mode) : impl_(new Impl), args_(a) {
    Impl& t = *impl_;
    t.serve = mode == Mode::kServe;
    // Model and process.
    value(app, t, "--model-path,--model", a.model_path, "Hugging Face model folder", kYes)->required();
    value(app, t, "--load-format", a.load_format,
          "auto or safetensors: the folder's safetensors; dummy: random weights from config.json alone (SGLang's "
          "\"mainly for profiling\": no checkpoint is read, the output is meaningless)",
          kYes)
        ->check(CLI::IsMember({"auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf",
                               "expert_pack", "bitsandbytes", "mistral", "layered", "flash_rl", "remote",
                               "remote_instance", "fastsafetensors", "private", "runai_streamer"}));
    value(app, t, "--tokenizer-path", a.tokenizer_path, "tokenizer folder (default: --model-path)", kYes);
    // argparse nargs="?": the flag alone asks SGLang to fetch the digests from the Hub.
    app.add_option_function<std::string>(
           "--model-checksum", [&a](const std::string& v) { a.model_checksum = v; },
           "check the model files against FILE, SGLang's JSON manifest of their SHA-256 digests and sizes, before "
           "loading (`tessera checksum --model-path DIR` writes one)")
        ->expected(0, 1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
    optional(app, t, "--context-length", a.context_length, "override the model's context length (1k = 1000, 1Ki = 1024)", kYes)
        ->transform(human_readable_int());
    value(app, t, "--threads-per-rank,--threads", a.threads_per_rank,
          "compute threads per rank (0: the host's cores / its ranks)", kYes)
        ->check(CLI::Range(0, 1024));
    flag(app, t, "--log-all-ranks", a.log_all_ranks, "INFO logs from every rank, not only rank 0", kYes);
    value(app, t, "--log-level", a.log_level, "debug, info, warning or error", kYes)
        ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error", "critical"}));

    // Topology (reference §1.1).
    value(app, t, "--tp-size,--tensor-parallel-size", a.tp_size, "tensor parallel size", kYes);
    value(app, t, "--pp-size,--pipeline-parallel-size", a.pp_size, "pipeline parallel size", kYes);
    value(app, t, "--dp-size,--data-parallel-size", a.dp_size,
          "data parallel size: replicas of the tp x pp world behind one HTTP front (attention DP groups with "
          "--enable-dp-attention)",
          kServe);
    // `generate` runs one request, so replicas would idle; attention-DP groups split the TP group.
    if (!t.serve) t.not_yet.back().asks_nothing = [&a] { return a.dp_size == 1 || a.enable_dp_attention; };
    value(app, t, "--ep-size,--expert-parallel-size,--ep", a.ep_size, "expert parallel size inside the TP group",
          kYes);
    value(app, t, "--moe-dp-size,--moe-data-parallel-size", a.moe_dp_size, "MoE data parallel size", kNotYet);
    value(app, t, "--attn-cp-size,--attention-context-parallel-size", a.attn_cp_size,
          "attention context parallel size", kNotYet);
    value(app, t, "--dcp-size,--decode-context-parallel-size", a.dcp_size, "decode context parallel size", kNotYet);
    flag(app, t, "--enable-dp-attention", a.enable_dp_attention,
         "data parallelism for attention and tensor parallelism for FFN: --dp-size attention groups inside the TP "
         "group, each with its own requests and KV cache",
         kYes);
    flag(app, t, "--enable-dp-lm-head", a.enable_dp_lm_head,
         "vocab-parallel LM head across the attention-TP group (no gather of logits rows across DP groups)", kYes);
    optional(app, t, "--moe-dense-tp-size", a.moe_dense_tp_size,
             "TP width of dense MLPs: 1 replicates them on every rank (no split, no DP-attention gather), or tp_size",
             kYes);
    value(app, t, "--nnodes", a.nnodes, "number of nodes", kYes);
    value(app, t, "--node-rank", a.node_rank, "this node's rank", kYes);
    value(app, t, "--dist-init-addr,--nccl-init-addr", a.dist_init_addr, "HOST:PORT of the rendezvous (node 0)",
          kYes);
    optional(app, t, "--dist-timeout", a.dist_timeout, "collective timeout in seconds", kYes);
    value(app, t, "--base-gpu-id", a.base_gpu_id, "first device id (no effect on CPU)", kGpu);
    value(app, t, "--gpu-id-step", a.gpu_id_step, "device id step (no effect on CPU)", kGpu);
    // shortest_queue and minimum_tokens: the names SGLang gave total_requests and total_tokens before.
    value(app, t, "--load-balance-method", a.load_balance_method,
          "how the front spreads requests over --dp-size replicas: round_robin (auto), total_requests (fewest in "
          "flight) or total_tokens (fewest prompt tokens in flight)",
          kServe)
        ->check(CLI::IsMember({"auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens",
                               "shortest_queue", "minimum_tokens"}));
    optional(app, t, "--pp-max-micro-batch-size", a.pp_max_micro_batch_size, "requests per PP micro-batch", kYes);
    value(app, t, "--pp-async-batch-depth", a.pp_async_batch_depth, "extra in-flight PP micro-batches", kYes);
    value(app, t, "--enable-pipeline-trace", a.pipeline_trace_path,
          "write a Chrome-trace / Perfetto timeline of every rank's compute, send, recv and idle spans to FILE",
          kYes);

    // Memory and scheduling (§1.2).
    optional(app, t, "--mem-fraction-static", a.mem_fraction_static, "(weights + KV pool) / rank memory", kYes);
    optional(app, t, "--max-running-requests", a.max_running_requests, "cap on running requests", kYes);
    optional(app, t, "--min-free-slots-delay", a.min_free_slots_delay,
             "while requests run, hold new prefills until this many running slots are free, so that they are "
             "admitted in one batch (capped by --max-running-requests; 1 or less: no wait)",
             kServe);
    flag(app, t, "--enable-prefill-delayer", a.enable_prefill_delayer,
         "under DP attention, hold a group's new prefill back while other groups have none to run (so all "
         "prefill in the same step), or while the fullest group has fewer free running slots than a prefill "
         "usually admits (needs overlap scheduling)",
         kServe);
    value(app, t, "--prefill-delayer-max-delay-passes", a.prefill_delayer_max_delay_passes,
          "most prefill passes a group waits for the others", kServe);
    optional(app, t, "--prefill-delayer-token-usage-low-watermark", a.prefill_delayer_token_usage_low_watermark,
             "no delay while some group with a request to admit uses less of its KV pool than this fraction",
             kServe);
    list(app, t, "--prefill-delayer-forward-passes-buckets", a.prefill_delayer_forward_passes_buckets,
         "bounds of /metrics' delayed-passes histogram (0 and max_delay_passes-1 are added)", kServe);
    list(app, t, "--prefill-delayer-wait-seconds-buckets", a.prefill_delayer_wait_seconds_buckets,
         "bounds of /metrics' delay-seconds histogram (0 is added)", kServe);
    optional(app, t, "--prefill-delayer-queue-min-ratio", a.prefill_delayer_queue_min_ratio,
             "also delay while every group's queue is shorter than min(running requests x RATIO, the most a "
             "prefill admitted); typical 0.1-0.5",
             kServe);
    optional(app, t, "--prefill-delayer-max-delay-ms", a.prefill_delayer_max_delay_ms,
             "longest that queue-based delay holds a prefill, milliseconds (5000 when unset)", kServe);
    optional(app, t, "--max-queued-requests", a.max_queued_requests,
             "the most requests waiting to run at once (per scheduler); beyond it a request gets 503, or under "
             "priority scheduling displaces the worst waiting one if it is better",
             kServe);
    optional(app, t, "--max-total-tokens", a.max_total_tokens, "cap on the KV pool size in tokens", kYes)
        ->transform(human_readable_int());
    optional(app, t, "--chunked-prefill-size", a.chunked_prefill_size, "max tokens per prefill chunk; -1 disables",
             kYes);
    flag(app, t, "--enable-dynamic-chunking", a.enable_dynamic_chunking, "dynamic chunk sizes under PP", kYes);
    value(app, t, "--max-prefill-tokens", a.max_prefill_tokens, "max tokens in one prefill batch", kYes)
        ->transform(human_readable_int());
    optional(app, t, "--prefill-max-requests", a.prefill_max_requests, "max requests in one prefill batch", kYes);
    value(app, t, "--prefill-decode-interval", a.prefill_decode_interval,
          "decode steps the running requests take after each prefill step before the next prefill (0: a waiting "
          "request is prefilled as soon as it fits; more: steadier inter-token latency, later first tokens)",
          kYes);
    value(app, t, "--schedule-policy", a.schedule_policy, "waiting-queue order", kYes)
        ->check(CLI::IsMember({"lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"}));
    flag(app, t, "--enable-priority-scheduling", a.enable_priority_scheduling,
         "order the waiting queue by request priority (higher values first), and let a request preempt running "
         "ones of a worse priority when the running batch is full",
         kYes);
    flag(app, t, "--disable-priority-preemption", a.disable_priority_preemption,
         "priority scheduling without preemption", kYes);
    optional(app, t, "--default-priority-value", a.default_priority_value,
             "the priority of a request that gives none (default: the worst)", kYes);
    flag(app, t, "--abort-on-priority-when-disabled", a.abort_on_priority_when_disabled,
         "without priority scheduling, refuse requests that give a priority (503)", kYes);
    flag(app, t, "--schedule-low-priority-values-first", a.schedule_low_priority_values_first,
         "lower priority values are better", kYes);
    value(app, t, "--priority-scheduling-preemption-threshold", a.priority_scheduling_preemption_threshold,
          "a request preempts running ones whose priority is worse by more than this", kYes);
    value(app, t, "--retraction-policy", a.retraction_policy,
          "which running requests give up their KV when it is full: length (fewest outputs first) or priority "
          "(the worst priority first)",
          kYes)
        ->check(CLI::IsMember({"length", "priority"}));
    value(app, t, "--schedule-conservativeness", a.schedule_conservativeness, "admission conservativeness", kYes);
    optional(app, t, "--page-size", a.page_size, "tokens per KV page (default 1)", kYes);
    flag(app, t, "--disable-radix-cache", a.disable_radix_cache, "no prefix reuse", kYes);
    optional(app, t, "--max-cached-tokens", a.max_cached_tokens,
             "tessera: tokens the prefix cache keeps once no request uses them (--radix-eviction-policy's first "
             "choices go); "
             "default an eighth of the rank's memory, -1 = no cap (SGLang)", kServe);
    value(app, t, "--radix-eviction-policy", a.radix_eviction_policy,
          "which cached prefix goes first when KV is needed: lru (least recently used), lfu (fewest inserts "
          "through it, then lru; a finished request inserts its prompt twice, its output once), slru (those "
          "inserted fewer than twice first, lru within each) or priority (lowest request priority first, then lru)",
          kYes)
        ->check(CLI::IsMember({"lru", "lfu", "slru", "priority"}));
    flag(app, t, "--disable-overlap-schedule", a.disable_overlap_schedule,
         "run each step to completion before scheduling the next (turns off overlap scheduling)", kYes);
    value(app, t, "--scheduler-recv-interval", a.scheduler_recv_interval,
          "decode steps between reads of new requests (a prefill step always reads after it)", kServe);
    flag(app, t, "--enable-memory-saver", a.enable_memory_saver,
         "/release_memory_occupation gives the weights and the KV pool's pages back to the system, "
         "/resume_memory_occupation reads the weights again (without it a release only flushes the cache)",
         kServe);
    flag(app, t, "--enable-mixed-chunk", a.enable_mixed_chunk,
         "run the running requests' decode tokens in the same forward as a prefill chunk (needs chunked prefill)",
         kYes);
    flag(app, t, "--enable-deterministic-inference", a.enable_deterministic_inference,
         "batch-invariant kernels: a request's tokens and log-probabilities do not depend on the batch it ran in, "
         "chunk sizes or the prefix cache; sampling seeded (sampling_seed, default 42). Slower: "
         "docs/deterministic-inference.md",
         kYes);
    value(app, t, "--attention-backend", a.attention_backend,
          "SGLang's attention kernels (no effect on CPU; checked against --enable-deterministic-inference as SGLang "
          "does)",
          kGpu)
        ->check(catalogue_check("--attention-backend"));
    value(app, t, "--sampling-backend", a.sampling_backend, "SGLang's sampling kernels (no effect on CPU)", kGpu)
        ->check(catalogue_check("--sampling-backend"));
    value(app, t, "--decode-log-interval", a.decode_log_interval, "decode steps between log lines", kYes);
    flag(app, t, "--enable-request-time-stats-logging", a.enable_request_time_stats_logging,
         "log one line per finished request: its time in the queue and in the model (ReqTimeStats(...))", kServe);
    value(app, t, "--stream-interval", a.stream_interval,
          "output tokens per streamed chunk (the first token is sent alone); a request's own "
          "sampling_params.stream_interval overrides it", kServe);
    flag(app, t, "--enable-metrics", a.enable_metrics, "Prometheus metrics", kServe);
    value(app, t, "--kv-cache-dtype", a.kv_cache_dtype,
          "KV cache element type: auto (the model's dtype), bf16, fp8_e4m3 or fp8_e5m2 (one byte per value: twice "
          "the tokens; the checkpoint's k_scale / v_scale or --quantization-param-path's, else 1; values clamped "
          "to the format's range)",
          kYes)
        ->check(CLI::IsMember({"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                               "fp4_mx_block16", "fp4_e2m1"}));
    value(app, t, "--chat-template", a.chat_template,
          "a Jinja chat template file, or SGLang's built-in chatml, llama-2 or mistral, to render chat requests with "
          "in place of the tokenizer's",
          kYes);
    value(app, t, "--completion-template", a.completion_template,
          "fill-in-the-middle for /v1/completions with a suffix: deepseek_coder, star_coder, qwen_coder or a "
          "template .json file (name, fim_begin_token, fim_middle_token, fim_end_token, fim_position)",
          kServe);
    value(app, t, "--hf-chat-template-name", a.hf_chat_template_name,
          "which of the tokenizer's named chat templates renders chat requests (e.g. tool_use, rag); "
          "--chat-template overrides it",
          kYes);
    value(app, t, "--default-chat-template-kwargs", a.default_chat_template_kwargs,
          "a JSON object of chat template variables for every chat request, e.g. '{\"enable_thinking\": false}'; a "
          "request's chat_template_kwargs override them",
          kServe);
    value(app, t, "--sampling-defaults", a.sampling_defaults,
          "model: a chat request's unset temperature / top_p / top_k / min_p come from the model's "
          "generation_config.json; openai: 1.0 / 1.0 / -1 / 0.0",
          kServe)
        ->check(CLI::IsMember({"model", "openai"}));
    value(app, t, "--json-model-override-args", a.json_model_override_args,
          "a JSON object of config.json fields that replace the folder's, e.g. '{\"max_position_embeddings\": 65536}'",
          kYes);
    flag(app, t, "--incremental-streaming-output,--stream-output", a.incremental_streaming_output,
         "a streamed /generate chunk carries only the text and output_ids new since the previous one, not all of "
         "them (--stream-output is SGLang's older name)",
         kServe);
    flag(app, t, "--is-embedding", a.is_embedding,
         "serve the model as an embedding model: POST /v1/embeddings and /encode answer each input's last hidden "
         "state (after the final norm, unit length); the generation routes are refused",
         kServe);
    flag(app, t, "--enable-return-hidden-states", a.enable_return_hidden_states,
         "let requests set return_hidden_states: meta_info.hidden_states gets the final-normed hidden states of "
         "the prompt's last prefill pass and of every output token (the same as --return-hidden-states-mode full)",
         kServe);
    value(app, t, "--return-hidden-states-mode", a.return_hidden_states_mode,
          "the most return_hidden_states may ask for: last (only \"last\", the state that predicted the last "
          "token) or full (also true, every state)",
          kServe)
        ->check(CLI::IsMember({"last", "full"}));
    flag(app, t, "--enable-return-routed-experts", a.enable_return_routed_experts,
         "let requests set return_routed_experts: meta_info.routed_experts (base64 of int32 [positions, layers, "
         "top_k]) names the logical experts every prompt and output token went to (MoE models)",
         kServe);
    flag(app, t, "--skip-tokenizer-init", a.skip_tokenizer_init,
         "load no tokenizer: POST /generate takes input_ids and answers output_ids without text; the OpenAI routes "
         "and stop strings are refused",
         kServe);
    value(app, t, "--preferred-sampling-params", a.preferred_sampling_params,
          "a JSON object of sampling_params that /generate requests start from (their own keys win) and "
          "/model_info reports, e.g. '{\"temperature\": 0.6, \"top_p\": 0.95}'; of the OpenAI routes' "
          "fields only stream_interval is taken (they set the others)",
          kServe);
    value(app, t, "--weight-version", a.weight_version, "the version of the weights /model_info reports", kServe);
    flag(app, t, "--stream-response-default-include-usage", a.stream_response_default_include_usage,
         "streamed chat and completion responses end with usage even without stream_options", kServe);
    flag(app, t, "--log-requests", a.log_requests, "log every request when received and when finished", kServe);
    value(app, t, "--log-requests-level", a.log_requests_level,
          "0: metadata; 1: and sampling parameters; 2: and input / output cut to 2048 characters; 3: all of them",
          kServe)
        ->check(CLI::Range(0, 3));
    value(app, t, "--log-requests-format", a.log_requests_format, "text (readable) or json (one object per line)",
          kServe)
        ->check(CLI::IsMember({"text", "json"}));
    const auto bounds = [&](const char* name, auto& field, const char* help) {
        list(app, t, name, field, help, kServe);
    };
    bounds("--bucket-time-to-first-token", a.bucket_time_to_first_token,
           "bounds of /metrics' time-to-first-token histogram, seconds (default SGLang's 0.1 ... 1200)");
    bounds("--bucket-inter-token-latency", a.bucket_inter_token_latency,
           "bounds of /metrics' inter-token latency histogram, seconds (default 0.002 ... 8)");
    bounds("--bucket-e2e-request-latency", a.bucket_e2e_request_latency,
           "bounds of /metrics' end-to-end latency histogram, seconds (default 0.1 ... 2400)");
    bounds("--prompt-tokens-buckets", a.prompt_tokens_buckets,
           "/metrics' prompt token histograms: default, tse MIDDLE BASE COUNT (exponential both sides of MIDDLE) "
           "or custom BOUND ...");
    bounds("--generation-tokens-buckets", a.generation_tokens_buckets,
           "/metrics' generation token histogram: default, tse MIDDLE BASE COUNT or custom BOUND ...");
    value(app, t, "--extra-metric-labels", a.extra_metric_labels,
          "a JSON object of labels every /metrics sample carries besides model_name, e.g. '{\"cluster\": \"a\"}'",
          kServe);
    list(app, t, "--log-requests-target", a.log_requests_target,
         "where the json lines of --log-requests go instead of the log: stdout and/or directories (each gets "
         "<host>_<rank>.log, begun anew every hour)",
         kServe);
    value(app, t, "--tokenizer-metrics-custom-labels-header", a.tokenizer_metrics_custom_labels_header,
          "the HTTP header in which a chat or completion request gives its labels for /metrics, a JSON object",
          kServe);
    list(app, t, "--tokenizer-metrics-allowed-custom-labels", a.tokenizer_metrics_allowed_custom_labels,
         "the label names that header may set (others are dropped); every HTTP metric sample then carries "
         "each of them, \"\" when a request gave none",
         kServe);
    flag(app, t, "--enable-streaming-session", a.enable_streaming_session,
         "/open_session may open streaming sessions (\"streaming\": true): each turn appends to the last, and "
         "the session holds its KV between turns, out of the prefix cache's eviction, until it is closed or "
         "times out",
         kServe);
    flag(app, t, "--enable-session-radix-cache", a.enable_session_radix_cache,
         "the prefix cache keeps the KV of open sessions' turns longest: evictions take what no open session "
         "references first, and closing a session only drops its references",
         kServe);
    flag(app, t, "--strip-thinking-cache", a.strip_thinking_cache,
         "a finished request whose output began with reasoning (counted with --reasoning-parser) leaves only "
         "its prompt in the prefix cache, not its thinking and answer",
         kServe);
    value(app, t, "--crash-dump-folder", a.crash_dump_folder,
          "when the server fails (its ranks cannot run steps together) or gets SIGQUIT, write the requests of "
          "the last 5 minutes and those running to FOLDER/<host>/crash_dump_<time>.json",
          kServe);
    flag(app, t, "--export-metrics-to-file", a.export_metrics_to_file,
         "write a JSON line per finished request (its parameters, token counts, finish reason, e2e latency) to "
         "--export-metrics-to-file-dir",
         kServe);
    value(app, t, "--export-metrics-to-file-dir", a.export_metrics_to_file_dir,
          "where --export-metrics-to-file writes: sglang-request-metrics-YYYYMMDD_HH.log, one file per hour",
          kServe);
    flag(app, t, "--allow-auto-truncate", a.allow_auto_truncate,
         "cut a prompt longer than the context to its first tokens instead of refusing it", kServe);
    value(app, t, "--tool-call-parser", a.tool_call_parser,
          "turn the function calls a model writes into a chat completion's tool_calls: qwen25 (Qwen 2.5 / Qwen3), "
          "deepseekv3, deepseekv31, kimi_k2, llama3, mistral or pythonic",
          kServe);
    value(app, t, "--reasoning-parser", a.reasoning_parser,
          "split a chat completion's reasoning into reasoning_content: deepseek-r1, deepseek-v3, deepseek-v4, glm45, "
          "interns1, kimi, kimi_k2, minimax, mistral, qwen3, qwen3-thinking, step3 or step3p5",
          kServe);
    flag(app, t, "--enable-strict-thinking", a.enable_strict_thinking,
         "with --reasoning-parser, a request's reasoning may not contain the parser's tool-call and end-of-turn "
         "tokens (so it ends with the think-end token), and custom_params.thinking_budget caps its length",
         kServe);
    value(app, t, "--grammar-backend", a.grammar_backend,
          "constrained decoding (regex, json_schema, response_format): xgrammar, outlines and llguidance all "
          "select tessera's own regex / JSON-schema backend; none refuses such requests",
          kServe)
        ->check(CLI::IsMember({"xgrammar", "outlines", "llguidance", "none"}));
    value(app, t, "--constrained-json-whitespace-pattern", a.constrained_json_whitespace_pattern,
          "a regex for the whitespace JSON-constrained output may put between tokens (default: any run of "
          "spaces, tabs and newlines)",
          kServe);
    flag(app, t, "--constrained-json-disable-any-whitespace", a.constrained_json_disable_any_whitespace,
         "JSON-constrained output is written as json.dumps writes it: \", \" and \": \" and no other whitespace",
         kServe);
    value(app, t, "--quantization-param-path", a.quantization_param_path,
          "SGLang's JSON of KV cache scaling factors per TP rank and layer, for --kv-cache-dtype fp8_e4m3 (taken "
          "as k_scale and v_scale; replaces the checkpoint's)",
          kYes);
    value(app, t, "--quantization", a.quantization,
          "weight quantization: fp8 quantizes an unquantized checkpoint's linear weights to e4m3 in 128 x 128 "
          "blocks at load (FP8 checkpoints are detected from config.json without it)",
          kYes);

    // MoE / EP / EPLB (§1.3).
    value(app, t, "--moe-a2a-backend", a.moe_a2a_backend,
          "MoE dispatch/combine backend: none (masked EP + all-reduce), all_to_all (tokens sent to their "
          "experts' ranks) or deepep (run as all_to_all: the exchange DeepEP's GPU kernels make); SGLang's other GPU "
          "backends are refused",
          kYes)
        ->check(CLI::IsMember({"none", "all_to_all", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep",
                               "flashinfer", "megamoe", "deepep_v2", "pplx", "ascend_tp"}));
    value(app, t, "--moe-runner-backend", a.moe_runner_backend,
          "SGLang's MoE expert kernels (no effect on CPU: experts run as tessera's grouped GEMMs)", kGpu)
        ->check(catalogue_check("--moe-runner-backend"));
    value(app, t, "--deepep-mode", a.deepep_mode,
          "DeepEP's normal or low-latency kernels (no effect on CPU: --moe-a2a-backend deepep runs tessera's one "
          "all_to_all exchange in prefill and decode)",
          kGpu)
        ->check(catalogue_check("--deepep-mode"));
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
    flag(app, t, "--disable-shared-experts-fusion", a.disable_shared_experts_fusion,
         "keep shared experts apart (as tessera always does)", kYes);
    flag(app, t, "--enforce-shared-experts-fusion", a.enforce_shared_experts_fusion,
         "SGLang's fused MoE kernel with the shared experts as extra experts (no effect on CPU: tessera adds the "
         "shared experts' output to the routed ones', the same sum)",
         kGpu);

    register_sglang_flags(app, t);
}

FlagTable::~FlagTable() { delete impl_; }

namespace {

bool parses_as_int(const std::string& s) {
    if (s.empty()) return false;
    std::size_t used = 0;
    try {
        (void)std::stoll(s, &used);
    } catch (const std::exception&) {
        return false;
    }
    return used == s.size();
}

bool parses_as_float(const std::string& s) {
    if (s.empty()) return false;
    std::size_t used = 0;
    try {
        (void)std::stod(s, &used);
    } catch (const std::exception&) {
        return false;
    }
    return used == s.size();
}

// argparse's per-value checks: the type, then the choices.
CLI::Validator sglang_value_check(const SglangFlag& flag) {
    return CLI::Validator(
        [&flag](std::string& v) -> std::string {
            if (flag.type == "int" && !parses_as_int(v)) return "invalid int value: '" + v + "'";
            if (flag.type == "float" && !parses_as_float(v)) return "invalid float value: '" + v + "'";
            if (!flag.choices.empty() && std::find(flag.choices.begin(), flag.choices.end(), v) == flag.choices.end()) {
                std::string all;
                for (const std::string& c : flag.choices) all += (all.empty() ? "'" : ", '") + c + "'";
                return "invalid choice: '" + v + "' (choose from " + all + ")";
            }
            return "";
        },
        flag.type);
}

std::string names_help(const SglangFlag& flag) {
    using T = SglangFlag::Tessera;
    switch (flag.tessera) {
        case T::kGpuOnly: return "[SGLang; tunes GPU machinery: no effect on CPU] " + flag.help;
        case T::kIgnored: return "[SGLang; no effect: " + flag.reason + "] " + flag.help;
        default: return "[SGLang; not implemented: only the default " + flag.default_text() + "] " + flag.help;
    }
}

constexpr const char* kSglangGroup = "Other flags of SGLang's launch_server";

// --help lists tessera's flags and summarises the hundreds of SGLang flags it only accepts.
class SummarisingFormatter : public CLI::Formatter {
 public:
    std::string make_group(std::string group, bool is_positional, std::vector<const CLI::Option*> opts) const override {
        if (group != kSglangGroup) return CLI::Formatter::make_group(std::move(group), is_positional, std::move(opts));
        return "\n" + group + ":\n  " + std::to_string(opts.size()) +
               " more, accepted so that SGLang commands run; they tune GPU machinery, have no effect here, or "
               "take only their default (docs/sglang-compat.md lists them)\n";
    }
};

}  // namespace

void register_sglang_flags(CLI::App& app, FlagTable::Impl& t) {
    t.app = &app;
    app.formatter(std::make_shared<SummarisingFormatter>());
    auto known = [&app](const std::string& name) {
        for (const CLI::Option* o : app.get_options())
            for (const std::string& l : o->get_lnames())
                if ("--" + l == name) return true;
        return false;
    };
    for (const SglangFlag& flag : sglang_flags()) {
        using T = SglangFlag::Tessera;
        if (flag.tessera == T::kImplemented) continue;
        std::string names;
        for (const std::string& n : flag.names)
            if (!known(n)) names += (names.empty() ? "" : ",") + n;
        if (names.empty()) continue;
        FlagTable::Impl::Foreign& f = t.foreign.emplace_back();
        f.flag = &flag;
        if (flag.tessera == T::kConfigFile) {
            // Read before parsing (FlagTable::read_command_line); registered for --help and prefixes.
            f.option = app.add_option(names, f.values, "SGLang's YAML config file: one key per flag, e.g. `tp-size: 2`; "
                                                      "the command line overrides it");
            continue;
        }
        switch (flag.kind) {
            case SglangFlag::Kind::kSwitch:
                f.option = app.add_flag(names, f.on, names_help(flag))->group(kSglangGroup);
                break;
            case SglangFlag::Kind::kOptionalSwitch: {
                f.option = app.add_flag(names, f.on, names_help(flag))->group(kSglangGroup);
                std::string negated;
                for (const std::string& n : flag.names) negated += (negated.empty() ? "--no-" : ",--no-") + n.substr(2);
                f.negated = app.add_flag(negated, f.off, names_help(flag))->group(kSglangGroup);
                break;
            }
            case SglangFlag::Kind::kValue:
                f.option = app.add_option(names, f.values, names_help(flag))
                               ->expected(1)
                               ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                               ->check(sglang_value_check(flag))
                               ->group(kSglangGroup);
                break;
            case SglangFlag::Kind::kList:
                f.option = app.add_option(names, f.values, names_help(flag))
                               ->expected(1, CLI::detail::expected_max_vector_size)
                               ->check(sglang_value_check(flag))
                               ->group(kSglangGroup);
                break;
        }
    }
}

StatusOr<std::vector<std::string>> FlagTable::read_command_line(const std::vector<std::string>& args) const {
    std::vector<KnownFlag> known;
    std::set<std::string> switches;
    for (const CLI::Option* o : impl_->app->get_options()) {
        const bool takes_value = o->get_expected_max() > 0;
        for (const std::string& l : o->get_lnames()) {
            known.push_back({"--" + l, takes_value});
            if (!takes_value) switches.insert("--" + l);
        }
    }
    auto expanded = expand_abbreviations(args, known);
    if (!expanded.ok()) return expanded.status();
    // SGLang's prepare_server_args: the config file's arguments first, so the command line wins.
    std::vector<std::string> rest;
    std::string config_path;
    const std::vector<std::string>& in = expanded.value();
    for (std::size_t i = 0; i < in.size(); ++i) {
        const bool joined = in[i].rfind("--config=", 0) == 0;
        if (in[i] != "--config" && !joined) {
            rest.push_back(in[i]);
            continue;
        }
        if (!config_path.empty()) return Status::InvalidArgument("Multiple config files specified! Only one allowed.");
        if (joined) {
            config_path = in[i].substr(9);
        } else if (i + 1 < in.size()) {
            config_path = in[++i];
        }
        if (config_path.empty()) return Status::InvalidArgument("No config file specified after --config flag!");
    }
    if (config_path.empty()) return rest;
    auto entries = read_config_file(config_path);
    if (!entries.ok()) return entries.status();
    std::vector<std::string> from_file;
    for (const ConfigEntry& e : entries.value()) {
        if (e.key == "config") return Status::InvalidArgument("--config " + config_path + " names another config file");
        auto flag_name = expand_abbreviations({"--" + e.key}, known);
        if (!flag_name.ok())
            return Status::InvalidArgument("--config " + config_path + ": " + flag_name.status().message() +
                                           " (keys are flag names with dashes, e.g. tp-size)");
        const std::string name = flag_name.value().front();
        if (e.boolean && switches.count(name)) {
            // As SGLang: true gives the switch, false leaves it out; tessera also reads
            // false as --no-x for SGLang's optional switches.
            if (*e.boolean) from_file.push_back(name);
            else if (switches.count("--no-" + name.substr(2))) from_file.push_back("--no-" + name.substr(2));
            continue;
        }
        if (e.boolean) {
            from_file.insert(from_file.end(), {name, *e.boolean ? "true" : "false"});
            continue;
        }
        if (e.values.empty()) continue;  // an empty list
        from_file.push_back(name);
        from_file.insert(from_file.end(), e.values.begin(), e.values.end());
    }
    from_file.insert(from_file.end(), rest.begin(), rest.end());
    return from_file;
}

Status FlagTable::parse(const std::vector<std::string>& args) {
    TSR_ASSIGN_OR_RETURN(std::vector<std::string> read, read_command_line(args));
    std::reverse(read.begin(), read.end());  // CLI11 takes them last first
    try {
        impl_->app->parse(read);
    } catch (const CLI::ParseError& e) {
        return Status::InvalidArgument(e.what());
    }
    return Status::Ok();
}

Status FlagTable::check_supported() const {
    for (const Impl::NotYet& n : impl_->not_yet) {
        if (n.option->count() == 0 || n.asks_nothing()) continue;
        const std::string name = n.option->get_name();
        const std::string what = n.help.substr(0, n.help.find(" ["));
        return Status::Unimplemented(name + " " + n.value() + ": " +
                                     (n.serve_only ? "`tessera serve` implements it, this command does not"
                                                   : "tessera does not implement it yet (" + what + ")") +
                                     "; remove the flag" + (n.neutral.empty() ? "" : ", or give " + n.neutral));
    }
    for (const Impl::Foreign& f : impl_->foreign) {
        if (f.flag->tessera != SglangFlag::Tessera::kNotImplemented) continue;
        const std::string& name = f.flag->names.front();
        std::string given;
        bool neutral = true;
        if (f.on) {
            given = name;
            neutral = f.flag->default_value == "True";
        } else if (f.negated && f.off) {
            given = "--no-" + name.substr(2);
            neutral = f.flag->default_value == "False";
        } else if (f.option->count() > 0) {
            given = name;
            for (const std::string& v : f.values) given += " " + v;
            neutral = f.flag->kind == SglangFlag::Kind::kValue && f.values.size() == 1 && f.flag->is_neutral(f.values[0]);
        }
        if (neutral) continue;
        const std::string what = f.flag->reason.empty() ? "this SGLang feature (\"" + f.flag->help + "\")"
                                                        : f.flag->reason;
        const bool has_default = f.flag->kind == SglangFlag::Kind::kValue && f.flag->default_value != "None";
        return Status::Unimplemented(given + ": tessera does not implement " + what + "; remove the flag" +
                                     (has_default ? " or give SGLang's default " + f.flag->default_text() : ""));
    }
    return Status::Ok();
}

std::vector<std::string> FlagTable::ignored_flags() const {
    std::vector<std::string> lines;
    for (const CLI::Option* o : impl_->gpu_only)
        if (o->count() > 0) lines.push_back(o->get_name() + " (tunes GPU machinery)");
    for (const Impl::Foreign& f : impl_->foreign) {
        using T = SglangFlag::Tessera;
        const bool given = f.option->count() > 0 || (f.negated && f.negated->count() > 0);
        if (!given || (f.flag->tessera != T::kGpuOnly && f.flag->tessera != T::kIgnored)) continue;
        lines.push_back(f.flag->names.front() +
                        (f.flag->tessera == T::kGpuOnly ? " (tunes GPU machinery)" : " (" + f.flag->reason + ")"));
    }
    return lines;
}

Status FlagTable::resolve() {
    TSR_RETURN_IF_ERROR(args_.resolve());
    TSR_RETURN_IF_ERROR(args_.check_tessera_runs());
    return check_supported();
}

}  // namespace tessera::server
