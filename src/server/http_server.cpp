// Boost 1.74 asio needs <utility> before it under -std=c++20.
#include <utility>

#include "server/http_server.h"

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "server/backend.h"
#include "server/http_access.h"
#include "server/http_metrics.h"
#include "server/openai_protocol.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace tessera::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr const char* kLog = "http";
constexpr const char* kJson = "application/json";
constexpr const char* kText = "text/plain; charset=utf-8";
constexpr std::size_t kWatchReadBytes = 4096;
constexpr std::size_t kKeepBufferBytes = 64 * 1024;  // larger read buffers are freed when idle
constexpr auto kLingerTimeout = std::chrono::milliseconds(500);

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string detail_json(const std::string& detail) {
    return nlohmann::json{{"detail", detail}}.dump();
}

// State shared by the server, its sessions and the callbacks handed to the backend (which
// may outlive the server: the gate stops them from posting once the io_context is gone).
struct ServerState {
    ServerState(Backend& b, HttpServerOptions o)
        : backend(b),
          options(std::move(o)),
          access{options.api_key, options.admin_api_key, options.host, options.allowed_hosts},
          metrics(options.metric_labels.empty() ? metric_labels(b.served_model_name(), "").value()
                                                : options.metric_labels,
                  options.metric_buckets, options.custom_metric_labels.allowed),
          weight_version_(options.weight_version) {}

    // --weight-version, then the one the last successful /update_weights_from_disk gave.
    std::string weight_version() const {
        std::lock_guard<std::mutex> lock(weight_version_mu_);
        return weight_version_;
    }
    void set_weight_version(std::string version) {
        std::lock_guard<std::mutex> lock(weight_version_mu_);
        weight_version_ = std::move(version);
    }

    Backend& backend;
    const HttpServerOptions options;
    const AccessPolicy access;
    ProtocolOptions protocol;  // set once in start()
    HttpMetrics metrics;
    std::atomic<std::int64_t> n_pending{0};        // admitted generation requests in the backend
    std::atomic<std::int64_t> n_open_responses{0}; // generation responses not fully written
    std::atomic<bool> stopping{false};
    std::atomic<std::uint64_t> n_health_checks{0};

    std::shared_mutex gate_mu;
    bool gate_closed = false;  // GUARDED_BY(gate_mu)

 private:
    mutable std::mutex weight_version_mu_;
    std::string weight_version_;  // GUARDED_BY(weight_version_mu_)
};

// Holds one admission slot until every request of a generation has sent its final event
// (or the backend drops the callbacks).
class PendingTicket {
 public:
    PendingTicket(std::shared_ptr<ServerState> state, int n_requests)
        : state_(std::move(state)), remaining_(n_requests) {}
    ~PendingTicket() { release(); }
    void finish_one() {
        if (remaining_.fetch_sub(1) == 1) release();
    }

 private:
    void release() {
        if (!released_.exchange(true)) state_->n_pending.fetch_sub(1);
    }
    std::shared_ptr<ServerState> state_;
    std::atomic<int> remaining_;
    std::atomic<bool> released_{false};
};

// The generation a connection is answering (at most one: HTTP/1.1 answers in order).
struct ActiveGeneration {
    std::uint64_t seq = 0;
    bool health = false;  // /health_generate: answer on the first event
    bool streaming = false;
    std::vector<std::string> request_ids;
    std::vector<bool> finished;
    std::vector<std::optional<Clock::time_point>> last_token_at;  // none before the first token
    std::optional<ResponseBuilder> builder;
    Clock::time_point start = Clock::now();
    std::string metric_series;  // HttpMetrics::series_of the request's custom labels
};

