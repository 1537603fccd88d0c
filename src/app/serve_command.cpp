// `tessera serve`: the OpenAI-compatible server. Every rank loads its part of the model and
// sizes the same KV pool (model_rank.h); the leader (rank 0) runs the HTTP server, the
// tokenizer and the scheduler, and drives the other ranks step by step.

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/chat_format_loader.h"
#include "app/commands.h"
#include "app/dp_front.h"
#include "app/model_rank.h"
#include "base/logging.h"
#include "front/engine.h"
#include "front/strict_thinking.h"
#include "server/http_access.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal.store(sig); }

int fail(const Status& s) {
    TSR_LOG(ERROR, "{}", s.message());
    return 1;
}

// --sampling-defaults model: generation_config.json's values for what a chat request leaves out.
void use_model_sampling_defaults(const loader::SamplingDefaults& d, server::ProtocolOptions& protocol) {
    std::string used;
    const auto take = [&](const char* name, const auto& value, auto& into) {
        if (!value) return;
        into = static_cast<std::remove_reference_t<decltype(*into)>>(*value);
        used += fmt::format("{}'{}': {}", used.empty() ? "" : ", ", name, *value);
    };
    take("temperature", d.temperature, protocol.chat_temperature);
    take("top_p", d.top_p, protocol.chat_top_p);
    take("top_k", d.top_k, protocol.chat_top_k);
    take("min_p", d.min_p, protocol.chat_min_p);
    if (!used.empty()) TSR_LOG(INFO, "Using default chat sampling params from model generation config: {{{}}}", used);
    if (d.repetition_penalty && *d.repetition_penalty != 1.0)
        TSR_LOG(WARN, "generation_config.json's repetition_penalty {} is not applied: tessera has no repetition "
                "penalty (frequency_penalty and presence_penalty are)", *d.repetition_penalty);
}

}  // namespace

