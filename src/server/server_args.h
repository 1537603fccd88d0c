#pragma once
// server/server_args.h — every launch flag of `tessera serve` / `tessera generate`, with
// SGLang's names, aliases and defaults (reference §1). The flag table in
// server_args_cli.cpp is the one place flags are defined and also drives --help;
// resolve() applies SGLang's rewrites and validation rules in its order. Plain value.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/parallel_layout.h"

namespace CLI {
class App;
}

namespace tessera::server {

struct ServerArgs {
    // Model and process
    std::string model_path;
    std::string load_format = "auto";  // auto, safetensors, or dummy (random weights, config.json only)
    std::string tokenizer_path;  // default: model_path
    std::string served_model_name;  // default: model_path
    std::string dtype = "auto";
    std::string host = "127.0.0.1";
    int port = 30000;
    std::string api_key;        // --api-key (else env TESSERA_API_KEY); empty: no authentication
    std::string admin_api_key;  // --admin-api-key: routes that change state
    std::string allowed_hosts;  // --allowed-hosts: comma-separated Host names besides the bound address
    std::optional<std::int64_t> random_seed;
    std::optional<std::int64_t> context_length;
    int threads_per_rank = 0;  // 0: cores on the host / ranks on the host
    std::string log_level = "info";
    bool log_all_ranks = false;

    // Topology (§1.1)
    int tp_size = 1;
    int pp_size = 1;
    int dp_size = 1;
    int ep_size = 1;
    int moe_dp_size = 1;
    int attn_cp_size = 1;
    int dcp_size = 1;
    bool enable_dp_attention = false;
    bool enable_dp_lm_head = false;
    std::optional<int> moe_dense_tp_size;
    int nnodes = 1;
    int node_rank = 0;
    std::string dist_init_addr;
    std::optional<int> dist_timeout;  // seconds
    int base_gpu_id = 0;
    int gpu_id_step = 1;
    std::string load_balance_method = "auto";
    std::optional<int> pp_max_micro_batch_size;
    int pp_async_batch_depth = 0;