// One TCP connection. Owned by shared_ptrs in its pending handlers; every member is used
// only on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
    Session(tcp::socket socket, std::shared_ptr<ServerState> state)
        : socket_(std::move(socket)), state_(std::move(state)), idle_timer_(socket_.get_executor()) {}

    ~Session() { uncount_open(); }

    void start() { read_header(); }

    // Called on a backend thread: post to the strand, never block.
    static void post_event(const std::shared_ptr<ServerState>& state, const std::weak_ptr<Session>& weak,
                           std::uint64_t seq, std::size_t index, GenerationEvent event) {
        post_to(state, weak, [seq, index, ev = std::move(event)](Session& self) mutable {
            self.on_generation_event(seq, index, std::move(ev));
        });
    }
    // Runs `work` on the session's strand, unless the session or the server is gone.
    template <typename Work>
    static void post_to(const std::shared_ptr<ServerState>& state, const std::weak_ptr<Session>& weak, Work work) {
        std::shared_lock lock(state->gate_mu);
        if (state->gate_closed) return;
        auto self = weak.lock();
        if (!self) return;
        try {
            net::post(self->socket_.get_executor(),
                      [self, work = std::move(work)]() mutable { work(*self); });
        } catch (const std::exception& e) {
            TSR_LOG_C(ERROR, kLog, "dropping a backend answer: {}", e.what());
        }
    }

 private:
    // ---- reading -------------------------------------------------------------------
    void read_header() {
        if (closed_) return;
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(state_->options.max_header_bytes));
        parser_->body_limit(state_->options.max_body_bytes);
        arm_timer(state_->options.keep_alive_timeout);
        http::async_read_header(socket_, buffer_, *parser_,
                                [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
    }

    void on_header(error_code ec) {
        if (ec) return on_read_error(ec);
        const auto& req = parser_->get();
        if (!parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue"))
            write("HTTP/1.1 100 Continue\r\n\r\n");
        if (parser_->is_done()) return on_body({});
        http::async_read(socket_, buffer_, *parser_,
                         [self = shared_from_this()](error_code ec, std::size_t) { self->on_body(ec); });
    }

    void on_body(error_code ec) {
        if (ec) return on_read_error(ec);
        disarm_timer();
        const auto& req = parser_->get();
        keep_alive_ = req.keep_alive() && !state_->stopping.load();
        chunked_ = req.version() >= 11;
        response_active_ = true;
        response_complete_ = false;
        if (buffer_.size() == 0) watch_peer();  // else a pipelined request is already here
        route();
    }

    void on_read_error(error_code ec) {
        disarm_timer();
        if (closed_) return;
        if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
            ec == net::error::connection_reset || ec == net::error::bad_descriptor) {
            return close();
        }
        keep_alive_ = false;
        response_active_ = true;
        response_complete_ = false;
        if (ec == http::error::body_limit) {
            return respond_error(ApiError{.http_status = 413,
                                          .message = "request body exceeds the limit of " +
                                                     std::to_string(state_->options.max_body_bytes) + " bytes"});
        }
        if (ec == http::error::header_limit) {
            return respond(431, kJson, detail_json("request headers too large"));
        }
        respond(400, kJson, detail_json("malformed HTTP request: " + ec.message()));
    }

    // While a response is pending, a read stays posted to notice a client that goes away
    // (→ abort); bytes it reads are the start of the next request. Invariant: while it is
    // posted, buffer_ is empty (so no second read is ever started next to it).
    void watch_peer() {
        if (watching_ || closed_) return;
        watching_ = true;
        socket_.async_read_some(buffer_.prepare(kWatchReadBytes),
                                [self = shared_from_this()](error_code ec, std::size_t n) { self->on_watch(ec, n); });
    }

    void on_watch(error_code ec, std::size_t n) {
        watching_ = false;
        if (closed_) return;
        if (ec) return close();  // the client is gone: close() aborts what is in flight
        if (lingering_) return drain();
        buffer_.commit(n);
        if (!response_active_) read_header();  // idle keep-alive connection: next request
    }

    // ---- routing -------------------------------------------------------------------
    static std::optional<Backend::ExpertRecordAction> expert_record_action(const std::string& path) {
        if (path == "/start_expert_distribution_record") return Backend::ExpertRecordAction::kStart;
        if (path == "/stop_expert_distribution_record") return Backend::ExpertRecordAction::kStop;
        if (path == "/dump_expert_distribution_record") return Backend::ExpertRecordAction::kDump;
        return std::nullopt;
    }

    void route() {
        const auto& req = parser_->get();
        std::string_view target(req.target().data(), req.target().size());
        const std::string path(target.substr(0, target.find('?')));
        const http::verb m = req.method();
        const bool get = m == http::verb::get || m == http::verb::head;
        const bool post = m == http::verb::post;
        auto allow = [&](bool ok, const char* allowed) {
            if (!ok) respond(405, kJson, detail_json("Method Not Allowed"), {"Allow: " + std::string(allowed)});
            return ok;
        };
        Backend& backend = state_->backend;
        const auto record_action = expert_record_action(path);
        // SGLang's @auth_level(ADMIN_OPTIONAL) routes: the admin key when there is one.
        const bool admin = path == "/flush_cache" || path == "/abort_request" || path == "/pause_generation" ||
                           path == "/continue_generation" || path == "/update_weights_from_disk" ||
                           path == "/release_memory_occupation" || path == "/resume_memory_occupation" ||
                           path == "/update_weight_version" || path == "/configure_logging" || record_action;
        // /ping: SageMaker's health check.
        const bool open = path == "/health" || path == "/ping";
        const RouteKind kind = open ? RouteKind::kOpen : admin ? RouteKind::kAdmin : RouteKind::kApi;
        const auto header = [&](http::field f) { return std::string_view(req[f].data(), req[f].size()); };
        if (auto denied = check_access(state_->access, kind, header(http::field::host),
                                       header(http::field::authorization))) {
            return respond_error(*denied);
        }
        // JSON routes: a body a web page could post without a preflight is refused.
        const auto json_body = [&] {
            auto bad = check_json_content_type(header(http::field::content_type));
            if (bad) respond_error(*bad);
            return !bad;
        };
        if (path == "/v1/chat/completions" || path == "/invocations") {
            // /invocations: SageMaker's name for chat completions (http_server.py sagemaker_chat_completions).
            if (allow(post, "POST") && json_body()) start_generation(ApiKind::kChatCompletion);
        } else if (path == "/v1/completions") {
            if (allow(post, "POST") && json_body()) start_generation(ApiKind::kCompletion);
        } else if (path == "/generate") {
            if (allow(post || m == http::verb::put, "POST, PUT") && json_body()) start_generation(ApiKind::kGenerate);
        } else if (path == "/v1/score") {
            if (allow(post, "POST") && json_body()) start_generation(ApiKind::kScore);
        } else if (path == "/v1/embeddings") {
            if (allow(post, "POST") && json_body()) start_generation(ApiKind::kEmbedding);
        } else if (path == "/encode") {
            if (allow(post || m == http::verb::put, "POST, PUT") && json_body()) start_generation(ApiKind::kEncode);
        } else if (path == "/health" || path == "/ping") {
            if (!allow(get, "GET")) return;
            const bool up = backend.ready() && !state_->stopping.load();
            respond(up ? 200 : 503, kText, "");
        } else if (path == "/health_generate") {
            if (allow(get, "GET")) health_generate();
        } else if (path == "/v1/models") {
            if (allow(get, "GET")) respond(200, kJson, models_json());
        } else if (path.starts_with("/v1/models/")) {
            // http_server.py retrieve_model: the served model's card, or OpenAI's 404.
            if (!allow(get, "GET")) return;
            const std::string model = path.substr(std::string_view("/v1/models/").size());
            if (model == state_->protocol.served_model_name) {
                respond(200, kJson, nlohmann::ordered_json::parse(models_json())["data"][0].dump());
            } else {
                respond_error(ApiError{.http_status = 404,
                                       .message = "The model '" + model + "' does not exist",
                                       .param = "model",
                                       .code = "model_not_found"});
            }
        } else if (path == "/get_server_info" || path == "/server_info") {
            if (allow(get, "GET")) respond(200, kJson, backend.server_info().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else if (path == "/model_info" || path == "/get_model_info") {
            if (allow(get, "GET")) respond(200, kJson, model_info_json());
        } else if (path == "/weight_version" || path == "/get_weight_version") {
            if (allow(get, "GET"))
                respond(200, kJson, nlohmann::json{{"weight_version", state_->weight_version()}}.dump());
        } else if (path == "/get_load") {
            if (allow(get, "GET")) respond(200, kJson, load_json(backend.server_info()).dump());
        } else if (path == "/open_session") {
            // SGLang's http_server.py open_session (GET and POST): the new id as a JSON string.
            if (!allow(post || get, "GET, POST") || !json_body()) return;
            OpenSessionOutcome parsed = parse_open_session(parser_->get().body());
            if (parsed.error) return respond_error(*parsed.error);
            StatusOr<std::string> id = backend.open_session(parsed.params);
            if (!id.ok()) return respond_error(ApiError::from_status(id.status()));
            respond(200, kJson, nlohmann::json(*id).dump());
        } else if (path == "/close_session") {
            if (!allow(post || get, "GET, POST") || !json_body()) return;
            std::variant<std::string, ApiError> id = parse_close_session(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&id)) return respond_error(*error);
            backend.close_session(std::get<std::string>(id));
            respond(200, kJson, "");
        } else if (path == "/v1/tokenize" || path == "/tokenize") {
            // serving_tokenize.py OpenAIServingTokenize: the ids and their count per prompt, and
            // the context length.
            if (!allow(post, "POST") || !json_body()) return;
            auto parsed = parse_tokenize_request(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            const TokenizeInput& in = std::get<TokenizeInput>(parsed);
            nlohmann::json tokens = nlohmann::json::array(), counts = nlohmann::json::array();
            for (const std::string& prompt : in.prompts) {
                auto ids = backend.tokenize(prompt, in.add_special_tokens);
                if (!ids.ok()) return respond_error(ApiError::from_status(ids.status()));
                counts.push_back(ids->size());
                tokens.push_back(std::move(ids).value());
            }
            respond(200, kJson, nlohmann::ordered_json{{"tokens", in.batched ? tokens : tokens[0]},
                                                       {"count", in.batched ? counts : counts[0]},
                                                       {"max_model_len", backend.max_model_len()}}
                                    .dump());
        } else if (path == "/v1/detokenize" || path == "/detokenize") {
            if (!allow(post, "POST") || !json_body()) return;
            auto parsed = parse_detokenize_request(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            const DetokenizeInput& in = std::get<DetokenizeInput>(parsed);
            nlohmann::json texts = nlohmann::json::array();
            for (const auto& ids : in.sequences) {
                auto text = backend.detokenize(ids, in.skip_special_tokens);
                if (!text.ok()) return respond_error(ApiError::from_status(text.status()));
                texts.push_back(std::move(text).value());
            }
            respond(200, kJson, nlohmann::json{{"text", in.batched ? texts : texts[0]}}.dump(
                                    -1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else if (path == "/abort_request") {
            // http_server.py abort_request: {"rid": ..., "abort_all": ...}; every request whose id
            // starts with rid stops with finish_reason "abort"; an empty rid stops none unless
            // abort_all. Answers 200 with no body, as SGLang, whether or not any matched.
            if (!allow(post, "POST") || !json_body()) return;
            std::variant<AbortSelection, ApiError> parsed = parse_abort_request(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            const AbortSelection& selection = std::get<AbortSelection>(parsed);
            if (selection.all) {
                backend.abort_prefixed("");
            } else if (!selection.rid.empty()) {
                backend.abort_prefixed(selection.rid);
            }
            respond(200, kJson, "");
        } else if (path == "/pause_generation" || path == "/continue_generation") {
            // http_server.py pause_generation / continue_generation (ADMIN_OPTIONAL).
            if (!allow(post, "POST") || !json_body()) return;
            const bool pause = path == "/pause_generation";
            Status st = Status::Ok();
            if (pause) {
                std::variant<Backend::PauseMode, ApiError> mode = parse_pause_generation(parser_->get().body());
                if (auto* error = std::get_if<ApiError>(&mode)) return respond_error(*error);
                st = backend.pause_generation(std::get<Backend::PauseMode>(mode));
            } else {
                st = backend.continue_generation();
            }
            if (!st.ok()) return respond_error(ApiError::from_status(st));
            const char* message = pause ? "Generation paused successfully." : "Generation continued successfully.";
            respond(200, kJson, nlohmann::json{{"message", message}, {"status", "ok"}}.dump());
        } else if (path == "/update_weights_from_disk") {
            // http_server.py update_weights_from_disk: {success, message, num_paused_requests},
            // 200 or 400; on success the weight version becomes the request's, when it gives one.
            if (!allow(post, "POST") || !json_body()) return;
            std::variant<WeightUpdateInput, ApiError> parsed = parse_update_weights_from_disk(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            const WeightUpdateInput& in = std::get<WeightUpdateInput>(parsed);
            hold_ = shared_from_this();
            backend.update_weights_from_disk(in.update, [state = state_, weak = weak_from_this(),
                                                         version = in.weight_version](Status st) {
                std::string message = st.ok() ? "Succeeded to update model weights." : st.message();
                if (st.ok() && version) {
                    state->set_weight_version(*version);
                    message += " Weight version updated to " + *version + ".";
                }
                std::string body = nlohmann::json{{"success", st.ok()}, {"message", message},
                                                  {"num_paused_requests", 0}}
                                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
                post_to(state, weak, [ok = st.ok(), body = std::move(body)](Session& self) {
                    self.hold_.reset();
                    self.respond(ok ? 200 : 400, kJson, body);
                });
            });
        } else if (path == "/release_memory_occupation" || path == "/resume_memory_occupation") {
            // http_server.py release_memory_occupation / resume_memory_occupation: 200 with a null
            // body, or the error. POST only: it changes state, never a GET a page can trigger.
            if (!allow(post, "POST") || !json_body()) return;
            std::variant<Backend::MemoryRegions, ApiError> parsed = parse_memory_occupation(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            hold_ = shared_from_this();
            auto answer = [state = state_, weak = weak_from_this()](Status st) {
                post_to(state, weak, [st = std::move(st)](Session& self) {
                    self.hold_.reset();
                    if (st.ok()) return self.respond(200, kJson, "null");
                    self.respond_error(ApiError::from_status(st));
                });
            };
            const Backend::MemoryRegions& regions = std::get<Backend::MemoryRegions>(parsed);
            if (path == "/release_memory_occupation") {
                backend.release_memory_occupation(regions, std::move(answer));
            } else {
                backend.resume_memory_occupation(regions, std::move(answer));
            }
        } else if (path == "/configure_logging") {
            // http_server.py configure_logging: 200 with no body.
            if (!allow(post, "POST") || !json_body()) return;
            std::variant<Backend::LoggingChange, ApiError> parsed = parse_configure_logging(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            Status st = backend.configure_logging(std::get<Backend::LoggingChange>(parsed));
            if (!st.ok()) return respond_error(ApiError::from_status(st));
            respond(200, kText, "");
        } else if (path == "/update_weight_version") {
            // http_server.py update_weight_version: no weights change, only what /model_info and
            // /weight_version report; every request is ended first unless told otherwise.
            if (!allow(post, "POST") || !json_body()) return;
            std::variant<WeightVersionInput, ApiError> parsed = parse_update_weight_version(parser_->get().body());
            if (auto* error = std::get_if<ApiError>(&parsed)) return respond_error(*error);
            const WeightVersionInput& in = std::get<WeightVersionInput>(parsed);
            if (in.abort_all_requests) backend.abort_prefixed("");
            state_->set_weight_version(in.new_version);
            respond(200, kJson,
                    nlohmann::ordered_json{{"success", true},
                                           {"message", "Weight version updated to " + in.new_version},
                                           {"new_version", in.new_version}}
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else if (path == "/separate_reasoning" || path == "/parse_function_call") {
            if (!allow(post, "POST") || !json_body()) return;
            const std::string_view body = parser_->get().body();
            std::variant<std::string, ApiError> answer =
                path == "/separate_reasoning" ? separate_reasoning_answer(body)
                                              : parse_function_call_answer(body, state_->protocol.tool_calls);
            if (auto* error = std::get_if<ApiError>(&answer)) return respond_error(*error);
            respond(200, kJson, std::get<std::string>(answer));
        } else if (path == "/flush_cache") {
            if (!allow(post, "POST")) return;  // it changes state: never a GET a page can trigger
            Status st = backend.flush_cache();
            if (st.ok()) {
                respond(200, kText,
                        "Cache flushed.\nPlease check backend logs for more details. (When there are running "
                        "or waiting requests, the operation will not be performed.)\n");
            } else {
                respond(400, kText, "Cache not flushed: " + st.message() + "\n");
            }
        } else if (record_action) {
            if (!allow(post, "POST")) return;  // changes state: never a GET a page can trigger
            Status st = backend.expert_record(*record_action);
            static const char* const kDone[] = {"Start recording the expert distribution.\n",
                                                "Stop recording the expert distribution.\n",
                                                "Dump expert distribution record.\n"};
            if (st.ok()) {
                respond(200, kText, kDone[static_cast<int>(*record_action)]);
            } else {
                respond(400, kText, st.message() + "\n");
            }
        } else if (path == "/metrics") {
            if (allow(get, "GET"))
                respond(200, "text/plain; version=0.0.4; charset=utf-8", backend.metrics_text() + state_->metrics.render());
        } else {
            respond(404, kJson, detail_json("Not Found"));
        }
    }

    // SGLang's GET /get_load (tokenizer_manager.get_load): one entry per DP rank, read by the
    // gateway's load monitor; token_usage (the KV pool's used fraction) is tessera's addition.
    static nlohmann::json load_json(const nlohmann::json& info) {
        nlohmann::json loads = nlohmann::json::array();
        const auto states = info.find("internal_states");
        if (states == info.end() || !states->is_array()) return loads;
        int dp_rank = 0;
        for (const auto& st : *states) {
            const std::int64_t running = st.value("num_running_reqs", std::int64_t{0});
            const std::int64_t queued = st.value("num_queue_reqs", std::int64_t{0});
            loads.push_back({{"dp_rank", dp_rank++},
                             {"num_reqs", running + queued},
                             {"num_waiting_reqs", queued},
                             {"num_tokens", st.value("num_used_tokens", std::int64_t{0})},
                             {"token_usage", st.value("token_usage", 0.0)}});
        }
        return loads;
    }

    // SGLang's GET /model_info (http_server.py model_info): the backend's model fields, the
    // server's --preferred-sampling-params (null when unset) and --weight-version.
    std::string model_info_json() const {
        nlohmann::json info = state_->backend.model_info();
        const auto& preferred = state_->protocol.preferred_sampling;
        info["preferred_sampling_params"] =
            preferred ? nlohmann::json::parse(preferred->json, nullptr, false) : nlohmann::json(nullptr);
        info["weight_version"] = state_->weight_version();
        return info.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }

    std::string models_json() const {
        const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
        const std::string& name = state_->protocol.served_model_name;
        nlohmann::ordered_json card = {{"id", name},         {"object", "model"},
                                       {"created", created}, {"owned_by", "sglang"},
                                       {"root", name},       {"parent", nullptr},
                                       {"max_model_len", state_->protocol.max_model_len}};
        nlohmann::ordered_json list = {{"object", "list"}, {"data", nlohmann::ordered_json::array({card})}};
        return list.dump();
    }

    // ---- generation ----------------------------------------------------------------
    void start_generation(ApiKind kind) {
        if (state_->stopping.load()) {
            keep_alive_ = false;
            return respond_error(ApiError{.http_status = 503, .message = "the server is shutting down",
                                          .type = "service_unavailable"});
        }
        const char* prefix = kind == ApiKind::kChatCompletion ? "chatcmpl-" : kind == ApiKind::kCompletion ? "cmpl-" : "";
        ParseOutcome parsed = parse_request(kind, parser_->get().body(), state_->protocol, prefix + random_hex_id());
        if (!parsed.ok()) return respond_error(*parsed.error);

        const std::int64_t limit = state_->options.max_pending_requests;
        if (state_->n_pending.fetch_add(1) >= limit) {
            state_->n_pending.fetch_sub(1);
            return respond_error(ApiError{.http_status = 503,
                                          .message = "too many pending requests (limit " + std::to_string(limit) +
                                                     "); retry later",
                                          .type = "service_unavailable"});
        }
        ParsedRequest& request = parsed.request;
        const int n = static_cast<int>(request.requests.size());
        if (n == 0) {  // /v1/score with no items: SGLang answers empty scores
            state_->n_pending.fetch_sub(1);
            return respond(200, kJson, ResponseBuilder(request).body());
        }
        auto ticket = std::make_shared<PendingTicket>(state_, n);
        auto gen = std::make_unique<ActiveGeneration>();
        gen->seq = ++gen_seq_;
        gen->streaming = request.stream;
        gen->finished.assign(n, false);
        gen->last_token_at.assign(n, std::nullopt);
        gen->builder.emplace(request);
        // SGLang's OpenAI routes read the custom labels (serving_base.py extract_custom_labels).
        const CustomMetricLabels& custom = state_->options.custom_metric_labels;
        if (!custom.allowed.empty() && (kind == ApiKind::kChatCompletion || kind == ApiKind::kCompletion)) {
            const auto& header = parser_->get()[custom.header];
            gen->metric_series = state_->metrics.series_of(std::string_view(header.data(), header.size()));
        }
        for (const GenerationRequest& r : request.requests) gen->request_ids.push_back(r.request_id);
        gen_ = std::move(gen);
        hold_ = shared_from_this();

        for (int i = 0; i < n; ++i) {
            Status st = state_->backend.submit(std::move(request.requests[i]), make_callback(i, ticket));
            if (st.ok()) continue;
            for (int k = 0; k < i; ++k) state_->backend.abort(gen_->request_ids[k]);
            for (int k = i; k < n; ++k) ticket->finish_one();
            end_generation();
            return respond_error(ApiError::from_status(st));
        }
        counted_open_ = true;
        state_->n_open_responses.fetch_add(1);
        if (gen_->streaming) {
            std::string head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n";
            head += chunked_ ? "Transfer-Encoding: chunked\r\n" : "";
            if (!chunked_) keep_alive_ = false;
            head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
            write(std::move(head));
        }
    }

    EventCallback make_callback(int index, std::shared_ptr<PendingTicket> ticket) {
        return [state = state_, weak = weak_from_this(), seq = gen_seq_, index,
                ticket = std::move(ticket)](GenerationEvent event) {
            const bool final = event.finish_reason.has_value() || event.error.has_value();
            post_event(state, weak, seq, static_cast<std::size_t>(index), std::move(event));
            if (final && ticket) ticket->finish_one();
        };
    }

    void on_generation_event(std::uint64_t seq, std::size_t index, GenerationEvent ev) {
        if (!gen_ || gen_->seq != seq || index >= gen_->finished.size() || gen_->finished[index]) return;
        if (gen_->health) return on_health_event(ev);
        ActiveGeneration& g = *gen_;
        const bool final = ev.finish_reason.has_value() || ev.error.has_value();
        record_metrics(g, index, ev, final);
        if (final) g.finished[index] = true;
        std::string bytes = g.builder->add_event(index, ev);
        if (g.streaming && !bytes.empty()) send_body(bytes);
        if (!g.builder->finished()) return;

        std::unique_ptr<ActiveGeneration> done = std::move(gen_);
        end_generation();
        if (done->streaming) {
            if (chunked_) write("0\r\n\r\n");
            complete_response();
        } else if (done->builder->error()) {
            respond_error(*done->builder->error());
        } else {
            respond(200, kJson, done->builder->body());
        }
    }

    void record_metrics(ActiveGeneration& g, std::size_t index, const GenerationEvent& ev, bool final) {
        HttpMetrics& m = state_->metrics;
        if (!ev.token_ids.empty()) {
            auto& last = g.last_token_at[index];
            if (!last) {
                m.observe_time_to_first_token(seconds_since(g.start), g.metric_series);
            } else {
                m.observe_inter_token_latency(seconds_since(*last), static_cast<std::int64_t>(ev.token_ids.size()),
                                              g.metric_series);
            }
            last = Clock::now();
        }
        if (final) {
            m.observe_e2e_request_latency(seconds_since(g.start), g.metric_series);
            m.add_prompt_tokens(ev.usage.prompt_tokens, g.metric_series);
            m.add_generation_tokens(ev.usage.completion_tokens, g.metric_series);
            m.observe_request_tokens(ev.usage.prompt_tokens, ev.usage.cached_tokens, ev.usage.completion_tokens,
                                     g.metric_series);
        }
    }

    // Drops the generation and the self-reference that kept the session alive for its
    // events (callers run inside a handler that holds its own reference).
    void end_generation() {
        gen_.reset();
        hold_.reset();
    }

    void abort_generation() {
        if (!gen_) return;
        for (std::size_t i = 0; i < gen_->request_ids.size(); ++i) {
            if (!gen_->finished[i]) state_->backend.abort(gen_->request_ids[i]);
        }
    }

    // ---- /health_generate ----------------------------------------------------------
    void health_generate() {
        if (!state_->backend.ready() || state_->stopping.load()) return respond(503, kText, "");
        GenerationRequest r;
        r.request_id = "HEALTH_CHECK_" + std::to_string(state_->n_health_checks.fetch_add(1)) + "_" + random_hex_id();
        r.input.input_ids = std::vector<std::int32_t>{0};
        r.params.max_new_tokens = 1;
        r.params.temperature = 0.0f;
        auto gen = std::make_unique<ActiveGeneration>();
        gen->seq = ++gen_seq_;
        gen->health = true;
        gen->request_ids = {r.request_id};
        gen->finished = {false};
        gen_ = std::move(gen);
        hold_ = shared_from_this();
        Status st = state_->backend.submit(std::move(r), make_callback(0, nullptr));
        if (!st.ok()) {
            end_generation();
            return respond(503, kText, "");
        }
        health_timer_.emplace(socket_.get_executor());
        health_timer_->expires_after(state_->options.health_generate_timeout);
        health_timer_->async_wait([self = shared_from_this(), seq = gen_seq_](error_code ec) {
            if (ec || !self->gen_ || self->gen_->seq != seq) return;
            self->abort_generation();
            self->end_generation();
            self->respond(503, kText, "");
        });
    }

    void on_health_event(const GenerationEvent& ev) {
        const bool final = ev.finish_reason.has_value() || ev.error.has_value();
        if (!final) abort_generation();
        end_generation();
        if (health_timer_) health_timer_->cancel();
        respond(ev.error ? 503 : 200, kText, "");
    }

    // ---- writing -------------------------------------------------------------------
    void respond(int status, const char* content_type, const std::string& body,
                 const std::vector<std::string>& extra_headers = {}) {
        std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                           std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
        head += "Content-Type: " + std::string(content_type) + "\r\n";
        head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        for (const std::string& h : extra_headers) head += h + "\r\n";
        head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
        write(head + body);
        complete_response();
    }

    void respond_error(const ApiError& e) {
        std::vector<std::string> extra;
        if (e.http_status == 503) extra.push_back("Retry-After: " + std::to_string(state_->options.retry_after_seconds));
        respond(e.http_status, kJson, e.to_json(), extra);
    }

    void send_body(const std::string& bytes) {
        if (!chunked_) return write(bytes);
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
        write(size + bytes + "\r\n");
    }

    void write(std::string bytes) {
        if (closed_) return;
        out_pending_ += bytes;
        if (out_pending_.size() > state_->options.max_unsent_bytes) {
            TSR_LOG_C(WARN, kLog, "client not reading ({} bytes unsent); closing the connection", out_pending_.size());
            return close();
        }
        if (!writing_) do_write();
    }

    void do_write() {
        writing_ = true;
        out_writing_.swap(out_pending_);
        out_pending_.clear();
        net::async_write(socket_, net::buffer(out_writing_),
                         [self = shared_from_this()](error_code ec, std::size_t) { self->on_write(ec); });
    }

    void on_write(error_code ec) {
        writing_ = false;
        out_writing_.clear();
        if (closed_) return;
        if (ec) return close();
        if (!out_pending_.empty()) return do_write();
        if (response_complete_) on_response_flushed();
    }

    void complete_response() {
        response_complete_ = true;
        if (!writing_ && out_pending_.empty()) on_response_flushed();
    }

    void on_response_flushed() {
        if (!response_active_) return;
        response_active_ = false;
        uncount_open();
        if (closed_) return;
        parser_.reset();  // frees the request body
        if (buffer_.size() == 0 && buffer_.capacity() > kKeepBufferBytes) buffer_.shrink_to_fit();
        if (!keep_alive_ || state_->stopping.load()) return linger_close();
        if (!watching_) return read_header();
        arm_timer(state_->options.keep_alive_timeout);  // the watch read brings the next request
    }

    // ---- closing -------------------------------------------------------------------
    // Half-close and drain what the client still sends, so it reads our last response
    // instead of a reset.
    void linger_close() {
        lingering_ = true;
        error_code ec;
        socket_.shutdown(tcp::socket::shutdown_send, ec);
        if (ec) return close();
        arm_timer(kLingerTimeout);
        if (!watching_) drain();
    }

    void drain() {
        watching_ = true;
        buffer_.clear();
        socket_.async_read_some(buffer_.prepare(kWatchReadBytes), [self = shared_from_this()](error_code ec, std::size_t) {
            self->watching_ = false;
            if (ec || self->closed_) return self->close();
            self->drain();
        });
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        abort_generation();
        end_generation();
        disarm_timer();
        if (health_timer_) health_timer_->cancel();
        uncount_open();
        error_code ec;
        socket_.shutdown(tcp::socket::shutdown_both, ec);
        socket_.close(ec);
    }

    void uncount_open() {
        if (counted_open_) {
            counted_open_ = false;
            state_->n_open_responses.fetch_sub(1);
        }
    }

    void arm_timer(std::chrono::milliseconds timeout) {
        const std::uint64_t seq = ++timer_seq_;
        idle_timer_.expires_after(timeout);
        idle_timer_.async_wait([self = shared_from_this(), seq](error_code ec) {
            if (!ec && self->timer_seq_ == seq) self->close();
        });
    }
    void disarm_timer() {
        ++timer_seq_;
        idle_timer_.cancel();
    }

    tcp::socket socket_;
    std::shared_ptr<ServerState> state_;
    net::steady_timer idle_timer_;  // keep-alive idle / header read / linger deadline
    std::uint64_t timer_seq_ = 0;   // only the latest arm_timer() may close
    std::optional<net::steady_timer> health_timer_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;

    bool keep_alive_ = true;
    bool chunked_ = true;           // HTTP/1.1: streams use chunked transfer encoding
    bool response_active_ = false;  // a request was read and its response is not flushed
    bool response_complete_ = false;
    bool watching_ = false;         // a read is posted on the socket
    bool closed_ = false;
    bool lingering_ = false;        // half-closed after the last response; draining input
    bool counted_open_ = false;     // holds one ServerState::n_open_responses

    std::string out_pending_;  // bytes queued behind the write in flight
    std::string out_writing_;  // bytes of the write in flight
    bool writing_ = false;

    std::uint64_t gen_seq_ = 0;  // events of older generations are dropped
    std::unique_ptr<ActiveGeneration> gen_;
    // Set while gen_ is in flight: backend callbacks hold only weak references, and no
    // socket operation may be pending (pipelined requests), so this keeps us alive.
    std::shared_ptr<Session> hold_;
};

}  // namespace

// ---------------------------------------------------------------------------------------

Status HttpServerOptions::validate() const {
    if (port < 0 || port > 65535) return Status::InvalidArgument("port must be in [0, 65535], got " + std::to_string(port));
    if (n_io_threads < 1) return Status::InvalidArgument("n_io_threads must be at least 1, got " + std::to_string(n_io_threads));
    if (max_pending_requests < 1)
        return Status::InvalidArgument("max_pending_requests must be at least 1, got " + std::to_string(max_pending_requests));
    if (max_body_bytes < 1024) return Status::InvalidArgument("max_body_bytes must be at least 1024");
    return Status::Ok();
}

class HttpServer::Impl {
 public:
    Impl(Backend& backend, HttpServerOptions options)
        : state_(std::make_shared<ServerState>(backend, std::move(options))),
          acceptor_(net::make_strand(ioc_)),
          accept_retry_timer_(acceptor_.get_executor()) {}

    ~Impl() { stop(); }

    Status start() {
        const HttpServerOptions& o = state_->options;
        TSR_RETURN_IF_ERROR(o.validate());
        if (running_) return Status::InvalidArgument("the HTTP server is already running");
        state_->protocol = o.protocol;
        state_->protocol.served_model_name = state_->backend.served_model_name();
        state_->protocol.max_model_len = state_->backend.max_model_len();

        error_code ec;
        tcp::resolver resolver(ioc_);
        auto results = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
        if (ec || results.empty())
            return Status::InvalidArgument("cannot resolve --host '" + o.host + "': " + ec.message());
        const tcp::endpoint endpoint = results.begin()->endpoint();
        if (acceptor_.open(endpoint.protocol(), ec); ec) return bind_error("open", ec);
        if (acceptor_.set_option(net::socket_base::reuse_address(true), ec); ec) return bind_error("set_option", ec);
        if (acceptor_.bind(endpoint, ec); ec) return bind_error("bind", ec);
        if (acceptor_.listen(net::socket_base::max_listen_connections, ec); ec) return bind_error("listen", ec);
        port_ = acceptor_.local_endpoint(ec).port();

        running_ = true;
        do_accept();
        for (int i = 0; i < o.n_io_threads; ++i) threads_.emplace_back([this] { run_loop(); });
        TSR_LOG_C(INFO, kLog, "serving {} on http://{}:{} ({} io thread(s))", state_->protocol.served_model_name,
                  o.host, port_, o.n_io_threads);
        return Status::Ok();
    }

    int port() const { return port_; }

    void stop() {
        if (!running_) return;
        running_ = false;
        state_->stopping.store(true);
        net::post(acceptor_.get_executor(), [this] {
            error_code ec;
            acceptor_.close(ec);
            accept_retry_timer_.cancel();
        });
        state_->backend.drain();
        const auto deadline = Clock::now() + state_->options.drain_timeout;
        while ((state_->n_pending.load() > 0 || state_->n_open_responses.load() > 0) && Clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        {
            std::unique_lock lock(state_->gate_mu);
            state_->gate_closed = true;
        }
        work_.reset();
        ioc_.stop();
        for (std::thread& t : threads_) t.join();
        threads_.clear();
        TSR_LOG_C(INFO, kLog, "HTTP server on port {} stopped", port_);
    }

 private:
    Status bind_error(const char* step, const error_code& ec) const {
        const HttpServerOptions& o = state_->options;
        return Status(StatusCode::kUnavailable, "cannot listen on " + o.host + ":" + std::to_string(o.port) + " (" +
                                                    step + "): " + ec.message() +
                                                    "; pick another --port or stop the process using it");
    }

    void do_accept() {
        acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
            if (!acceptor_.is_open()) return;
            if (ec) {
                // EMFILE and friends: back off instead of spinning.
                TSR_LOG_C(WARN, kLog, "accept failed: {}", ec.message());
                accept_retry_timer_.expires_after(std::chrono::milliseconds(50));
                accept_retry_timer_.async_wait([this](error_code e) {
                    if (!e && acceptor_.is_open()) do_accept();
                });
                return;
            }
            error_code opt_ec;
            socket.set_option(tcp::no_delay(true), opt_ec);
            std::make_shared<Session>(std::move(socket), state_)->start();
            do_accept();
        });
    }

    void run_loop() {
        for (;;) {
            try {
                ioc_.run();
                return;
            } catch (const std::exception& e) {
                TSR_LOG_C(ERROR, kLog, "exception in an io handler (continuing): {}", e.what());
            }
        }
    }

    std::shared_ptr<ServerState> state_;
    net::io_context ioc_;
    net::executor_work_guard<net::io_context::executor_type> work_{ioc_.get_executor()};
    tcp::acceptor acceptor_;
    net::steady_timer accept_retry_timer_;
    std::vector<std::thread> threads_;
    int port_ = 0;
    bool running_ = false;
};

HttpServer::HttpServer(Backend& backend, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(backend, std::move(options))) {}
HttpServer::~HttpServer() = default;
Status HttpServer::start() { return impl_->start(); }
int HttpServer::port() const { return impl_->port(); }
void HttpServer::stop() { impl_->stop(); }

}  // namespace tessera::server
