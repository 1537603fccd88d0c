#include "front/engine.h"

#include <chrono>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "base/process_memory.h"
#include "eplb/balancedness_report.h"

namespace tessera::front {

namespace {

// A token's entry; its text is "" without a tokenizer. Ids below 0 in `top` are rows that were
// not computed (the scheduler logged them) and are left out. `chosen`: the values of
// `chosen_ids` (token_ids_logprob), or none.
server::TokenLogprob token_logprob(const tokenizer::Tokenizer* tok, std::int32_t token, float logprob,
                                   std::span<const std::pair<std::int32_t, float>> top,
                                   std::span<const std::int32_t> chosen_ids, std::span<const float> chosen) {
    const auto text = [tok](std::int32_t id) { return tok ? tok->token_bytes(id) : std::string(); };
    server::TokenLogprob lp{.token = token, .text = text(token), .logprob = logprob};
    for (const auto& [id, value] : top) {
        if (id < 0) continue;
        lp.top.emplace_back(text(id), value);
        lp.top_ids.push_back(id);
    }
    for (std::size_t k = 0; k < chosen.size() && k < chosen_ids.size(); ++k) {
        lp.chosen.emplace_back(text(chosen_ids[k]), chosen[k]);
        lp.chosen_ids.push_back(chosen_ids[k]);
    }
    return lp;
}

// The prompt's entries of a request's first event (ReqEvent::has_input_logprobs): the first
// without a value.
std::vector<server::TokenLogprob> input_logprobs(const tokenizer::Tokenizer* tok, const scheduler::ReqEvent& e,
                                                 std::span<const std::int32_t> chosen_ids) {
    const std::size_t rows = e.input_logprobs.size();
    const std::size_t top = rows == 0 ? 0 : e.input_top_logprobs.size() / rows;
    const std::size_t chosen = rows == 0 ? 0 : e.input_token_ids_logprobs.size() / rows;
    std::vector<server::TokenLogprob> out;
    for (std::size_t i = 0; i < e.input_logprob_tokens.size(); ++i) {
        if (i == 0 || i - 1 >= rows) {
            out.push_back(token_logprob(tok, e.input_logprob_tokens[i], NAN, {}, {}, {}));
            continue;
        }
        out.push_back(token_logprob(tok, e.input_logprob_tokens[i], e.input_logprobs[i - 1],
                                    e.input_top_logprobs.subspan((i - 1) * top, top), chosen_ids,
                                    e.input_token_ids_logprobs.subspan((i - 1) * chosen, chosen)));
    }
    return out;
}

// SGLang's tokenizer_manager.py _validate_one_request: what the request asks against what the
// server was launched to allow.
Status check_hidden_states_mode(server::HiddenStatesMode wanted, server::HiddenStatesMode allowed) {
    if (wanted == server::HiddenStatesMode::kNone || wanted <= allowed) return Status::Ok();
    if (allowed == server::HiddenStatesMode::kNone)
        return Status::InvalidArgument(
            "The server is not configured to return hidden states. Please set `--return-hidden-states-mode last`, "
            "`--return-hidden-states-mode full`, or the legacy `--enable-return-hidden-states` flag.");
    return Status::InvalidArgument(
        "The requested return_hidden_states mode exceeds the server maximum `last`. Please launch with "
        "`--return-hidden-states-mode full` to allow return_hidden_states=True.");
}

}  // namespace

Engine::Engine(EngineConfig config, const tokenizer::Tokenizer* tokenizer,
               tokenizer::ChatFormat chat, executor::BatchRunner& runner)
    : config_(std::move(config)),
      request_log_(config_.request_log),
      metrics_file_(config_.export_metrics_dir.empty()
                        ? nullptr
                        : std::make_unique<RequestMetricsFile>(config_.export_metrics_dir)),
      crash_dump_(config_.crash_dump_folder.empty()
                      ? nullptr
                      : std::make_unique<CrashDump>(config_.crash_dump_folder, config_.startup_info_json)),
      tokenizer_(tokenizer),
      chat_(std::move(chat)),
      grammar_compiler_(tokenizer ? std::make_unique<GrammarCompiler>(*tokenizer, config_.json_whitespace) : nullptr),
      sessions_(config_.scheduler.enable_streaming_session, config_.scheduler.enable_session_radix_cache),
      runner_(runner),
      scheduler_(config_.scheduler, runner),
      seed_rng_(config_.random_seed),
      stats_(scheduler_.stats()),  // /metrics before the first step shows the empty pool
      recv_skipper_(config_.scheduler_recv_interval),
      model_path_(config_.model_path) {}

Engine::~Engine() { stop(); }

void Engine::start() {
    if (running_.exchange(true)) return;
    thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
    stop_requested_.store(true);
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    running_.store(false);
    // A weight update or memory command the loop never ran is answered (the loop thread is gone).
    const Status stopping(StatusCode::kUnavailable, "the server stopped before the weights were updated");
    for (PendingUpdate& u : std::exchange(pending_updates_, {})) u.done(stopping);
    std::deque<Command> left;
    {
        std::lock_guard<std::mutex> lock(mu_);
        left.swap(inbox_);
    }
    for (Command& c : left) {
        if (c.kind == Command::Kind::kUpdateWeights && c.done) c.done(stopping);
        if ((c.kind == Command::Kind::kReleaseMemory || c.kind == Command::Kind::kResumeMemory) && c.done)
            c.done(Status(StatusCode::kUnavailable, "the server is stopping"));
    }
}

StatusOr<std::vector<std::int32_t>> Engine::prompt_ids(const server::GenerationInput& input) const {
    if (input.input_ids) {
        for (std::int32_t id : *input.input_ids) {
            if (id < 0 || id >= vocab_size())
                return Status::InvalidArgument("input id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                               std::to_string(vocab_size()) + ")");
        }
        return *input.input_ids;
    }
    if (!tokenizer_)
        return Status::InvalidArgument("this server runs without a tokenizer (--skip-tokenizer-init): send input_ids");
    if (input.text) return tokenizer_->encode(*input.text, /*add_special_tokens=*/true);
    if (input.chat_json) {
        if (!chat_.has_template())
            return Status::InvalidArgument("this model has no chat template (tokenizer_config.json, "
                                           "chat_template.jinja); use /v1/completions with a prompt, or start the "
                                           "server with --chat-template FILE");
        nlohmann::ordered_json request;
        try {
            request = nlohmann::ordered_json::parse(*input.chat_json);
        } catch (const nlohmann::json::exception& e) {
            return Status::InvalidArgument(std::string("chat request is not valid JSON: ") + e.what());
        }
        TSR_ASSIGN_OR_RETURN(std::string text, chat_.render(request, input.continue_final_message));
        return tokenizer_->encode(text + input.chat_prompt_suffix, chat_.encode_with_special_tokens());
    }
    return Status::InvalidArgument("the request has no prompt");
}

Status Engine::submit(server::GenerationRequest request, server::EventCallback on_event) {
    if (!ready()) return Status(StatusCode::kUnavailable, "the server is not accepting requests (starting or draining)");
    TSR_ASSIGN_OR_RETURN(auto ids, prompt_ids(request.input));
    const std::optional<server::SessionParams>& session = request.params.session;
    if (session) {
        // The earlier turn's tokens, then these (their BOS dropped, as SGLang's Session does).
        std::vector<std::string> abandoned;
        const std::optional<std::int32_t> bos =
            tokenizer_ && request.input.text ? tokenizer_->bos_token_id() : std::nullopt;
        auto continued = sessions_.prompt(*session, std::move(ids), bos, abandoned, SessionStore::Clock::now());
        for (const std::string& rid : abandoned) abort(rid);
        if (!continued.ok()) return continued.status();
        ids = std::move(continued).value();
    }
    auto n_prompt = static_cast<std::int64_t>(ids.size());
    auto p = request.params;
    if (n_prompt == 0) return Status::InvalidArgument("the prompt is empty");
    if (config_.allow_auto_truncate) {
        // SGLang's tokenizer_manager.py _validate_one_request: the prompt keeps its first tokens
        // and max_tokens shrinks to fit; tessera leaves room for at least one new token.
        const std::int64_t limit = std::min(config_.context_len, scheduler_.max_req_len());
        if (n_prompt >= limit) {
            TSR_LOG(WARN, "The input ({} tokens) is longer than the model's context length ({} tokens). Truncating "
                    "the input to {} tokens.", n_prompt, limit, limit - 1);
            ids.resize(static_cast<std::size_t>(limit - 1));
            n_prompt = limit - 1;
        }
        if (p.max_new_tokens >= 0 && n_prompt + p.max_new_tokens > limit) p.max_new_tokens = limit - n_prompt;
    }
    if (!config_.is_generation) {
        // An embedding ends with its prompt (SGLang's EmbeddingReqInput: max_new_tokens 0).
        p.max_new_tokens = 0;
        if (n_prompt >= config_.context_len)
            return Status::OutOfRange("The input (" + std::to_string(n_prompt) + " tokens) is longer than the model's "
                                      "context length (" + std::to_string(config_.context_len) + " tokens).");
    } else if (p.max_new_tokens < 0) {
        // No max_tokens in a chat request: the rest of the context, as SGLang.
        p.max_new_tokens = std::min(config_.context_len, scheduler_.max_req_len()) - n_prompt;
        if (p.max_new_tokens < 1)
            return Status::OutOfRange("the prompt (" + std::to_string(n_prompt) + " tokens) leaves no room to generate "
                                      "in the context length of " + std::to_string(config_.context_len) + " tokens");
    }
    if (n_prompt + p.max_new_tokens > config_.context_len) {
        return Status::OutOfRange("the prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                  std::to_string(p.max_new_tokens) + ") exceeds the context length of " +
                                  std::to_string(config_.context_len) + " tokens");
    }
    if (n_prompt + p.max_new_tokens > scheduler_.max_req_len()) {
        return Status::OutOfRange("the prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                  std::to_string(p.max_new_tokens) + ") exceeds the KV pool of this server (" +
                                  std::to_string(scheduler_.max_req_len()) + " tokens per request)");
    }
    scheduler::Req req;
    req.rid = request.request_id;
    req.input_ids = std::move(ids);
    req.max_new_tokens = p.max_new_tokens;
    req.stop_token_ids = p.stop_token_ids;
    req.eos_token_ids = config_.eos_token_ids;
    req.ignore_eos = p.ignore_eos;
    if (p.require_reasoning) req.think_end_id = config_.think_end_token_id;
    if (p.require_reasoning && req.think_end_id && config_.thinking_allowed_tokens) {
        req.thinking_allowed = config_.thinking_allowed_tokens;
        req.thinking_budget = p.thinking_budget.value_or(config_.default_thinking_budget);
    }
    req.sampling.params = {p.temperature, p.top_k, p.top_p, p.min_p, 0};
    req.sampling.frequency_penalty = p.frequency_penalty;
    req.sampling.presence_penalty = p.presence_penalty;
    req.sampling.logprobs = p.logprobs || p.top_logprobs > 0;
    req.sampling.top_logprobs = p.top_logprobs;
    if (p.logprobs || p.top_logprobs > 0) {
        // scheduler.py handle_generate_request's check, refused before the request is queued.
        if (p.logprob_start_len > n_prompt)
            return Status::InvalidArgument(fmt::format("logprob_start_len={} is higher than the number of input "
                                                       "tokens {}. Please use a smaller logprob_start_len.",
                                                       p.logprob_start_len, n_prompt));
        req.logprob_start_len = p.logprob_start_len;
        req.input_top_logprobs = p.top_logprobs;
        // tokenizer_manager.py _validate_token_ids_logprob.
        for (std::int32_t id : p.token_ids_logprob) {
            if (id < 0 || id >= vocab_size())
                return Status::InvalidArgument(fmt::format("token_ids_logprob contains an out-of-vocabulary token id "
                                                           "{}; the vocabulary is [0, {})", id, vocab_size()));
        }
        req.logprob_token_ids = p.token_ids_logprob;
    }
    TSR_RETURN_IF_ERROR(check_hidden_states_mode(p.return_hidden_states, config_.max_hidden_states_mode));
    if (p.return_routed_experts && (p.routed_experts_start_len < 0 || p.routed_experts_start_len > n_prompt))
        return Status::InvalidArgument("routed_experts_start_len (" + std::to_string(p.routed_experts_start_len) +
                                       ") must be in [0, " + std::to_string(n_prompt) + "], the prompt's tokens");
    req.return_routed_experts = p.return_routed_experts && config_.return_routed_experts;
    req.routed_experts_start_len = p.routed_experts_start_len;
    using server::HiddenStatesMode;
    req.sampling.hidden_states = p.return_hidden_states == HiddenStatesMode::kFull ? executor::HiddenCapture::kFirstPass
                                 : p.return_hidden_states == HiddenStatesMode::kLast ? executor::HiddenCapture::kLast
                                                                                     : executor::HiddenCapture::kNone;
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= vocab_size())
            return Status::InvalidArgument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                           std::to_string(vocab_size()) + ")");
    }
    req.sampling.logit_bias = p.logit_bias;
    if (p.constraint) {
        if (!config_.is_generation)
            return Status::InvalidArgument("regex, json_schema and ebnf constrain generated text; this server "
                                           "serves embeddings");
        if (!config_.grammar_backend) {
            return Status::InvalidArgument("Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not "
                                           "supported when the server is launched with --grammar-backend none");
        }
        if (!grammar_compiler_) {
            return Status::InvalidArgument("regex, json_schema and ebnf need the tokenizer, which "
                                           "--skip-tokenizer-init leaves out");
        }
        std::vector<std::int32_t> stops = req.eos_token_ids;
        stops.insert(stops.end(), req.stop_token_ids.begin(), req.stop_token_ids.end());
        TSR_ASSIGN_OR_RETURN(req.constraint, grammar_compiler_->constraint(*p.constraint, std::move(stops)));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.count(req.rid) != 0) return Status::InvalidArgument("request id " + req.rid + " is already running");
    req.sampling.params.seed = p.seed                          ? *p.seed
                               : config_.default_sampling_seed ? *config_.default_sampling_seed
                                                               : seed_rng_();
    // SGLang's scheduler.py _set_or_validate_priority.
    const scheduler::SchedulerConfig& sc = config_.scheduler;
    if (sc.enable_priority_scheduling) {
        req.priority = p.priority ? *p.priority
                                  : config_.default_priority_value.value_or(
                                        scheduler::PriorityOrder{sc.schedule_low_priority_values_first}.worst());
    } else if (p.priority && config_.abort_on_priority_when_disabled) {
        return Status(StatusCode::kUnavailable,
                      "Using priority is disabled for this server. Please send a new request without a priority.");
    } else {
        req.priority = p.priority.value_or(0);  // read by --schedule-policy priority only
    }
    // The last refusal: from here the request runs, and its end, whatever it is, reaches the session.
    if (session) TSR_RETURN_IF_ERROR(sessions_.add(*session, req.rid, req.input_ids, req.max_new_tokens));
    if (session && sessions_.is_streaming(session->id)) {
        req.streaming_session = session->id;
    } else if (session && config_.scheduler.enable_session_radix_cache) {
        req.radix_session = session->id;
    }
    // The output stream is created on the scheduler thread when the request arrives there.
    pending_[req.rid] = std::move(on_event);
    // SGLang's exporter leaves out its health checks.
    const bool exported = metrics_file_ && !req.rid.starts_with("HEALTH_CHECK_");
    std::string parameters =
        exported || crash_dump_ ? RequestMetricsFile::parameters_json(req.rid, request.input, p) : "";
    if (crash_dump_) crash_dump_->received(req.rid, parameters);
    stream_params_[req.rid] = {p.skip_special_tokens, p.stop, p.logprobs || p.top_logprobs > 0,
                               p.return_hidden_states, p.return_routed_experts && config_.return_routed_experts,
                               p.stream_interval > 0 ? p.stream_interval : config_.stream_interval, std::nullopt, {},
                               exported ? std::move(parameters) : "", std::chrono::steady_clock::now()};
    if (p.logprobs || p.top_logprobs > 0) stream_params_[req.rid].logprob_token_ids = p.token_ids_logprob;
    if (session) stream_params_[req.rid].session = session->id;
    if (p.echo) {
        // serving_completions.py: a text prompt as given, token ids as the tokenizer decodes them.
        stream_params_[req.rid].echo = request.input.text ? *request.input.text
                                       : tokenizer_       ? tokenizer_->decode(req.input_ids, false)
                                                          : std::string();
    }
    request_log_.received(request.request_id, request.input, p, n_prompt);
    Command c{Command::Kind::kAdd, std::move(req), {}};
    inbox_.push_back(std::move(c));
    cv_.notify_all();
    return Status::Ok();
}

