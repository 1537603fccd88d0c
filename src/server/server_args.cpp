#include "server/server_args.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/env.h"
#include "server/http_metrics.h"
#include "server/openai_protocol.h"
#include "grammar/regex.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "tokenizer/conversation_template.h"

namespace tessera::server {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

bool one_of(const std::string& v, std::initializer_list<const char*> options) {
    return std::any_of(options.begin(), options.end(), [&](const char* o) { return v == o; });
}

// a2a backends whose dispatch spans the whole TP group: SGLang forces ep_size = tp_size.
constexpr std::initializer_list<const char*> kEpSpanningBackends = {
    "all_to_all", "megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep", "flashinfer", "mori", "pplx"};

}  // namespace

std::string ServerArgs::effective_api_key() const { return !api_key.empty() ? api_key : env().api_key; }

std::vector<std::string> ServerArgs::allowed_host_list() const {
    std::vector<std::string> hosts;
    for (std::size_t begin = 0; begin < allowed_hosts.size();) {
        const std::size_t comma = std::min(allowed_hosts.find(',', begin), allowed_hosts.size());
        if (comma > begin) hosts.push_back(allowed_hosts.substr(begin, comma - begin));
        begin = comma + 1;
    }
    return hosts;
}

dist::ParallelConfig ServerArgs::parallel_config() const {
    dist::ParallelConfig c;
    c.tp_size = tp_size;
    c.pp_size = pp_size;
    c.dp_size = dp_size;
    c.ep_size = ep_size;
    c.moe_dp_size = moe_dp_size;
    c.attn_cp_size = attn_cp_size;
    c.enable_dp_attention = enable_dp_attention;
    c.moe_dense_tp_size = moe_dense_tp_size;
    c.nnodes = nnodes;
    c.node_rank = node_rank;
    return c;
}

Status ServerArgs::apply_deprecated_prefill_delayer_env() {
    const auto deprecated = [this](const char* name, const char* flag) {
        notes.push_back(std::string("Environment variable ") + name + " is deprecated. Please use '" + flag +
                        "' instead.");
    };
    const EnvFlags& e = env();
    if (e.decrease_prefill_idle) {
        std::string v = *e.decrease_prefill_idle;
        std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
        if (v == "1" || v == "true" || v == "yes" || v == "y" || v == "on") {
            deprecated("SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE", "--enable-prefill-delayer");
            enable_prefill_delayer = true;
        }
    }
    if (const auto& v = e.prefill_delayer_max_delay_passes; v && !v->empty()) {
        char* end = nullptr;
        const long passes = std::strtol(v->c_str(), &end, 10);
        if (*end != '\0')
            return invalid("SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES must be an integer, got '" + *v + "'");
        if (passes != 0) {
            deprecated("SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES", "--prefill-delayer-max-delay-passes");
            prefill_delayer_max_delay_passes = static_cast<int>(passes);
        }
    }
    if (const auto& v = e.prefill_delayer_token_usage_low_watermark; v && !v->empty()) {
        char* end = nullptr;
        const double watermark = std::strtod(v->c_str(), &end);
        if (*end != '\0')
            return invalid("SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK must be a number, got '" + *v + "'");
        if (watermark != 0.0) {
            deprecated("SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK",
                       "--prefill-delayer-token-usage-low-watermark");
            prefill_delayer_token_usage_low_watermark = watermark;
        }
    }
    return Status::Ok();
}