    // Memory and scheduling (§1.2)
    std::optional<double> mem_fraction_static;
    std::optional<int> max_running_requests;
    std::optional<int> max_queued_requests;
    std::optional<std::int64_t> min_free_slots_delay;  // free running slots that new requests wait for
    // --enable-prefill-delayer and its knobs (SGLang's managers/prefill_delayer.py; see
    // scheduler/prefill_delayer.h). The buckets are /metrics' histogram bounds.
    bool enable_prefill_delayer = false;  // also SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE (deprecated)
    int prefill_delayer_max_delay_passes = 30;
    std::optional<double> prefill_delayer_token_usage_low_watermark;
    std::vector<double> prefill_delayer_forward_passes_buckets;
    std::vector<double> prefill_delayer_wait_seconds_buckets;
    std::optional<double> prefill_delayer_queue_min_ratio;
    std::optional<double> prefill_delayer_max_delay_ms;
    std::optional<std::int64_t> max_total_tokens;
    std::optional<int> chunked_prefill_size;
    bool enable_dynamic_chunking = false;
    std::string pipeline_trace_path;  // --enable-pipeline-trace FILE: Chrome-trace timeline of every rank
    int max_prefill_tokens = 16384;
    std::optional<int> prefill_max_requests;
    int prefill_decode_interval = 0;
    std::string schedule_policy = "fcfs";
    bool enable_priority_scheduling = false;
    bool disable_priority_preemption = false;
    std::optional<int> default_priority_value;
    bool abort_on_priority_when_disabled = false;
    bool schedule_low_priority_values_first = false;
    int priority_scheduling_preemption_threshold = 10;
    std::string retraction_policy = "length";
    double schedule_conservativeness = 1.0;
    std::optional<int> page_size;
    bool disable_radix_cache = false;
    std::optional<std::int64_t> max_cached_tokens;  // tessera: cap on the prefix cache's unused tokens (-1: none)
    std::string radix_eviction_policy = "lru";
    bool disable_overlap_schedule = false;
    int scheduler_recv_interval = 1;
    bool enable_mixed_chunk = false;
    bool enable_memory_saver = false;  // /release_memory_occupation gives memory back
    bool enable_deterministic_inference = false;  // batch-invariant kernels, seeded sampling
    std::string attention_backend;  // SGLang's GPU kernels: no effect here ("" = not given)
    std::string sampling_backend;   // likewise; resolve() sets "pytorch" under deterministic inference
    int decode_log_interval = 40;
    bool enable_request_time_stats_logging = false;  // one line of queue / forward time per request
    int stream_interval = 1;
    bool enable_metrics = false;
    std::string reasoning_parser;  // --reasoning-parser ("" for none)
    std::string tool_call_parser;  // --tool-call-parser ("" for none)
    // Constrained decoding: --grammar-backend (xgrammar, outlines and llguidance all mean
    // tessera's own; none refuses constrained requests) and how JSON output may space itself.
    std::string grammar_backend = "xgrammar";
    // --enable-strict-thinking: inside a request's reasoning the parser's excluded tokens
    // (tool-call markers, end of turn) may not come, and custom_params.thinking_budget caps it.
    bool enable_strict_thinking = false;
    std::string constrained_json_whitespace_pattern;  // "" for the backend's default
    bool constrained_json_disable_any_whitespace = false;
    std::string chat_template;     // --chat-template: a Jinja template file ("" for the tokenizer's)
    std::string default_chat_template_kwargs;  // --default-chat-template-kwargs: a JSON object ("" for none)
    bool allow_auto_truncate = false;
    bool stream_response_default_include_usage = false;
    bool incremental_streaming_output = false;  // --incremental-streaming-output (and the older --stream-output)
    bool skip_tokenizer_init = false;  // --skip-tokenizer-init: token ids in and out, no tokenizer loaded
    // --enable-return-hidden-states (full) and --return-hidden-states-mode last|full: the most a
    // request's return_hidden_states may ask for.
    bool enable_return_hidden_states = false;
    std::string return_hidden_states_mode;
    bool enable_return_routed_experts = false;  // requests' return_routed_experts (MoE models)
    bool is_embedding = false;         // --is-embedding: serve the model's pooled hidden states as embeddings
    // --model-checksum FILE: SGLang's manifest of the model files' SHA-256 digests, checked
    // before loading; "" when given without a file (SGLang then asks the Hugging Face Hub).
    std::optional<std::string> model_checksum;
    std::string json_model_override_args = "{}";  // --json-model-override-args: config.json fields to replace
    std::string completion_template;  // --completion-template: a built-in fill-in-the-middle template
    std::string hf_chat_template_name;  // --hf-chat-template-name: one of the tokenizer's named templates
    std::string preferred_sampling_params;  // --preferred-sampling-params: a JSON object ("" for none)
    std::string weight_version = "default";  // --weight-version: reported by /model_info
    std::string sampling_defaults = "model";  // --sampling-defaults: model | openai
    bool log_requests = false;
    int log_requests_level = 2;
    std::string log_requests_format = "text";
    std::vector<std::string> log_requests_target;  // --log-requests-target: stdout and/or directories
    // Request-set labels of the HTTP metrics: the header, and the label names it may set.
    std::string tokenizer_metrics_custom_labels_header = "x-custom-labels";
    std::vector<std::string> tokenizer_metrics_allowed_custom_labels;
    bool strip_thinking_cache = false;  // a request that reasoned leaves only its prompt in the cache
    bool enable_streaming_session = false;  // /open_session may open streaming sessions
    bool enable_session_radix_cache = false;  // sessions' KV is evicted after the rest
    std::string crash_dump_folder;  // recent and running requests written there if the server fails
    bool export_metrics_to_file = false;          // a JSON line per finished request in
    std::string export_metrics_to_file_dir;       // this directory, one file per hour
    // /metrics histograms: latency bounds in seconds, token-count bucket rules (SGLang's).
    std::vector<double> bucket_time_to_first_token, bucket_inter_token_latency, bucket_e2e_request_latency;
    std::vector<std::string> prompt_tokens_buckets, generation_tokens_buckets;
    std::string extra_metric_labels;  // --extra-metric-labels: a JSON object of labels every metric carries
    std::string kv_cache_dtype = "auto";
    std::string quantization_param_path;
    std::string quantization;