void Engine::abort(const std::string& request_id) { push({Command::Kind::kAbort, {}, request_id}); }

void Engine::abort_prefixed(const std::string& prefix) { push({Command::Kind::kAbortPrefixed, {}, prefix}); }

StatusOr<std::vector<std::int32_t>> Engine::tokenize(const std::string& text, bool add_special_tokens) const {
    if (!tokenizer_) return Status::InvalidArgument("this server runs without a tokenizer (--skip-tokenizer-init)");
    return tokenizer_->encode(text, add_special_tokens);
}

StatusOr<std::string> Engine::detokenize(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
    if (!tokenizer_) return Status::InvalidArgument("this server runs without a tokenizer (--skip-tokenizer-init)");
    for (const std::int32_t id : ids)
        if (id < 0 || id >= vocab_size())
            return Status::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                           std::to_string(vocab_size()) + ")");
    return tokenizer_->decode(ids, skip_special_tokens);
}

StatusOr<std::string> Engine::open_session(const server::OpenSessionParams& params) {
    // Random as uuid4().hex (not from --random-seed): a session id is what lets a client
    // continue another's conversation.
    std::random_device random;
    std::string id;
    for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", random());
    return sessions_.open(params, std::move(id), SessionStore::Clock::now());
}

void Engine::close_session(const std::string& session_id) {
    sessions_.close(session_id);
    // Wakes the loop, which releases the KV the scheduler keeps for the session.
    if (keeps_session_kv()) push({Command::Kind::kSessionClosed, {}, {}});
}