Status ServerArgs::resolve() {
    notes.clear();
    // Missing defaults.
    if (tokenizer_path.empty()) tokenizer_path = model_path;
    // The folder's name, not its path: every response carries the model name, and SGLang's
    // default (the path) tells every client where the server keeps its files.
    if (served_model_name.empty()) {
        std::string trimmed = model_path;
        while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
        const auto slash = trimmed.rfind('/');
        served_model_name = slash == std::string::npos || slash + 1 == trimmed.size() ? trimmed : trimmed.substr(slash + 1);
    }
    if (!page_size) page_size = 1;

    // Data parallelism (§1.4): nothing to split with dp 1; DP-attention shares the budgets.
    if (dp_size == 1) {
        enable_dp_attention = false;
        enable_dp_lm_head = false;
    }
    if (enable_dp_lm_head && !enable_dp_attention)
        return invalid("Please enable dp attention when setting enable_dp_lm_head: --enable-dp-lm-head needs "
                       "--enable-dp-attention");
    if (enable_dp_attention) {
        schedule_conservativeness *= 0.3;
        if (chunked_prefill_size && *chunked_prefill_size > 0) *chunked_prefill_size /= dp_size;
        notes.push_back("DP attention is enabled: schedule_conservativeness scaled by 0.3 to " +
                        std::to_string(schedule_conservativeness) + ", chunked_prefill_size divided by dp_size");
    }
    // serving_hook.py _handle_load_balance_method: auto is follow_bootstrap_room for a PD
    // prefill server (tessera has none), round_robin otherwise.
    if (load_balance_method == "auto") load_balance_method = "round_robin";
    if (one_of(moe_a2a_backend, kEpSpanningBackends) && ep_size != tp_size) {
        notes.push_back("--moe-a2a-backend " + moe_a2a_backend + " spans the TP group: ep_size set to tp_size (" +
                        str(tp_size) + ")");
        ep_size = tp_size;
    }
    if (pp_size > 1 && !disable_overlap_schedule) {
        disable_overlap_schedule = true;
        notes.push_back("Pipeline parallelism is incompatible with overlap schedule.");
    }
    if (enable_eplb && expert_distribution_recorder_mode.empty()) {
        expert_distribution_recorder_mode = "stat";
        notes.push_back("EPLB is enabled. The expert_distribution_recorder_mode is automatically set.");
    }
    if (expert_balancedness_report_mode != "off" && expert_distribution_recorder_mode.empty())
        expert_distribution_recorder_mode = "stat";
    if (!expert_distribution_recorder_buffer_size && !expert_distribution_recorder_mode.empty())
        expert_distribution_recorder_buffer_size = eplb_rebalance_num_iterations;
    if ((enable_eplb || init_expert_location != "trivial") && ep_dispatch_algorithm.empty())
        ep_dispatch_algorithm = "static";

    // Parallel sizes and groups (§1.5, §1.6).
    TSR_RETURN_IF_ERROR(dist::ParallelLayout::create(parallel_config()).status());

    // Scheduling and memory (§1.2, §1.5).
    if (pp_max_micro_batch_size && *pp_max_micro_batch_size < 1)
        return invalid("--pp-max-micro-batch-size must be at least 1, got " + str(*pp_max_micro_batch_size));
    if (pp_size > 1 && enable_mixed_chunk)  // scheduler.py: PP keeps one running batch per micro-batch
        return invalid("Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed "
                       "chunked prefill: drop --enable-mixed-chunk or use --pp-size 1");
    if (pp_size > 1 && min_free_slots_delay && *min_free_slots_delay > 1)
        return invalid("--min-free-slots-delay is not supported with pipeline parallelism (--pp-size " + str(pp_size) +
                       "); drop it or use --pp-size 1");
    TSR_RETURN_IF_ERROR(apply_deprecated_prefill_delayer_env());
    // SGLang's PrefillDelayer asserts this when the scheduler starts; PP turned overlap off above.
    if (enable_prefill_delayer && disable_overlap_schedule) {
        const std::string fix = pp_size > 1 ? "pipeline parallelism (--pp-size " + str(pp_size) +
                                                  ") turns overlap scheduling off, use --pp-size 1"
                                            : "drop --disable-overlap-schedule";
        return invalid("To use PrefillDelayer, disable_overlap_schedule must be False: " + fix +
                       ", or drop --enable-prefill-delayer");
    }
    if (pp_async_batch_depth < 0)
        return invalid("--pp-async-batch-depth must be >= 0, got " + str(pp_async_batch_depth));
    if (*page_size < 1) return invalid("--page-size must be at least 1, got " + str(*page_size));
    if (stream_interval < 1) return invalid("--stream-interval must be at least 1, got " + str(stream_interval));
    if (scheduler_recv_interval < 1)
        return invalid("--scheduler-recv-interval must be at least 1, got " + str(scheduler_recv_interval));
    if (chunked_prefill_size && *chunked_prefill_size > 0 && *chunked_prefill_size % *page_size != 0)
        return invalid("chunked_prefill_size must be divisible by page_size: --chunked-prefill-size " +
                       str(*chunked_prefill_size) + " with --page-size " + str(*page_size));
    if (chunked_prefill_size && *chunked_prefill_size == 0)
        return invalid("--chunked-prefill-size 0 is not valid: use a positive size, or -1 to disable chunking");
    if (schedule_conservativeness < 0)
        return invalid("--schedule-conservativeness must be >= 0, got " + std::to_string(schedule_conservativeness));
    if (prefill_decode_interval < 0)
        return invalid("--prefill-decode-interval must be >= 0, got " + str(prefill_decode_interval));
    if (base_gpu_id < 0) return invalid("--base-gpu-id must be >= 0, got " + str(base_gpu_id));
    if (gpu_id_step < 1) return invalid("--gpu-id-step must be >= 1, got " + str(gpu_id_step));
    if (enable_priority_scheduling && !one_of(schedule_policy, {"fcfs", "lof"}))
        return invalid("--enable-priority-scheduling requires --schedule-policy fcfs or lof, got " + schedule_policy);
    // SGLang's warnings (check_server_args), as start-up notes.
    if (enable_priority_scheduling && !default_priority_value)
        notes.push_back("--enable-priority-scheduling without --default-priority-value: a request without a priority "
                        "gets the worst one");
    if (!enable_priority_scheduling && disable_priority_preemption)
        notes.push_back("--disable-priority-preemption has no effect without --enable-priority-scheduling");
    if (!log_requests_target.empty() && (!log_requests || log_requests_format != "json"))
        notes.push_back("--log-requests-target takes the json lines of --log-requests --log-requests-format json; "
                        "without them it has no effect");
    if (!enable_priority_scheduling && default_priority_value)
        notes.push_back("--default-priority-value has no effect without --enable-priority-scheduling");
    if (retraction_policy == "priority" && !enable_priority_scheduling)
        return invalid("--retraction-policy priority requires --enable-priority-scheduling");
    if (mem_fraction_static && (*mem_fraction_static <= 0.0 || *mem_fraction_static > 1.0))
        return invalid("--mem-fraction-static must be in (0, 1], got " + std::to_string(*mem_fraction_static));
    if (!reasoning_parser.empty()) TSR_RETURN_IF_ERROR(server::reasoning_format(reasoning_parser).status());
    // SGLang's create_grammar_backend / ReasonerGrammarBackend: only xgrammar filters tokens.
    if (enable_strict_thinking && grammar_backend == "none")
        return invalid("--enable-strict-thinking requires a grammar backend that supports token filtering, but "
                       "grammar_backend='none' was specified. Use --grammar-backend xgrammar or another backend "
                       "that supports token filtering.");
    if (enable_strict_thinking && grammar_backend != "xgrammar" && !reasoning_parser.empty() &&
        !server::reasoning_format(reasoning_parser)->think_excluded_tokens.empty())
        return invalid("Strict reasoning format requested but the grammar backend does not support token filtering. "
                       "Use a grammar backend that supports token filtering (e.g., xgrammar) or disable strict "
                       "reasoning mode.");
    if (!tool_call_parser.empty()) TSR_RETURN_IF_ERROR(server::tool_call_format(tool_call_parser).status());
    if (!constrained_json_whitespace_pattern.empty()) {
        if (auto pattern = grammar::parse_regex(constrained_json_whitespace_pattern); !pattern.ok())
            return invalid("--constrained-json-whitespace-pattern: " + pattern.status().message());
    }
    if (!default_chat_template_kwargs.empty()) {
        const auto kwargs = nlohmann::json::parse(default_chat_template_kwargs, nullptr, false);
        if (!kwargs.is_object() || kwargs.contains("messages") || kwargs.contains("tools"))
            return invalid("--default-chat-template-kwargs " + default_chat_template_kwargs +
                           ": give a JSON object of template variables (not messages or tools), e.g. "
                           "'{\"enable_thinking\": false}'");
    }
    TSR_RETURN_IF_ERROR(check_latency_buckets("--bucket-time-to-first-token", bucket_time_to_first_token));
    TSR_RETURN_IF_ERROR(check_latency_buckets("--bucket-inter-token-latency", bucket_inter_token_latency));
    TSR_RETURN_IF_ERROR(check_latency_buckets("--bucket-e2e-request-latency", bucket_e2e_request_latency));
    TSR_RETURN_IF_ERROR(token_histogram_buckets("--prompt-tokens-buckets", prompt_tokens_buckets).status());
    TSR_RETURN_IF_ERROR(token_histogram_buckets("--generation-tokens-buckets", generation_tokens_buckets).status());
    TSR_RETURN_IF_ERROR(metric_labels("", extra_metric_labels).status());
    if (!tokenizer_metrics_allowed_custom_labels.empty() && tokenizer_metrics_custom_labels_header.empty())
        return invalid("Please set --tokenizer-metrics-custom-labels-header when setting "
                       "--tokenizer-metrics-allowed-custom-labels.");
    for (const std::string& name : tokenizer_metrics_allowed_custom_labels) {
        TSR_RETURN_IF_ERROR(check_label_name("--tokenizer-metrics-allowed-custom-labels", name));
        if (name == "model_name")
            return invalid("--tokenizer-metrics-allowed-custom-labels: model_name is every sample's own label");
    }
    if (export_metrics_to_file && export_metrics_to_file_dir.empty())
        return invalid("--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled");
    if (!nlohmann::json::parse(json_model_override_args, nullptr, false).is_object())
        return invalid("--json-model-override-args " + json_model_override_args +
                       ": give a JSON object of config.json fields, e.g. '{\"max_position_embeddings\": 65536}'");
    if (!completion_template.empty()) TSR_RETURN_IF_ERROR(server::completion_template(completion_template).status());
    if (!preferred_sampling_params.empty())
        TSR_RETURN_IF_ERROR(server::parse_preferred_sampling_params(
                                preferred_sampling_params, ProtocolOptions{.skip_tokenizer_init = skip_tokenizer_init})
                                .status());
    if (skip_tokenizer_init)
        notes.push_back("skip_tokenizer_init=True: string-based stop conditions (stop, stop_regex) and min_new_tokens "
                        "are unavailable.");
    // template_manager.py _load_explicit_chat_template: a built-in name, else a .jinja file, else
    // a .json conversation template (read here too, so that a bad one stops the launch before
    // the weights load).
    if (!chat_template.empty() && !tokenizer::ConversationTemplate::builtin(chat_template)) {
        const std::string flag = "--chat-template " + chat_template + ": ";
        std::error_code ec;
        if (!std::filesystem::is_regular_file(chat_template, ec))
            return invalid(flag + "not a built-in template name or a valid chat template file path; SGLang's "
                                  "built-in names are " + tokenizer::ConversationTemplate::builtin_names());
        if (chat_template.ends_with(".json"))
            TSR_RETURN_IF_ERROR(tokenizer::ConversationTemplate::load(chat_template).status());
        else if (!chat_template.ends_with(".jinja"))
            return invalid(flag + "unrecognized format of chat template file: give a .jinja file (a Jinja template) "
                                  "or a .json file (SGLang's conversation template)");
    }
    if (max_queued_requests && *max_queued_requests < 1)
        return invalid("--max-queued-requests must be at least 1, got " + str(*max_queued_requests));
    if (max_running_requests && *max_running_requests < 1)
        return invalid("--max-running-requests must be at least 1, got " + str(*max_running_requests));
    if (max_cached_tokens && *max_cached_tokens < -1)
        return invalid("--max-cached-tokens must be -1 (no cap, as SGLang) or at least 0, got " +
                       str(*max_cached_tokens));
    if (max_total_tokens && *max_total_tokens < 1)
        return invalid("--max-total-tokens must be at least 1, got " + str(*max_total_tokens));
    if (max_prefill_tokens < 1) return invalid("--max-prefill-tokens must be at least 1, got " + str(max_prefill_tokens));
    if (threads_per_rank < 0) return invalid("--threads-per-rank must be >= 0 (0 = automatic)");
    if (nnodes > 1 && dist_init_addr.empty())
        return invalid("--nnodes " + str(nnodes) + " needs --dist-init-addr HOST:PORT (the address node 0 serves "
                       "the rendezvous on)");

    // MoE (§1.3, §1.7).
    if (enable_two_batch_overlap && moe_a2a_backend == "none" && !enable_dp_attention)
        return invalid("When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), "
                       "--enable-dp-attention is required");
    if (disable_shared_experts_fusion && enforce_shared_experts_fusion)
        return invalid("--disable-shared-experts-fusion and --enforce-shared-experts-fusion are mutually exclusive");
    if (eplb_rebalance_num_iterations < 1)
        return invalid("--eplb-rebalance-num-iterations must be at least 1, got " + str(eplb_rebalance_num_iterations));
    if (eplb_rebalance_layers_per_chunk && *eplb_rebalance_layers_per_chunk < 1)
        return invalid("--eplb-rebalance-layers-per-chunk must be at least 1, got " +
                       str(*eplb_rebalance_layers_per_chunk));
    if (expert_distribution_recorder_buffer_size && *expert_distribution_recorder_buffer_size == 0)
        return invalid("--expert-distribution-recorder-buffer-size must be positive, or -1 for an unbounded buffer");
    if (enable_eplb && ep_size <= 1)
        return invalid("--enable-eplb requires --ep-size > 1 (got " + str(ep_size) + ")");
    if (expert_distribution_recorder_buffer_size && *expert_distribution_recorder_buffer_size > 0 &&
        enable_eplb && eplb_rebalance_num_iterations < *expert_distribution_recorder_buffer_size)
        return invalid("eplb_rebalance_num_iterations must be greater than expert_distribution_recorder_buffer_size: "
                       "--eplb-rebalance-num-iterations " + str(eplb_rebalance_num_iterations) +
                       " < --expert-distribution-recorder-buffer-size " +
                       str(*expert_distribution_recorder_buffer_size));
    if (eplb_min_rebalancing_utilization_threshold < 0.0 || eplb_min_rebalancing_utilization_threshold > 1.0)
        return invalid("--eplb-min-rebalancing-utilization-threshold must be in [0, 1]");
    if (moe_a2a_backend == "pplx") {
        if (deepep_mode == "normal") return invalid("moe_a2a_backend='pplx' only supports low-latency mode");
        if (!enable_dp_attention || dp_size < 2)
            return invalid("--moe-a2a-backend pplx requires --enable-dp-attention with at least 2 DP groups "
                           "(--dp-size >= 2)");
    }
    if (moe_a2a_backend == "flashinfer" && (!enable_dp_attention || dp_size != tp_size))
        return invalid("--moe-a2a-backend flashinfer requires --enable-dp-attention and --dp-size == --tp-size");
    if (one_of(moe_runner_backend, {"flashinfer_cutlass", "flashinfer_cutedsl"}) && ep_size != 1 && ep_size != tp_size)
        return invalid("The expert parallel size must be 1 or the same as the tensor parallel size (--moe-runner-backend " +
                       moe_runner_backend + ")");
    if (ep_num_redundant_experts < 0)
        return invalid("--ep-num-redundant-experts must be >= 0");
    return resolve_deterministic_inference();
}