int run_serve(const server::ServerArgs& args, std::optional<int> internal_rank, const std::string& internal_store) {
    auto setup = setup_model_rank(args, internal_rank, internal_store);
    if (!setup.ok()) return fail(setup.status());
    ModelRank& rank = **setup;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    if (!rank.leader()) {
        Status s = run_follower(rank);
        return s.ok() ? 0 : fail(s);
    }

    // --skip-tokenizer-init: none is loaded (SGLang's), so neither is a chat template.
    std::unique_ptr<tokenizer::Tokenizer> tok;
    tokenizer::ChatFormat chat;
    if (!args.skip_tokenizer_init) {
        auto loaded = tokenizer::Tokenizer::load(args.tokenizer_path);
        if (!loaded.ok()) return fail(loaded.status());
        tok = std::move(loaded).value();
        auto format = load_chat_format(args, *tok);
        if (!format.ok()) return fail(format.status());
        chat = std::move(format).value();
    }
    auto leader = LeaderRunner::create(rank, args);
    if (!leader.ok()) return fail(leader.status());
    const models::Model& m = *rank.model;

    front::EngineConfig ec;
    ec.served_model_name = args.served_model_name;
    ec.model_path = args.model_path;
    ec.tokenizer_path = args.tokenizer_path;
    ec.model_type = m.config().model_type;
    ec.architecture = m.config().architecture;
    ec.context_len = rank.context_len;
    ec.vocab_size = m.config().vocab_size;
    ec.eos_token_ids = m.config().eos_token_ids;
    ec.is_generation = m.config().is_generation;
    // SGLang's forward_batch_info.py get_server_return_hidden_states_mode.
    ec.return_routed_experts = args.enable_return_routed_experts;
    ec.max_hidden_states_mode = args.return_hidden_states_mode == "last" ? server::HiddenStatesMode::kLast
                                : args.return_hidden_states_mode == "full" || args.enable_return_hidden_states
                                    ? server::HiddenStatesMode::kFull
                                    : server::HiddenStatesMode::kNone;
    if (!args.reasoning_parser.empty() && tok) {
        // scheduler.py: the first token of the parser's think-end text ends a request's reasoning.
        auto format = server::reasoning_format(args.reasoning_parser);
        if (!format.ok()) return fail(format.status());
        const std::vector<std::int32_t> ids = tok->encode(format->think_end, /*add_special_tokens=*/false);
        if (!ids.empty()) ec.think_end_token_id = ids.front();
        if (args.enable_strict_thinking) {
            auto filter = front::strict_thinking_filter(*format, *tok, ec.vocab_size);
            if (!filter.ok()) return fail(filter.status());
            ec.thinking_allowed_tokens = std::move(filter).value();
            auto budget = front::default_thinking_budget();
            if (!budget.ok()) return fail(budget.status());
            ec.default_thinking_budget = *budget;
        }
    }
    for (std::int32_t id : tok ? tok->eos_token_ids() : std::vector<std::int32_t>{})
        if (std::find(ec.eos_token_ids.begin(), ec.eos_token_ids.end(), id) == ec.eos_token_ids.end())
            ec.eos_token_ids.push_back(id);
    ec.random_seed = rank.scheduler.random_seed;
    if (args.enable_deterministic_inference) ec.default_sampling_seed = 42;
    ec.scheduler = rank.scheduler;
    ec.stream_interval = static_cast<int>(args.stream_interval);
    ec.grammar_backend = args.grammar_backend != "none";
    if (args.grammar_backend == "outlines" || args.grammar_backend == "llguidance")
        TSR_LOG(INFO, "--grammar-backend {}: constrained requests are served by tessera's own regex / JSON-schema "
                "backend", args.grammar_backend);
    if (!args.constrained_json_whitespace_pattern.empty()) {
        ec.json_whitespace = {.mode = grammar::JsonWhitespace::Mode::kPattern,
                              .pattern = args.constrained_json_whitespace_pattern};
    } else if (args.constrained_json_disable_any_whitespace) {
        ec.json_whitespace.mode = grammar::JsonWhitespace::Mode::kCompact;
    }
    ec.default_priority_value = args.default_priority_value;
    ec.abort_on_priority_when_disabled = args.abort_on_priority_when_disabled;
    ec.allow_auto_truncate = args.allow_auto_truncate;
    ec.request_log = {.enabled = args.log_requests,
                      .level = args.log_requests_level,
                      .json = args.log_requests_format == "json",
                      .targets = args.log_requests_target,
                      .rank = rank.runtime.coords.global_rank};
    if (Status s = front::check_request_log_targets(ec.request_log); !s.ok()) return fail(s);
    if (!args.crash_dump_folder.empty()) {
        if (Status s = front::CrashDump::check_folder(args.crash_dump_folder); !s.ok()) return fail(s);
        ec.crash_dump_folder = args.crash_dump_folder;
        std::signal(SIGQUIT, on_signal);  // SGLang's SignalHandler: dump, then stop the job
    }
    if (args.export_metrics_to_file) {
        if (Status s = front::RequestMetricsFile::check_directory(args.export_metrics_to_file_dir); !s.ok())
            return fail(s);
        ec.export_metrics_dir = args.export_metrics_to_file_dir;
    }
    ec.scheduler_recv_interval = static_cast<int>(args.scheduler_recv_interval);
    // Checked at start-up (ServerArgs::validate).
    ec.metric_labels = server::metric_labels(args.served_model_name, args.extra_metric_labels).value();
    ec.weight_bytes = static_cast<std::int64_t>(m.weight_bytes());
    ec.kv_bytes_per_token = m.kv_cache_shape().bytes_per_token();
    if (args.expert_balancedness_report_mode == "prometheus" || args.expert_balancedness_report_mode == "both")
        ec.balancedness = rank.balancedness;
    if (m.config().moe.num_experts == 0)
        ec.expert_record_unavailable = "expert distribution recording needs a MoE model; " + m.config().architecture +
                                       " has no routed experts";
    else if (args.expert_distribution_recorder_mode.empty())
        ec.expert_record_unavailable =
            "expert distribution recording needs --expert-distribution-recorder-mode (stat, per_pass or per_token) "
            "at launch";
    // The weight update's and memory release's control steps go through the TP broadcast, down
    // the pipeline, and through the DP-attention groups' lockstep, but not both of the last two.
    if (args.enable_dp_attention && args.dp_size > 1 && args.pp_size > 1)
        ec.weight_update_unavailable =
            "/update_weights_from_disk and /release_memory_occupation with --enable-dp-attention and --pp-size > 1 "
            "are not implemented yet (the DP-attention groups' hand-off between stages does not carry them); they "
            "work with --enable-dp-attention on one stage, and with --tp-size, --pp-size, --ep-size and --dp-size "
            "replicas";
    ec.memory_saver = args.enable_memory_saver;
    ec.startup_info_json = nlohmann::json{{"tp_size", args.tp_size},
                                          {"pp_size", args.pp_size},
                                          {"dp_size", args.dp_size},
                                          {"enable_dp_attention", args.enable_dp_attention},
                                          {"enable_dp_lm_head", args.enable_dp_lm_head},
                                          {"page_size", rank.scheduler.page_size},
                                          {"chunked_prefill_size", rank.scheduler.chunked_prefill_size},
                                          {"enable_dynamic_chunking", rank.scheduler.dynamic_chunking.has_value()},
                                          {"max_prefill_tokens", rank.scheduler.max_prefill_tokens},
                                          {"max_running_requests", rank.scheduler.max_running_requests},
                                          {"pp_max_micro_batch_size", rank.scheduler.max_micro_batch_size},
                                          {"mem_fraction_static", rank.mem_fraction_static},
                                          {"schedule_policy", args.schedule_policy},
                                          {"disable_radix_cache", args.disable_radix_cache},
                                          {"radix_eviction_policy", args.radix_eviction_policy},
                                          {"prefill_decode_interval", rank.scheduler.prefill_decode_interval},
                                          {"max_cached_tokens", rank.scheduler.max_cached_tokens},
                                          {"enable_streaming_session", args.enable_streaming_session},
                                          {"enable_session_radix_cache", args.enable_session_radix_cache},
                                          {"dtype", dtype_name(m.compute_dtype())},
                                          {"is_embedding", !m.config().is_generation}}
                               .dump();
    const std::optional<tokenizer::ConversationTemplate> conversation = chat.conversation;
    front::Engine engine(ec, tok.get(), std::move(chat), (*leader)->runner());
    log_startup_line(rank);
    engine.start();

    // Under --dp-size N each replica's engine listens on a port of its own (loopback on node 0,
    // where the front runs; the address the front reaches its node at elsewhere); the front
    // (app/dp_front.h) takes --host / --port.
    const bool replicas = rank.runtime.layout.n_schedulers() > 1;
    server::HttpServerOptions ho;
    ho.host = !replicas ? args.host : rank.runtime.coords.node == 0 ? "127.0.0.1" : rank.runtime.address;
    ho.port = replicas ? 0 : args.port;
    ho.api_key = args.effective_api_key();
    ho.admin_api_key = args.admin_api_key;
    ho.allowed_hosts = args.allowed_host_list();
    if (!args.reasoning_parser.empty()) {
        auto format = server::reasoning_format(args.reasoning_parser);
        if (!format.ok()) return fail(format.status());
        ho.protocol.reasoning = std::move(format).value();
        ho.protocol.template_opens_reasoning =
            tok && !conversation && server::template_opens_reasoning(tok->chat_template());
        // serving_chat.py _apply_conversation_template: a reasoning request's conversation prompt
        // ends with "<think>", except for the parsers whose models open it themselves.
        const std::string& parser = args.reasoning_parser;
        ho.protocol.conversation_opens_think =
            conversation && parser != "qwen3" && parser != "qwen3-thinking" && parser != "glm4";
    }
    if (conversation) ho.protocol.conversation_stop = conversation->stop_str;
    ho.protocol.default_chat_template_kwargs = args.default_chat_template_kwargs;
    ho.protocol.stream_include_usage = args.stream_response_default_include_usage;
    if (args.sampling_defaults == "model") use_model_sampling_defaults(m.config().sampling_defaults, ho.protocol);
    if (!args.preferred_sampling_params.empty()) {
        auto preferred = server::parse_preferred_sampling_params(args.preferred_sampling_params, ho.protocol);
        if (!preferred.ok()) return fail(preferred.status());
        ho.protocol.preferred_sampling = std::move(preferred).value();
    }
    ho.protocol.skip_tokenizer_init = args.skip_tokenizer_init;
    if (!m.config().is_generation)
        ho.protocol.embedding = server::EmbeddingOptions{.model_path = args.model_path,
                                                         .hidden_size = m.config().hidden_size,
                                                         .is_matryoshka = m.config().is_matryoshka,
                                                         .matryoshka_dimensions = m.config().matryoshka_dimensions};
    ho.protocol.incremental_streaming_output = args.incremental_streaming_output;
    if (!args.completion_template.empty())  // checked at start-up (ServerArgs::validate), as the buckets below
        ho.protocol.completion_template = server::completion_template(args.completion_template).value();
    ho.weight_version = args.weight_version;
    ho.metric_labels = ec.metric_labels;
    ho.custom_metric_labels = {.header = args.tokenizer_metrics_custom_labels_header,
                               .allowed = args.tokenizer_metrics_allowed_custom_labels};
    ho.metric_buckets = {.time_to_first_token = args.bucket_time_to_first_token,
                         .inter_token_latency = args.bucket_inter_token_latency,
                         .e2e_request_latency = args.bucket_e2e_request_latency,
                         .prompt_tokens = server::token_histogram_buckets("", args.prompt_tokens_buckets).value(),
                         .generation_tokens =
                             server::token_histogram_buckets("", args.generation_tokens_buckets).value()};
    if (!args.tool_call_parser.empty()) {
        auto format = server::tool_call_format(args.tool_call_parser);
        if (!format.ok()) return fail(format.status());
        ho.protocol.tool_calls = std::move(format).value();
    }
    const std::string& public_host = rank.runtime.scheduler_index() == 0 ? args.host : ho.host;
    if (ho.api_key.empty() && !server::is_loopback_host(public_host))
        TSR_LOG(WARN, "listening on {} without an API key: anyone who can reach it can use it; set --api-key "
                "(or TESSERA_API_KEY)", public_host);
    server::HttpServer http(engine, ho);
    if (Status s = http.start(); !s.ok()) return fail(s);
    std::unique_ptr<gateway::Gateway> front;
    if (replicas) {
        auto started = start_dp_front(args, rank.runtime, ho.host, http.port(), tok.get());
        if (!started.ok()) return fail(started.status());
        front = std::move(started).value();
        TSR_LOG(INFO, "{} {} serving {} on http://{}:{}",
                rank.runtime.layout.attn_dp_size() > 1 ? "DP-attention group" : "DP replica",
                rank.runtime.scheduler_index(), args.served_model_name, ho.host, http.port());
    } else {
        const char* routes =
            m.config().is_generation ? "/v1/chat/completions, /v1/completions, /generate" : "/v1/embeddings, /encode";
        TSR_LOG(INFO, "serving {} on http://{}:{} (POST {})", args.served_model_name, args.host, http.port(), routes);
    }
    executor::BatchRunner& runner = (*leader)->runner();
    while (g_stop_signal.load() == 0 && engine.fatal_error().ok() && !runner.lockstep_stopping())
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_stop_signal.load() == SIGQUIT) {
        TSR_LOG(ERROR, "SIGQUIT received: writing the crash dump and stopping the job");
        if (Status s = engine.dump_requests("SIGQUIT"); !s.ok()) TSR_LOG(ERROR, "{}", s.message());
        if (front) front->stop(std::chrono::milliseconds(0));
        http.stop();
        engine.stop();
        return 1;
    }
    if (Status fatal = engine.fatal_error(); !fatal.ok()) {
        // The followers are stalled or gone: telling them to stop would wait out another
        // timeout. Exiting makes the launcher stop every rank of the job.
        if (front) front->stop(std::chrono::milliseconds(0));
        http.stop();
        engine.stop();
        TSR_LOG(ERROR, "stopping the job: {}", fatal.message());
        return 1;
    }
    if (g_stop_signal.load() != 0) {
        TSR_LOG(INFO, "signal {}: draining in-flight requests", g_stop_signal.load());
    } else {
        TSR_LOG(INFO, "another DP-attention group is stopping, and no group runs without the others: draining "
                "in-flight requests");
    }
    if (front) front->stop();
    http.stop();
    engine.stop();
    if (Status s = (*leader)->stop(); !s.ok()) TSR_LOG(WARN, "{}", s.message());
    TSR_LOG(INFO, "stopped");
    return 0;
}

}  // namespace tessera::app