    // MoE / EP / EPLB (§1.3)
    std::string moe_a2a_backend = "none";
    std::string moe_runner_backend = "auto";
    std::string deepep_mode = "auto";
    int ep_num_redundant_experts = 0;
    std::string ep_dispatch_algorithm;
    std::string init_expert_location = "trivial";
    bool enable_eplb = false;
    std::string eplb_algorithm = "auto";
    int eplb_rebalance_num_iterations = 1000;
    std::optional<int> eplb_rebalance_layers_per_chunk;
    double eplb_min_rebalancing_utilization_threshold = 1.0;
    std::string expert_distribution_recorder_mode;
    std::optional<int> expert_distribution_recorder_buffer_size;
    std::string expert_balancedness_report_mode = "off";
    bool enable_two_batch_overlap = false;
    bool enable_single_batch_overlap = false;
    bool disable_shared_experts_fusion = false;
    bool enforce_shared_experts_fusion = false;

    dist::ParallelConfig parallel_config() const;
    // --api-key, else TESSERA_API_KEY ("" when neither is set).
    std::string effective_api_key() const;
    // --allowed-hosts split at its commas.
    std::vector<std::string> allowed_host_list() const;

    // SGLang's resolution pass: defaults rewritten from other flags (§1.4), then every
    // validation rule (§1.5-§1.7). Messages name the clashing flags and what would work.
    Status resolve();
    // What this build runs, checked after resolve() so that SGLang's own messages come first:
    // the quantization and KV cache types, the MoE backends and EPLB algorithms tessera has.
    Status check_tessera_runs() const;
    // The part of resolve() for --enable-deterministic-inference, last, as in SGLang.
    Status resolve_deterministic_inference();
    // SGLang's _handle_prefill_delayer_env_compat: the deprecated environment variables set
    // the delayer's flags, each with a note.
    Status apply_deprecated_prefill_delayer_env();

    // Warnings produced by resolve() (a rewritten default the user should know about).
    std::vector<std::string> notes;
};

// Registers every flag of the table on `app` (a `serve` or `generate` subcommand), then every
// other flag of SGLang's launch_server (sglang_flags.tsv). The order of use:
//   read_command_line (abbreviations, --config) -> CLI11 parse -> resolve().
class FlagTable {
 public:
    // kServe: flags of the serving loop are live; kGenerate: offline generation does not
    // schedule, so those flags accept only their defaults there.
    enum class Mode { kServe, kGenerate };
    FlagTable(CLI::App& app, ServerArgs& args, Mode mode);
    ~FlagTable();
    FlagTable(const FlagTable&) = delete;
    FlagTable& operator=(const FlagTable&) = delete;

    // The arguments after the subcommand as SGLang's argparse reads them: unique prefixes
    // expanded (`--tp 2`), `--config FILE.yaml` replaced by its arguments, ahead of the
    // command line's so that the command line wins.
    StatusOr<std::vector<std::string>> read_command_line(const std::vector<std::string>& args) const;
    // read_command_line, then CLI11 on the (sub)command this table was registered on. A parse
    // error (or --help) comes back as its message: for callers that print their own.
    Status parse(const std::vector<std::string>& args);

    // After parsing: ServerArgs::resolve() (SGLang's rewrites and validation, in its order),
    // then check_supported().
    Status resolve();
    // What this build runs, checked after resolve() so that SGLang's own messages come first:
    // the quantization and KV cache types, the MoE backends and EPLB algorithms tessera has.
    Status check_tessera_runs() const;
    // A flag tessera accepts for compatibility at a value that asks for something it does not
    // do fails here, naming the flag, the value and what would work.
    Status check_supported() const;
    // The flags given that have no effect here, each with why (for one log line).
    std::vector<std::string> ignored_flags() const;

    struct Impl;  // defined in server_args_cli.cpp, the only place that uses CLI11

 private:
    Impl* impl_;
    ServerArgs& args_;
};

}  // namespace tessera::server