// SGLang's server_args.py _handle_deterministic_inference: its checks of the attention
// backend (which has no effect on CPU, but a command SGLang refuses is refused here too) and
// its rewrites. tessera's kernels are batch-invariant under every backend name, so the one
// SGLang has to pick when none is given changes nothing here.
Status ServerArgs::resolve_deterministic_inference() {
    if (!enable_deterministic_inference) return Status::Ok();
    sampling_backend = "pytorch";
    notes.push_back("Sampling backend is set to pytorch for deterministic inference.");
    if (!attention_backend.empty()) {
        if (!one_of(attention_backend, {"ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton"}))
            return invalid("Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', 'triton'] attention "
                           "backends are supported for deterministic inference, but you explicitly specified '" +
                           attention_backend + "'.");
        if (!one_of(attention_backend, {"ascend", "fa3", "fa4", "triton"})) {
            disable_radix_cache = true;
            notes.push_back("Currently radix cache is not compatible with " + attention_backend +
                            " attention backend for deterministic inference. It will be supported in the future.");
        }
    }
    if (tp_size > 1)
        notes.push_back("Deterministic inference with TP size > 1: every all-reduce adds the ranks' parts in rank "
                        "order (SGLang sets NCCL_ALGO=allreduce:tree and disables custom all-reduce).");
    return Status::Ok();
}