void Engine::push(Command command) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        inbox_.push_back(std::move(command));
    }
    cv_.notify_all();
}

Status Engine::flush_cache() {
    std::unique_lock<std::mutex> lock(mu_);
    flush_result_.reset();
    inbox_.push_back({Command::Kind::kFlush, {}, {}});
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return flush_result_.has_value(); });
    if (!flush_result_ || !*flush_result_)
        return Status(StatusCode::kUnavailable, "cannot flush the cache while requests are running");
    return Status::Ok();
}

Status Engine::expert_record(ExpertRecordAction action) {
    if (!config_.expert_record_unavailable.empty()) return Status::InvalidArgument(config_.expert_record_unavailable);
    const eplb::ExpertRecordCommand command = action == ExpertRecordAction::kStart  ? eplb::ExpertRecordCommand::kStart
                                              : action == ExpertRecordAction::kStop ? eplb::ExpertRecordCommand::kStop
                                                                                    : eplb::ExpertRecordCommand::kDump;
    return control({Command::Kind::kExpertRecord, {}, {}, command}, std::chrono::seconds(60),
                   "the expert distribution command");
}

Status Engine::pause_generation(PauseMode mode) {
    return control({.kind = Command::Kind::kPause, .pause = mode}, std::chrono::seconds(60), "pause_generation");
}

Status Engine::continue_generation() {
    return control({.kind = Command::Kind::kContinue}, std::chrono::seconds(60), "continue_generation");
}

void Engine::push_weights_command(Command command) {
    if (!config_.weight_update_unavailable.empty())
        return command.done(Status::InvalidArgument(config_.weight_update_unavailable));
    if (!running_.load() || stop_requested_.load())
        return command.done(Status(StatusCode::kUnavailable, "the server is stopping"));
    push(std::move(command));
}

void Engine::update_weights_from_disk(const WeightUpdate& update, std::function<void(Status)> done) {
    // It waits for the running requests, as SGLang's model_update_lock, with no time limit.
    push_weights_command({.kind = Command::Kind::kUpdateWeights, .update = update, .done = std::move(done)});
}

void Engine::release_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) {
    push_weights_command({.kind = Command::Kind::kReleaseMemory, .regions = regions, .done = std::move(done)});
}

void Engine::resume_memory_occupation(const MemoryRegions& regions, std::function<void(Status)> done) {
    push_weights_command({.kind = Command::Kind::kResumeMemory, .regions = regions, .done = std::move(done)});
}

Status Engine::release_memory(const MemoryRegions& regions) {
    const models::MemoryRelease release{.weights = regions.weights && config_.memory_saver,
                                        .kv_cache = regions.kv_cache && config_.memory_saver};
    // Without the saver SGLang's adapter releases nothing; its release still asserts an idle
    // server and flushes the cache for the KV tag.
    TSR_RETURN_IF_ERROR(scheduler_.run_memory_release(release, /*drop_cache=*/regions.kv_cache));
    if (!config_.memory_saver) {
        TSR_LOG(INFO, "release_memory_occupation: {}nothing released: start with --enable-memory-saver to give "
                      "memory back",
                regions.kv_cache ? "prefix cache flushed; " : "");
        return Status::Ok();
    }
    released_.weights = released_.weights || release.weights;
    released_.kv_cache = released_.kv_cache || release.kv_cache;
    hold_admission_while_needed();
    TSR_LOG(INFO, "release_memory_occupation: released {}; new requests wait for /resume_memory_occupation",
            release.weights && release.kv_cache ? "the weights and the KV cache"
            : release.weights                   ? "the weights"
            : release.kv_cache                  ? "the KV cache"
                                                : "nothing (no weights or kv_cache tag)");
    return Status::Ok();
}

Status Engine::resume_memory(const MemoryRegions& regions) {
    if (!(regions.weights && released_.weights) && !(regions.kv_cache && released_.kv_cache))
        TSR_LOG(INFO, "resume_memory_occupation: nothing of that is released");
    if (regions.weights && released_.weights) {
        std::string path;
        {
            std::lock_guard<std::mutex> lock(mu_);
            path = model_path_;
        }
        // The served folder's weights again (SGLang restores its CPU backup, or leaves the
        // memory for an update to fill).
        const Status s = scheduler_.run_weight_update({.model_path = path});
        if (!s.ok()) {
            return Status(s.code(), "resume_memory_occupation could not load the weights of " + path + " again: " +
                                        s.message() + "; they stay released");
        }
        released_.weights = false;
        TSR_LOG(INFO, "resume_memory_occupation: the weights of {} loaded again", path);
    }
    if (regions.kv_cache && released_.kv_cache) {
        released_.kv_cache = false;  // its pages come back as steps write them
        TSR_LOG(INFO, "resume_memory_occupation: the KV cache is back");
    }
    hold_admission_while_needed();
    return Status::Ok();
}