Status ServerArgs::check_tessera_runs() const {
    if (kv_cache_dtype != "auto" && kv_cache_dtype != "bf16" && kv_cache_dtype != "bfloat16" &&
        kv_cache_dtype != "fp8_e4m3" && kv_cache_dtype != "fp8_e5m2")
        return invalid("--kv-cache-dtype " + kv_cache_dtype +
                       " is not supported: tessera stores auto (the model's dtype), bf16, fp8_e4m3 or fp8_e5m2");
    if (!quantization.empty() && quantization != "fp8")
        return invalid("--quantization " + quantization +
                       " is not supported: tessera runs fp8 (e4m3 in 128 x 128 blocks, DeepSeek-V3 / Qwen3-FP8 "
                       "checkpoints, or a bf16 checkpoint quantized at load with --quantization fp8) and unquantized "
                       "weights");
    if (!one_of(load_format, {"auto", "safetensors", "dummy"}))
        return invalid("--load-format " + load_format +
                       " is not supported: tessera reads safetensors folders (auto, safetensors) or makes random "
                       "weights from config.json (dummy); convert the checkpoint to safetensors");
    if (load_balance_method == "follow_bootstrap_room")
        return invalid("--load-balance-method follow_bootstrap_room routes prefill-decode disaggregated requests, which "
                       "tessera does not serve; use round_robin, total_requests or total_tokens");
    if (ep_dispatch_algorithm == "lp")
        return invalid("--ep-dispatch-algorithm lp (SGLang's linear-programming planner) is not implemented yet; "
                       "use static, dynamic or fake");
    if (one_of(eplb_algorithm, {"deepseek_vec", "deepseek_vec_hierarchical", "elasticity_aware"}))
        return invalid("--eplb-algorithm " + eplb_algorithm +
                       " is not implemented yet; use auto, deepseek or deepseek_hierarchical (deepseek_vec places "
                       "experts as deepseek does)");
    // The names layers::parse_moe_a2a_backend maps to a dispatcher.
    if (!one_of(moe_a2a_backend, {"none", "all_to_all", "deepep"}))
        return invalid("--moe-a2a-backend " + moe_a2a_backend +
                       " is one of SGLang's GPU backends; this build supports none (masked EP, then the TP "
                       "all-reduce), all_to_all (tokens sent only to their experts' ranks) and deepep (run as "
                       "all_to_all, the exchange DeepEP's kernels make)");
    // SGLang reads the flag alone, or a value that is no file, as a Hugging Face repository to
    // fetch the digests from.
    std::error_code ec;
    if (model_checksum && (model_checksum->empty() || !std::filesystem::is_regular_file(*model_checksum, ec)))
        return invalid("--model-checksum" + (model_checksum->empty() ? std::string() : " " + *model_checksum) +
                       ": tessera checks the model files against a local manifest file, not the Hugging Face Hub; "
                       "give the path of SGLang's checksums JSON (`tessera checksum --model-path DIR > "
                       "checksums.json` writes one)");
    return Status::Ok();
}

}  // namespace tessera::server