Status Engine::configure_logging(const LoggingChange& change) {
    request_log_.configure(change.log_requests, change.log_requests_level, change.log_requests_json);
    // This process's level; the other ranks' processes keep theirs.
    if (change.log_level) logging::set_min_level(*change.log_level);
    TSR_LOG(INFO, "configure_logging: request logging {} (level {}, {}){}", request_log_.on() ? "on" : "off",
            change.log_requests_level ? std::to_string(*change.log_requests_level) : std::string("unchanged"),
            change.log_requests_json ? (*change.log_requests_json ? "json" : "text") : "format unchanged",
            change.log_level ? "; log level changed" : "");
    return Status::Ok();
}

void Engine::hold_admission_while_needed() {
    scheduler_.hold_admission(!pending_updates_.empty() || released_.weights || released_.kv_cache);
}

void Engine::update_weights() {
    const WeightUpdate update = std::move(pending_updates_.front().update);
    const std::function<void(Status)> done = std::move(pending_updates_.front().done);
    pending_updates_.pop_front();
    Status s = scheduler_.run_weight_update({.model_path = update.model_path, .load_format = update.load_format});
    // model_runner.py update_weights_from_disk's message; here the old weights were never touched.
    if (!s.ok())
        s = Status(s.code(), "Failed to update weights: " + s.message() + ".\nRolling back to original weights.");
    if (s.ok()) {
        const bool flushed = update.flush_cache && scheduler_.drop_cache_after_weight_update();
        TSR_LOG(INFO, "update_weights_from_disk: serving the weights of {}{}", update.model_path,
                flushed ? "; prefix cache flushed" : "");
    } else {
        TSR_LOG(ERROR, "update_weights_from_disk: {}", s.message());
    }
    if (s.ok()) released_.weights = false;  // loaded, also if they had been released
    hold_admission_while_needed();
    if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        model_path_ = update.model_path;
    }
    done(std::move(s));
}

void Engine::run_ready_weight_updates() {
    while (!pending_updates_.empty() && (scheduler_.paused() || scheduler_.nothing_running())) update_weights();
}

Status Engine::control(Command command, std::chrono::seconds timeout, std::string_view what) {
    std::lock_guard<std::mutex> one_at_a_time(control_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    control_result_.reset();
    inbox_.push_back(std::move(command));
    cv_.notify_all();
    if (!cv_.wait_for(lock, timeout, [this] { return control_result_.has_value(); }))
        return Status(StatusCode::kUnavailable, fmt::format("{} did not complete within {} s", what, timeout.count()));
    return *control_result_;
}

void Engine::drain() {
    draining_.store(true);
    std::unique_lock<std::mutex> lock(mu_);
    // A paused engine would hold its queued requests for ever: draining continues it.
    if (paused_) {
        TSR_LOG(INFO, "draining: generation was paused; continuing it so the queued requests finish");
        inbox_.push_back({.kind = Command::Kind::kContinue});
        cv_.notify_all();
    }
    cv_.wait(lock, [this] { return (idle_ && inbox_.empty()) || stop_requested_.load(); });
}

void Engine::loop() {
    while (!stop_requested_.load()) {
        std::deque<Command> commands;
        {
            std::unique_lock<std::mutex> lock(mu_);
            // A paused scheduler with requests waits for a command, not for them.
            const auto ready = [this] { return stop_requested_.load() || !inbox_.empty() || (!idle_ && !paused_); };
            // A lockstep runner joins the other DP-attention groups' steps even with nothing
            // to run: at once while they have work, else after a short wait for requests.
            if (!runner_.lockstep()) {
                // Sessions that time out while nothing runs release their KV within a second.
                if (keeps_session_kv()) {
                    cv_.wait_for(lock, std::chrono::seconds(1), ready);
                } else {
                    cv_.wait(lock, ready);
                }
            } else if (!peers_busy_) {
                // Idle everywhere: wait 1, 2, 4, then 8 ms between rounds, so an idle launch
                // costs little CPU and a new request waits at most that long for the others.
                cv_.wait_for(lock, std::chrono::milliseconds(1 << std::min(idle_rounds_, 3)), ready);
            }
            if (recv_skipper_.should_receive(last_step_)) commands.swap(inbox_);
        }
        for (auto& c : commands) {
            switch (c.kind) {
                case Command::Kind::kAdd: {
                    const std::string rid = c.req.rid;
                    server::EventCallback cb;
                    StreamParams sp;
                    {
                        std::lock_guard<std::mutex> lock(mu_);
                        cb = std::move(pending_[rid]);
                        sp = stream_params_[rid];
                        stream_params_.erase(rid);
                    }
                    std::optional<tokenizer::OutputStream> output;
                    if (tokenizer_) output.emplace(*tokenizer_, sp.skip_special_tokens, sp.stop);
                    streams_.emplace(rid, Stream{.on_event = std::move(cb),
                                                 .output = std::move(output),
                                                 .logprobs = sp.logprobs,
                                                 .hidden_states = sp.hidden_states,
                                                 .routed_experts = sp.routed_experts
                                                                       ? std::make_optional<std::vector<std::int32_t>>()
                                                                       : std::nullopt,
                                                 .interval = sp.interval,
                                                 .echo = std::move(sp.echo),
                                                 .logprob_token_ids = std::move(sp.logprob_token_ids),
                                                 .exported_parameters = std::move(sp.exported_parameters),
                                                 .received_at = sp.received_at,
                                                 .session = std::move(sp.session)});
                    c.req.sink = [this](const scheduler::ReqEvent& e) { on_req_event(e); };
                    // A turn of a session closed since it was submitted keeps nothing for it.
                    if (!c.req.streaming_session.empty() && !sessions_.is_open(c.req.streaming_session))
                        c.req.streaming_session.clear();
                    if (!c.req.radix_session.empty() && !sessions_.is_open(c.req.radix_session))
                        c.req.radix_session.clear();
                    Status s = scheduler_.add_request(std::move(c.req));
                    if (!s.ok()) {
                        server::GenerationEvent ev;
                        ev.error = s;
                        auto it = streams_.find(rid);
                        if (it != streams_.end()) {
                            if (it->second.session) sessions_.end(*it->second.session, rid, {}, /*finished=*/false);
                            if (crash_dump_) crash_dump_->on_event(rid, ev);
                            it->second.on_event(std::move(ev));
                            streams_.erase(it);
                        }
                        std::lock_guard<std::mutex> lock(mu_);
                        pending_.erase(rid);
                    }
                    break;
                }
                case Command::Kind::kAbort:
                    scheduler_.abort(c.rid);
                    break;
                case Command::Kind::kAbortPrefixed: {
                    const int n = scheduler_.abort_prefixed(c.rid);
                    TSR_LOG(INFO, "abort_request: {} request(s) {}", n,
                            c.rid.empty() ? std::string("(all)") : "with ids starting " + c.rid);
                    break;
                }
                case Command::Kind::kSessionClosed:  // released below
                    break;
                case Command::Kind::kFlush: {
                    const bool ok = scheduler_.flush_cache();
                    std::lock_guard<std::mutex> lock(mu_);
                    flush_result_ = ok;
                    break;
                }
                case Command::Kind::kExpertRecord: {
                    Status s = released_.weights ? Status::InvalidArgument(
                                                       "the weights are released: /resume_memory_occupation first")
                                                 : scheduler_.run_expert_record(c.record);
                    std::lock_guard<std::mutex> lock(mu_);
                    control_result_ = std::move(s);
                    break;
                }
                case Command::Kind::kPause: {
                    // SGLang's abort mode ends every request in the tokenizer manager and holds new
                    // ones there; here they wait in the paused scheduler's queue.
                    const int aborted = c.pause == PauseMode::kAbort ? scheduler_.abort_prefixed("") : 0;
                    scheduler_.pause(c.pause == PauseMode::kRetract);
                    TSR_LOG(INFO, "pause_generation (mode {}): no step runs until /continue_generation{}",
                            c.pause == PauseMode::kAbort     ? "abort"
                            : c.pause == PauseMode::kRetract ? "retract"
                                                             : "in_place",
                            c.pause == PauseMode::kAbort ? fmt::format("; {} request(s) aborted", aborted) : "");
                    std::lock_guard<std::mutex> lock(mu_);
                    paused_ = true;
                    control_result_ = Status::Ok();
                    break;
                }
                case Command::Kind::kUpdateWeights: {
                    // tokenizer_manager.py update_weights_from_disk: abort_all_requests first.
                    if (c.update.abort_all_requests) scheduler_.abort_prefixed("");
                    pending_updates_.push_back({std::move(c.update), std::move(c.done)});
                    hold_admission_while_needed();
                    if (!scheduler_.paused() && !scheduler_.nothing_running())
                        TSR_LOG(INFO, "update_weights_from_disk: waiting for the running requests to finish; "
                                      "new ones wait until the weights are updated");
                    break;
                }
                case Command::Kind::kReleaseMemory:
                case Command::Kind::kResumeMemory: {
                    // After the weight updates sent before it that can run now.
                    run_ready_weight_updates();
                    Status s = c.kind == Command::Kind::kReleaseMemory ? release_memory(c.regions)
                                                                        : resume_memory(c.regions);
                    if (!s.ok()) TSR_LOG(ERROR, "{}", s.message());
                    c.done(std::move(s));
                    break;
                }
                case Command::Kind::kContinue: {
                    scheduler_.resume();
                    TSR_LOG(INFO, "continue_generation: steps run again");
                    std::lock_guard<std::mutex> lock(mu_);
                    paused_ = false;
                    control_result_ = Status::Ok();
                    break;
                }
            }
        }
        if (keeps_session_kv()) {
            for (const std::string& id : sessions_.take_closed(SessionStore::Clock::now()))
                scheduler_.release_session(id);
        }
        run_ready_weight_updates();
        const std::int64_t rounds = runner_.rounds();
        last_step_ = scheduler_.step();
        peers_busy_ = false;
        if (runner_.lockstep() && runner_.rounds() == rounds) {
            auto busy = runner_.idle_step();
            if (!busy.ok() && runner_.fatal_error().ok()) TSR_LOG(WARN, "idle DP-attention step: {}", busy.status().message());
            peers_busy_ = busy.ok() && *busy;
            idle_rounds_ = peers_busy_ ? 0 : idle_rounds_ + 1;
        } else {
            idle_rounds_ = 0;
        }
        if (!runner_.fatal_error().ok()) {
            fail_everything(runner_.fatal_error());
            return;
        }
        for (const auto& rid : stop_matched_) scheduler_.abort(rid);
        stop_matched_.clear();
        {
            std::lock_guard<std::mutex> lock(mu_);
            stats_ = scheduler_.stats();
            idle_ = scheduler_.idle();
        }
        cv_.notify_all();
    }
}

Status Engine::dump_requests(std::string_view why) {
    if (!crash_dump_) return Status::Ok();
    return crash_dump_->write(why).status();
}

void Engine::fail_everything(const Status& why) {
    const Status error(StatusCode::kUnavailable, "the server is stopping: its ranks cannot run steps together any "
                                                 "more (" + why.message() + ")");
    TSR_LOG(ERROR, "{}", error.message());
    if (Status s = dump_requests(error.message()); !s.ok()) TSR_LOG(ERROR, "{}", s.message());
    draining_.store(true);
    std::unordered_map<std::string, server::EventCallback> queued;
    {
        std::lock_guard<std::mutex> lock(mu_);
        fatal_ = why;
        queued.swap(pending_);  // requests still in the inbox have their callback here
        inbox_.clear();
        idle_ = true;
    }
    for (auto& [rid, stream] : streams_) {
        queued.erase(rid);  // moved into the stream already
        if (stream.done) continue;
        server::GenerationEvent ev;
        ev.error = error;
        stream.on_event(std::move(ev));
    }
    streams_.clear();
    for (auto& [rid, on_event] : queued) {
        if (!on_event) continue;
        server::GenerationEvent ev;
        ev.error = error;
        on_event(std::move(ev));
    }
    cv_.notify_all();
}

Status Engine::fatal_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fatal_;
}

void Engine::on_req_event(const scheduler::ReqEvent& e) {
    auto it = streams_.find(std::string(e.rid));
    if (it == streams_.end()) return;
    Stream& stream = it->second;
    if (stream.done) {
        if (e.finished) streams_.erase(it);
        return;
    }
    server::GenerationEvent ev;
    ev.usage = {e.prompt_tokens, e.completion_tokens, e.cached_tokens, e.reasoning_tokens};
    if (e.has_input_logprobs) ev.input_logprobs = input_logprobs(tokenizer_, e, stream.logprob_token_ids);
    ev.prompt_text = std::exchange(stream.echo, std::nullopt);
    if (e.unsampled && stream.logprobs)
        ev.unsampled_logprobs = token_logprob(tokenizer_, e.unsampled->token, e.unsampled->logprob,
                                              e.unsampled->top_logprobs, stream.logprob_token_ids,
                                              e.unsampled->token_ids_logprobs);
    if (e.token && !e.token->embedding.empty()) {
        ev.embedding = e.token->embedding;
    } else if (e.token) {
        ev.token_ids.push_back(e.token->token);
        if (stream.session) stream.output_ids.push_back(e.token->token);
        if (stream.logprobs)
            ev.logprobs.push_back(token_logprob(tokenizer_, e.token->token, e.token->logprob, e.token->top_logprobs,
                                                stream.logprob_token_ids, e.token->token_ids_logprobs));
        if (e.token->hidden_rows > 0) {
            const bool prompt = stream.hidden_states == server::HiddenStatesMode::kFull && e.completion_tokens == 1;
            ev.hidden_states.push_back({e.token->hidden_states, e.token->hidden_rows, prompt});
        }
        auto delta = stream.output ? stream.output->add(e.token->token) : tokenizer::OutputStream::Delta{};
        ev.text = std::move(delta.text);
        if (delta.matched_stop) {
            // A stop string ended the output: report "stop" now and end the request after the step.
            ev.finish_reason = "stop";
            ev.matched_stop = delta.matched_stop;
            stream.done = true;
            if (!e.finished) stop_matched_.emplace_back(e.rid);
        }
    }
    if (e.finished && !stream.done) {
        if (stream.output) ev.text += stream.output->finish();
        ev.finish_reason = std::string(scheduler::finish_reason_name(e.finish_reason));
        if (!e.error.empty()) ev.error = Status(StatusCode::kResourceExhausted, std::string(e.error));
        stream.done = true;
    }
    const bool last = stream.done;
    if (last && stream.session) {
        // The turn joins its session when it ended well; an aborted or failed one leaves it.
        const bool finished = ev.finish_reason && *ev.finish_reason != "abort" && !ev.error;
        sessions_.end(*std::exchange(stream.session, std::nullopt), std::string(e.rid), std::move(stream.output_ids),
                      finished);
    }
    if (stream.routed_experts) {
        stream.routed_experts->insert(stream.routed_experts->end(), e.routed_experts.begin(), e.routed_experts.end());
        if (last) ev.routed_experts = std::exchange(stream.routed_experts, std::nullopt);
    }
    if (stream.interval > 1) {
        // Gathered until the token that opens the next chunk, or the end.
        if (e.token) ++stream.tokens;
        server::GenerationEvent& held = stream.held;
        held.text += ev.text;
        held.token_ids.insert(held.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
        for (auto& lp : ev.logprobs) held.logprobs.push_back(std::move(lp));
        if (ev.unsampled_logprobs) held.unsampled_logprobs = std::move(ev.unsampled_logprobs);
        if (ev.input_logprobs) held.input_logprobs = std::move(ev.input_logprobs);
        if (ev.prompt_text) held.prompt_text = std::move(ev.prompt_text);
        for (auto& h : ev.hidden_states) held.hidden_states.push_back(std::move(h));
        if (ev.routed_experts) held.routed_experts = std::move(ev.routed_experts);
        held.usage = ev.usage;
        if (!ev.embedding.empty()) held.embedding = std::move(ev.embedding);
        held.finish_reason = std::move(ev.finish_reason);
        held.matched_stop = std::move(ev.matched_stop);
        held.error = std::move(ev.error);
        if (!last && stream.tokens % stream.interval != 1) return;
        ev = std::exchange(held, {});
    }
    if (request_log_.on()) {
        // One character past what the log shows, so that it knows the output was cut.
        const std::size_t room = request_log_.output_chars() == std::string::npos
                                     ? std::string::npos
                                     : request_log_.output_chars() + 1 - std::min(stream.logged_output.size(),
                                                                                   request_log_.output_chars() + 1);
        stream.logged_output.append(ev.text, 0, room);
        if (last)
            request_log_.finished(e.rid, ev.finish_reason.value_or("abort"), ev.usage, stream.logged_output);
    }
    if (last && !stream.exported_parameters.empty()) {
        const std::chrono::duration<double> e2e = std::chrono::steady_clock::now() - stream.received_at;
        metrics_file_->write(stream.exported_parameters, {.rid = e.rid,
                                                          .finish_reason = ev.finish_reason.value_or("abort"),
                                                          .matched_stop = ev.matched_stop,
                                                          .usage = ev.usage,
                                                          .e2e_latency_s = e2e.count()});
    }
    if (crash_dump_) crash_dump_->on_event(e.rid, ev);
    stream.on_event(std::move(ev));
    if (last) {
        if (e.finished) streams_.erase(it);
        std::lock_guard<std::mutex> lock(mu_);
        pending_.erase(std::string(e.rid));
    }
}

nlohmann::json Engine::server_info() const {
    scheduler::SchedulerStats s;
    {
        std::lock_guard<std::mutex> lock(mu_);
        s = stats_;
    }
    nlohmann::json info = nlohmann::json::parse(config_.startup_info_json, nullptr, false);
    if (!info.is_object()) info = nlohmann::json::object();
    info["model_path"] = config_.model_path;
    info["tokenizer_path"] = config_.tokenizer_path;
    info["served_model_name"] = config_.served_model_name;
    info["context_len"] = config_.context_len;
    info["max_total_num_tokens"] = s.max_total_num_tokens;
    info["internal_states"] = {{{"max_total_num_tokens", s.max_total_num_tokens},
                                {"num_running_reqs", s.num_running_reqs},
                                {"num_queue_reqs", s.num_queue_reqs},
                                {"num_used_tokens", s.num_used_tokens},
                                {"kv_available_tokens", s.available_tokens},
                                {"kv_evictable_tokens", s.evictable_tokens},
                                {"token_usage", s.token_usage},
                                {"cache_hit_rate", s.cache_hit_rate},
                                {"last_gen_throughput", s.gen_throughput},
                                {"new_token_ratio", s.new_token_ratio},
                                {"num_retractions", s.total_retracted_reqs}}};
    return info;
}

nlohmann::json Engine::model_info() const {
    std::string model_path;
    {
        std::lock_guard<std::mutex> lock(mu_);
        model_path = model_path_;
    }
    return {{"model_path", model_path},
            {"tokenizer_path", config_.tokenizer_path},
            {"is_generation", config_.is_generation},
            {"model_type", config_.model_type},
            {"architectures", {config_.architecture}},
            {"has_image_understanding", false},
            {"has_audio_understanding", false}};
}

std::string Engine::metrics_text() const {
    scheduler::SchedulerStats s;
    {
        std::lock_guard<std::mutex> lock(mu_);
        s = stats_;
    }
    const std::string label = "{" + config_.metric_labels + "}";
    std::string out;
    auto gauge = [&](const char* name, const char* help, double value) {
        out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{} {}\n", name, help, name, name, label, value);
    };
    gauge("sglang:num_running_reqs", "Running requests.", static_cast<double>(s.num_running_reqs));
    gauge("sglang:num_queue_reqs", "Waiting requests.", static_cast<double>(s.num_queue_reqs));
    gauge("sglang:num_used_tokens", "KV slots in use.", static_cast<double>(s.num_used_tokens));
    gauge("sglang:kv_available_tokens", "Free KV slots.", static_cast<double>(s.available_tokens));
    gauge("sglang:kv_evictable_tokens", "KV slots held only by the prefix cache.", static_cast<double>(s.evictable_tokens));
    gauge("sglang:kv_used_tokens", "KV slots in use.", static_cast<double>(s.num_used_tokens));
    gauge("sglang:token_usage", "Fraction of the KV pool in use.", s.token_usage);
    gauge("sglang:cache_hit_rate", "Prefix cache hit rate of the last prefill batch.", s.cache_hit_rate);
    gauge("sglang:gen_throughput", "Generation throughput (token/s).", s.gen_throughput);
    gauge("sglang:new_token_ratio", "Admission estimate of new tokens per request.", s.new_token_ratio);
    const ProcessMemory mem = process_memory();
    const auto kv_bytes = [&](std::int64_t tokens) { return static_cast<double>(tokens * config_.kv_bytes_per_token); };
    gauge("process_resident_memory_bytes", "Resident memory of the HTTP rank's process (VmRSS).",
          static_cast<double>(mem.resident_bytes));
    gauge("tessera:peak_resident_memory_bytes", "The most that process has been resident since start (VmHWM).",
          static_cast<double>(mem.peak_resident_bytes));
    gauge("tessera:weight_bytes", "Weights held by this rank.", static_cast<double>(config_.weight_bytes));
    gauge("tessera:kv_running_bytes", "KV of the tokens running requests hold.", kv_bytes(s.num_used_tokens));
    gauge("tessera:kv_cached_bytes", "KV the prefix cache keeps for reuse (--max-cached-tokens caps it).",
          kv_bytes(s.evictable_tokens));
    gauge("tessera:kv_touched_bytes", "KV pool pages ever written: the pool's share of the resident memory.",
          kv_bytes(s.touched_tokens));
    gauge("tessera:kv_pool_bytes", "The KV pool's full size (reserved address space, resident only once used).",
          kv_bytes(s.max_total_num_tokens));
    if (config_.scheduler.enable_streaming_session) {
        gauge("sglang:num_streaming_sessions", "Streaming sessions holding KV between turns.",
              static_cast<double>(s.num_streaming_sessions));
        gauge("sglang:streaming_session_held_tokens", "KV slots streaming sessions hold between turns.",
              static_cast<double>(s.streaming_session_held_tokens));
    }
    out += fmt::format("# HELP sglang:num_retractions Requests retracted under KV pressure.\n"
                       "# TYPE sglang:num_retractions counter\nsglang:num_retractions{} {}\n",
                       label, s.total_retracted_reqs);
    if (config_.balancedness) out += config_.balancedness->prometheus(label.substr(1, label.size() - 2));
    if (s.prefill_delayer) out += s.prefill_delayer->prometheus(config_.metric_labels);
    if (runner_.lockstep()) {
        const executor::BatchRunner::LockstepStats ls = runner_.lockstep_stats();
        const auto counter = [&](const char* name, const char* help, std::int64_t value) {
            out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{} {}\n", name, help, name, name, label, value);
        };
        counter("tessera:dp_attention_steps_total",
                "Forward steps this DP-attention group ran in lockstep with the others.", ls.forwards);
        counter("tessera:dp_attention_idle_steps_total",
                "Of them, forwards with none of this group's tokens because another group had work.", ls.idle_steps);
        counter("tessera:dp_attention_tokens_total", "This group's tokens through the model.", ls.tokens);
    }
    return out;
}

}  // namespace tessera::front
