#include "gateway/gateway.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "gateway/http_wire.h"
#include "gateway/request_text.h"
#include "gateway/session_routes.h"
#include "net/http_client.h"
#include "server/http_access.h"
#include "server/openai_protocol.h"

namespace tessera::gateway {

namespace {

constexpr const char* kLog = "gateway";
constexpr const char* kJson = "application/json";
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr auto kClientIoTimeout = std::chrono::seconds(60);  // idle keep-alive, stalled writes
constexpr std::chrono::milliseconds kInfoTimeout{5'000};    // the gateway's own calls to workers

using Headers = std::vector<std::pair<std::string, std::string>>;

std::string error_json(int status, const std::string& message, const std::string& type) {
    server::ApiError e;
    e.http_status = status;
    e.message = message;
    e.type = type;
    return e.to_json();
}

// The routes a request is proxied on to one worker: generation, and an embedding server's.
bool is_generation_route(const std::string& path) {
    return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/generate" ||
           path == "/v1/embeddings" || path == "/encode" || path == "/invocations" || path == "/v1/score";
}

// The expert distribution recorder's routes: under DP attention only the first worker takes
// them, and its lockstep carries them to every rank in one step.
bool is_expert_record_route(const std::string& path) {
    return path == "/start_expert_distribution_record" || path == "/stop_expert_distribution_record" ||
           path == "/dump_expert_distribution_record";
}

// Admin routes every worker must apply (SGLang's server has them; the gateway fans them out).
// /abort_request too: a request id may be on any worker (SGLang's DP controller sends an
// AbortReq to every DP rank); and /pause_generation, /continue_generation,
// /update_weights_from_disk and the memory occupation routes, which it also sends to every
// scheduler.
bool is_broadcast_route(const std::string& path) {
    return path == "/flush_cache" || path == "/abort_request" || path == "/pause_generation" ||
           path == "/update_weights_from_disk" || path == "/release_memory_occupation" ||
           path == "/resume_memory_occupation" || path == "/update_weight_version" || path == "/configure_logging" ||
           path == "/continue_generation" || path == "/start_expert_distribution_record" ||
           path == "/stop_expert_distribution_record" || path == "/dump_expert_distribution_record";
}

// One worker's /update_weights_from_disk answer, or a failed one for a worker that gave none.
nlohmann::json weight_update_answer(const std::string& url, const StatusOr<net::HttpResponse>& got) {
    if (got.ok()) {
        nlohmann::json body = nlohmann::json::parse(got->body, nullptr, false);
        if (body.is_object() && body.contains("success") && body["success"].is_boolean() && body.contains("message"))
            return body;
    }
    const std::string why = got.ok() ? "HTTP " + std::to_string(got->status) + " " + got->body : got.status().message();
    return {{"success", false}, {"message", url + ": " + why}, {"num_paused_requests", 0}};
}

// tokenizer_communicator_mixin.py _wait_for_model_update_from_disk with several DP ranks:
// success when every one succeeded, their messages joined by " | ", their paused counts listed.
nlohmann::json combine_weight_updates(const std::vector<nlohmann::json>& answers) {
    bool success = !answers.empty();
    std::string message;
    nlohmann::json paused = nlohmann::json::array();
    for (const nlohmann::json& a : answers) {
        success = success && a.value("success", false);
        message += (message.empty() ? "" : " | ") + a.value("message", std::string());
        paused.push_back(a.value("num_paused_requests", 0));
    }
    return {{"success", success}, {"message", message}, {"num_paused_requests", paused}};
}

// A worker's answer that another worker might not give: busy, or broken.
bool retryable_status(int status) { return status == 429 || status == 500 || status == 502 || status == 503 || status == 504; }
// Of those, the ones that say the worker itself is in trouble (a full queue does not).
bool unhealthy_status(int status) { return status == 500 || status == 502 || status == 504; }

void set_timeouts(int fd, std::chrono::seconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count());
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The replicas' Prometheus texts as one: every sample line gets dp_rank="i" (i the replica's
// index), and each metric family comes once, its HELP / TYPE lines first and then every
// replica's samples, as the text format wants a family's lines together.
std::string merge_replica_metrics(const std::vector<std::string>& texts) {
    struct Family {
        std::string description;  // HELP / TYPE lines of the first replica that has them
        std::size_t described_by = std::string::npos;
        std::string samples;
    };
    std::vector<std::string> order;
    std::unordered_map<std::string, Family> families;
    const auto family = [&](const std::string& name) -> Family& {
        auto [it, added] = families.try_emplace(name);
        if (added) order.push_back(name);
        return it->second;
    };
    for (std::size_t dp_rank = 0; dp_rank < texts.size(); ++dp_rank) {
        const std::string& text = texts[dp_rank];
        const std::string label = fmt::format("dp_rank=\"{}\"", dp_rank);
        std::string current;  // the family the last HELP / TYPE line named
        std::size_t begin = 0;
        while (begin < text.size()) {
            std::size_t end = text.find('\n', begin);
            if (end == std::string::npos) end = text.size();
            std::string line = text.substr(begin, end - begin);
            begin = end + 1;
            if (line.empty()) continue;
            if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
                const std::size_t name_end = line.find(' ', 7);
                current = line.substr(7, name_end == std::string::npos ? std::string::npos : name_end - 7);
                Family& f = family(current);
                if (f.described_by == std::string::npos) f.described_by = dp_rank;
                if (f.described_by == dp_rank) f.description += line + "\n";
                continue;
            }
            if (line[0] == '#') continue;
            const std::size_t brace = line.find('{');
            const std::size_t space = line.find(' ');
            const std::string name = line.substr(0, std::min(brace, space));
            // A sample of the family described last (a histogram's _bucket / _sum / _count), or its own.
            Family& f = !current.empty() && name.starts_with(current) ? family(current) : family(name);
            if (brace != std::string::npos && brace < space) {
                line.insert(brace + 1, label + (line[brace + 1] == '}' ? "" : ","));
            } else if (space != std::string::npos) {
                line.insert(space, "{" + label + "}");
            }
            f.samples += line + "\n";
        }
    }
    std::string out;
    for (const std::string& name : order) out += families[name].description + families[name].samples;
    return out;
}

}  // namespace

Status GatewayOptions::validate() const {
    if (port < 0 || port > 65535) return Status::InvalidArgument("--port " + std::to_string(port) + " is not in 0..65535");
    if (cache.cache_threshold < 0.0 || cache.cache_threshold > 1.0)
        return Status::InvalidArgument("--cache-threshold must be in [0, 1], got " + std::to_string(cache.cache_threshold));
    if (cache.balance_rel_threshold < 1.0)
        return Status::InvalidArgument("--balance-rel-threshold must be >= 1, got " +
                                       std::to_string(cache.balance_rel_threshold));
    if (health.failure_threshold < 1 || health.success_threshold < 1)
        return Status::InvalidArgument("--health-failure-threshold and --health-success-threshold must be >= 1");
    if (health.interval.count() <= 0 || health.timeout.count() <= 0)
        return Status::InvalidArgument("--health-check-interval-secs and --health-check-timeout-secs must be > 0");
    if (retry.max_retries < 0) return Status::InvalidArgument("--retry-max-retries must be >= 0");
    if (retry.multiplier < 1.0) return Status::InvalidArgument("--retry-backoff-multiplier must be >= 1");
    if (retry.jitter < 0.0 || retry.jitter > 1.0) return Status::InvalidArgument("--retry-jitter-factor must be in [0, 1]");
    if (max_connections == 0) return Status::InvalidArgument("--max-concurrent-requests must be > 0");
    for (const auto& url : worker_urls) {
        auto e = net::parse_http_url(url);
        if (!e.ok()) return Status::InvalidArgument("--worker-urls " + url + ": " + e.status().message());
    }
    return Status::Ok();
}

// Everything a connection thread touches, shared so a thread that outlives stop() (waiting
// on a slow worker) never sees freed memory.
struct Shared {
    explicit Shared(GatewayOptions o)
        : options(std::move(o)),
          registry(options.health),
          router(options.policy, options.cache, options.seed),
          jitter(options.seed ^ 0x9e3779b97f4a7c15ull) {}

    const GatewayOptions options;
    WorkerRegistry registry;
    // Kept-alive connections to the workers for proxied requests (health checks open their own).
    mutable net::ConnectionPool pool;

    std::mutex route_mu;
    Router router;              // GUARDED_BY(route_mu)
    std::mt19937_64 jitter;     // GUARDED_BY(route_mu)
    std::uint64_t any_turn = 0;  // GUARDED_BY(route_mu): round robin of non-generation routes
    SessionRoutes sessions;      // the worker of each session opened through the gateway

    std::atomic<bool> stopping{false};
    std::atomic<int> connections{0};
    std::atomic<int> in_flight{0};
    std::mutex conn_mu;
    std::set<int> conn_fds;  // GUARDED_BY(conn_mu)

    std::mutex metrics_mu;
    std::map<std::string, std::int64_t> requests_by_route;  // GUARDED_BY(metrics_mu)
    std::map<std::string, std::int64_t> errors_by_kind;     // GUARDED_BY(metrics_mu)
    std::atomic<std::int64_t> retries{0};
    std::atomic<std::int64_t> cache_hits{0};
    std::atomic<std::int64_t> cache_misses{0};

    std::mutex monitor_mu;
    std::condition_variable monitor_cv;

    std::string worker_key() const { return options.worker_api_key.empty() ? options.api_key : options.worker_api_key; }
    void count(std::map<std::string, std::int64_t>& m, const std::string& key) {
        std::lock_guard<std::mutex> lock(metrics_mu);
        m[key] += 1;
    }
};

namespace {

// One client connection's writes.
struct Client {
    int fd;
    bool keep_alive = true;
    bool broken = false;

    void respond(int status, const std::string& content_type, const std::string& body, const Headers& extra = {}) {
        if (!write_all(fd, response_bytes(status, content_type, body, extra, keep_alive))) broken = true;
    }
    void respond_error(int status, const std::string& message, const std::string& type) {
        respond(status, kJson, error_json(status, message, type));
    }
    bool write(const std::string& bytes) {
        if (!broken && !write_all(fd, bytes)) broken = true;
        return !broken;
    }
};

// A GET from the gateway itself to a worker (health, load, server info).
StatusOr<net::HttpResponse> worker_get(const Shared& s, const std::string& url, const std::string& path,
                                       std::chrono::milliseconds timeout) {
    TSR_ASSIGN_OR_RETURN(net::HttpEndpoint e, net::parse_http_url(url));
    net::HttpRequest r;
    r.method = "GET";
    r.path = path;
    r.timeout = timeout;
    if (!s.worker_key().empty()) r.headers.emplace_back("Authorization", "Bearer " + s.worker_key());
    return net::http_fetch(e, r);
}

struct Attempt {
    enum class Outcome { kAnswered, kClientGone, kFailedMidStream, kRetry } outcome = Outcome::kAnswered;
    std::string error;
    bool health_failure = false;
    // A retryable answer (429/5xx), relayed to the client if no other worker does better.
    int status = 0;
    std::string content_type;
    std::string body;
    Headers headers;
};

std::string header_of(const net::HttpResponseHead& head, const char* name) {
    for (const auto& [n, v] : head.headers)
        if (n == name) return v;
    return {};
}

// Sends the client's request to `url` and relays the answer: a stream as it arrives, any
// other body once complete (so a worker failing mid-body can still be retried).
Attempt forward(const Shared& s, Client& client, const std::string& url, const ReadRequest& req) {
    Attempt a;
    auto endpoint = net::parse_http_url(url);
    if (!endpoint.ok()) {
        a.outcome = Attempt::Outcome::kRetry;
        a.error = endpoint.status().message();
        return a;
    }
    net::HttpRequest r;
    r.method = req.head.method;
    r.path = req.head.target;
    r.body = req.body;
    r.timeout = s.options.request_timeout;
    for (const char* name : {"content-type", "authorization", "accept"}) {
        const std::string v = req.head.header(name);
        if (!v.empty()) r.headers.emplace_back(name, v);
    }
    enum class Mode { kUndecided, kStream, kBuffer } mode = Mode::kUndecided;
    net::HttpResponseHead head;
    bool client_gone = false;
    std::string buffered;
    auto decide = [&] {
        if (mode != Mode::kUndecided) return;
        const std::string type = header_of(head, "content-type");
        if (!retryable_status(head.status) && type.find("text/event-stream") != std::string::npos) {
            mode = Mode::kStream;
            if (!client.write(stream_head_bytes(head.status, type, {}, client.keep_alive))) client_gone = true;
        } else {
            mode = Mode::kBuffer;
        }
    };
    const Status st = net::http_call(*endpoint, r, &head, [&](std::string_view bytes) {
        decide();
        if (client_gone) return false;
        if (mode == Mode::kBuffer) {
            buffered.append(bytes);
            return true;
        }
        if (!client.write(chunk_bytes(bytes))) {
            client_gone = true;
            return false;
        }
        return true;
    }, &s.pool);
    if (client_gone) {
        a.outcome = Attempt::Outcome::kClientGone;
        return a;
    }
    if (!st.ok()) {
        a.error = st.message();
        a.health_failure = true;
        if (mode == Mode::kStream) {
            // The client has part of an answer: end it with an error, never replay it elsewhere.
            const std::string event = "data: " +
                                      error_json(502, "the worker " + url + " failed mid-stream: " + st.message() +
                                                          " (the request was not retried: part of its answer was sent)",
                                                 "upstream_error") +
                                      "\n\n";
            client.write(chunk_bytes(event));
            client.write("0\r\n\r\n");
            a.outcome = Attempt::Outcome::kFailedMidStream;
        } else {
            a.outcome = Attempt::Outcome::kRetry;
        }
        return a;
    }
    if (mode == Mode::kUndecided && head.status != 0) decide();
    if (mode == Mode::kStream) {
        client.write("0\r\n\r\n");
        return a;
    }
    Headers extra;
    if (const std::string ra = header_of(head, "retry-after"); !ra.empty()) extra.emplace_back("Retry-After", ra);
    std::string type = header_of(head, "content-type");
    if (type.empty()) type = kJson;
    if (retryable_status(head.status)) {
        a.outcome = Attempt::Outcome::kRetry;
        a.health_failure = unhealthy_status(head.status);
        a.error = "HTTP " + std::to_string(head.status) + ": " + buffered.substr(0, 300);
        a.status = head.status;
        a.content_type = type;
        a.body = std::move(buffered);
        a.headers = std::move(extra);
        return a;
    }
    client.respond(head.status, type, buffered, extra);
    return a;
}

// Logs what a health result changed; a removed worker also leaves the prefix tree.
void on_transition(Shared& s, const std::string& url, Transition t, const std::string& error) {
    switch (t) {
        case Transition::kBecameHealthy:
            TSR_LOG_C(INFO, kLog, "worker {} is healthy", url);
            break;
        case Transition::kBecameUnhealthy:
            TSR_LOG_C(WARN, kLog, "worker {} is unhealthy after {} consecutive failures: {}", url,
                      s.options.health.failure_threshold, error);
            break;
        case Transition::kRemoved: {
            s.sessions.forget_worker(url);
            std::lock_guard<std::mutex> lock(s.route_mu);
            s.router.remove_worker(url);
            TSR_LOG_C(WARN, kLog, "worker {} removed (--remove-unhealthy-workers): {}", url, error);
            break;
        }
        case Transition::kNone:
            break;
    }
}

std::string describe_workers(const Shared& s) {
    std::string text;
    for (const auto& w : s.registry.snapshot()) {
        text += (text.empty() ? "" : "; ") + w.state.url + " " + health_name(w.health);
        if (!w.last_error.empty()) text += " (" + w.last_error + ")";
    }
    return text.empty() ? "no workers are registered (add one: POST /add_worker?url=...)" : text;
}

// The generation routes and every other route passed to one worker: pick, forward, retry.
void proxy(Shared& s, Client& client, const ReadRequest& req, bool by_policy) {
    const RequestFacts facts = by_policy ? read_request(req.head.path, req.body) : RequestFacts{};
    const std::int64_t tokens =
        s.options.count_tokens ? std::max<std::int64_t>(1, s.options.count_tokens(facts.text)) : estimate_tokens(facts.text);
    // A session's turn goes to the worker holding the session, and nowhere else. An id the
    // gateway does not know goes by policy: the worker answers that it does not exist.
    const std::optional<std::string> pinned =
        facts.session_id ? s.sessions.worker(*facts.session_id, Clock::now()) : std::nullopt;
    if (pinned && facts.data_parallel_rank && s.options.replicas) {
        const std::vector<std::string> all = s.registry.urls();
        const auto rank = std::find(all.begin(), all.end(), *pinned) - all.begin();
        if (rank != *facts.data_parallel_rank) {
            client.respond_error(400, fmt::format("session {} is held by DP rank {}, not data_parallel_rank {}",
                                                  *facts.session_id, rank, *facts.data_parallel_rank),
                                 "invalid_request_error");
            return;
        }
    }
    const int attempts = pinned || s.options.retry.disabled ? 1 : 1 + s.options.retry.max_retries;
    std::vector<std::string> tried;
    std::string errors;
    std::optional<Attempt> last_answer;
    for (int attempt = 0; attempt < attempts; ++attempt) {
        std::string url;
        std::chrono::milliseconds delay{0};
        {
            std::lock_guard<std::mutex> lock(s.route_mu);
            std::vector<WorkerState> candidates = s.registry.routable(tried);
            if (pinned) {
                if (std::any_of(candidates.begin(), candidates.end(),
                                [&](const WorkerState& w) { return w.url == *pinned; }))
                    url = *pinned;
            } else if (candidates.empty()) {
                break;
            } else if (facts.data_parallel_rank && s.options.replicas) {
                const std::vector<std::string> all = s.registry.urls();
                const int rank = *facts.data_parallel_rank;
                if (rank < 0 || rank >= static_cast<int>(all.size())) {
                    client.respond_error(400, fmt::format("data_parallel_rank {} is outside 0..{}", rank, all.size() - 1),
                                         "invalid_request_error");
                    return;
                }
                auto it = std::find_if(candidates.begin(), candidates.end(),
                                       [&](const WorkerState& w) { return w.url == all[static_cast<std::size_t>(rank)]; });
                if (it == candidates.end()) break;
                url = it->url;
            } else if (by_policy) {
                url = candidates[s.router.pick(candidates, facts.text)].url;
                if (s.router.kind() == PolicyKind::kCacheAware) {
                    if (s.router.last_was_cache_hit()) {
                        s.cache_hits += 1;
                        s.registry.count_cache_routed(url);
                    } else {
                        s.cache_misses += 1;
                    }
                }
            } else {
                url = candidates[s.any_turn++ % candidates.size()].url;
            }
            if (attempt > 0)
                delay = retry_delay(s.options.retry, attempt, std::uniform_real_distribution<double>(0.0, 1.0)(s.jitter));
        }
        if (pinned && url.empty()) {
            client.respond_error(503, fmt::format("the worker {} holding session {} cannot take requests: {}", *pinned,
                                                  *facts.session_id, describe_workers(s)),
                                 "service_unavailable");
            return;
        }
        if (attempt > 0) {
            s.retries += 1;
            std::this_thread::sleep_for(delay);
        }
        s.registry.begin_request(url, tokens);
        Attempt a = forward(s, client, url, req);
        s.registry.end_request(url, tokens);
        const auto now = Clock::now();
        switch (a.outcome) {
            case Attempt::Outcome::kAnswered:
                s.registry.report(url, true, "", now, /*passive=*/true);
                return;
            case Attempt::Outcome::kClientGone:
                return;
            case Attempt::Outcome::kFailedMidStream:
                s.count(s.errors_by_kind, "mid_stream");
                on_transition(s, url, s.registry.report(url, false, a.error, now, /*passive=*/true), a.error);
                return;
            case Attempt::Outcome::kRetry:
                if (a.health_failure)
                    on_transition(s, url, s.registry.report(url, false, a.error, now, /*passive=*/true), a.error);
                TSR_LOG_C(INFO, kLog, "{} {} failed on {} ({}){}", req.head.method, req.head.path, url, a.error,
                          attempt + 1 < attempts ? "; retrying on another worker" : "");
                errors += (errors.empty() ? "" : "; ") + url + ": " + a.error;
                if (a.status != 0) last_answer = std::move(a);
                tried.push_back(url);
                break;
        }
    }
    s.count(s.errors_by_kind, tried.empty() ? "no_worker" : "all_failed");
    if (last_answer) {
        // Every worker was busy or failing: pass on the last worker's own answer.
        client.respond(last_answer->status, last_answer->content_type, last_answer->body, last_answer->headers);
        return;
    }
    if (tried.empty()) {
        client.respond_error(503, "no healthy worker can take the request: " + describe_workers(s), "service_unavailable");
    } else {
        client.respond_error(502, "every worker tried failed: " + errors, "upstream_error");
    }
}

// /open_session on one worker (the one already holding the client's session_id, if any, which
// then refuses the duplicate as SGLang does; else the next in turn), remembered from its
// answer; /close_session on the session's worker, or answered as a worker answers an unknown
// id; a body without a session_id goes to a worker, which refuses it.
void session_route(Shared& s, Client& client, const ReadRequest& req) {
    const bool open = req.head.path == "/open_session";
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    std::optional<std::string> id;
    std::optional<double> timeout_s;
    if (body.is_object()) {
        if (auto v = body.find("session_id"); v != body.end() && v->is_string()) id = v->get<std::string>();
        if (auto v = body.find("timeout"); v != body.end() && v->is_number()) timeout_s = v->get<double>();
    }
    std::optional<std::string> url;
    if (id) url = open ? s.sessions.worker(*id, Clock::now()) : s.sessions.closed(*id);
    if (!open && id && !url) {
        client.respond(200, kJson, "");
        return;
    }
    if (!url) {  // a new session, or a body without an id, which some worker refuses in its words
        std::lock_guard<std::mutex> lock(s.route_mu);
        const std::vector<WorkerState> candidates = s.registry.routable({});
        if (!candidates.empty()) url = candidates[s.any_turn++ % candidates.size()].url;
    }
    if (!url) {
        client.respond_error(503, "no healthy worker can open a session: " + describe_workers(s),
                             "service_unavailable");
        return;
    }
    auto endpoint = net::parse_http_url(*url);
    net::HttpRequest r;
    r.method = req.head.method;
    r.path = req.head.path;
    r.body = req.body;
    r.timeout = kInfoTimeout;
    for (const char* name : {"content-type", "authorization"}) {
        const std::string v = req.head.header(name);
        if (!v.empty()) r.headers.emplace_back(name, v);
    }
    auto got = endpoint.ok() ? net::http_fetch(*endpoint, r) : StatusOr<net::HttpResponse>(endpoint.status());
    if (!got.ok()) {
        client.respond_error(502, req.head.path + " failed on " + *url + ": " + got.status().message(),
                             "upstream_error");
        return;
    }
    if (open && got->status == 200) {
        const nlohmann::json answer = nlohmann::json::parse(got->body, nullptr, /*allow_exceptions=*/false);
        if (answer.is_string()) s.sessions.opened(answer.get<std::string>(), *url, timeout_s, Clock::now());
    }
    client.respond(got->status, kJson, got->body);
}

// GET a JSON document from every healthy worker, in registration order.
std::vector<std::pair<std::string, nlohmann::json>> gather_json(const Shared& s, const std::string& path) {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    for (const auto& w : s.registry.snapshot()) {
        if (w.health != Health::kHealthy) continue;
        auto r = worker_get(s, w.state.url, path, kInfoTimeout);
        if (!r.ok() || r->status != 200) continue;
        nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
        if (!j.is_discarded()) out.emplace_back(w.state.url, std::move(j));
    }
    return out;
}

nlohmann::json workers_json(const Shared& s) {
    nlohmann::json list = nlohmann::json::array();
    int dp_rank = 0;
    for (const auto& w : s.registry.snapshot()) {
        nlohmann::json j = {{"url", w.state.url},
                            {"health", health_name(w.health)},
                            {"healthy", w.health == Health::kHealthy},
                            {"in_flight", w.state.in_flight},
                            {"requests", w.requests},
                            {"failures", w.failures},
                            {"cache_routed", w.cache_routed},
                            {"waiting", w.state.waiting},
                            {"kv_usage", w.state.kv_usage}};
        if (s.options.replicas) j["dp_rank"] = dp_rank++;
        if (!w.last_error.empty()) j["last_error"] = w.last_error;
        list.push_back(std::move(j));
    }
    return {{"policy", policy_name(s.options.policy)}, {"workers", list}, {"urls", s.registry.urls()}};
}

std::string metrics_text(Shared& s) {
    std::string out;
    const auto workers = s.registry.snapshot();
    std::int64_t healthy = 0;
    for (const auto& w : workers) healthy += w.health == Health::kHealthy ? 1 : 0;
    out += "# HELP sgl_router_active_workers Workers the gateway can route to.\n# TYPE sgl_router_active_workers gauge\n";
    out += fmt::format("sgl_router_active_workers {}\n", healthy);
    out += "# HELP sgl_router_worker_health 1 when the worker is healthy.\n# TYPE sgl_router_worker_health gauge\n";
    for (const auto& w : workers)
        out += fmt::format("sgl_router_worker_health{{worker=\"{}\"}} {}\n", w.state.url, w.health == Health::kHealthy ? 1 : 0);
    out += "# HELP sgl_router_running_requests Requests in flight per worker.\n# TYPE sgl_router_running_requests gauge\n";
    for (const auto& w : workers)
        out += fmt::format("sgl_router_running_requests{{worker=\"{}\"}} {}\n", w.state.url, w.state.in_flight);
    out += "# HELP sgl_router_worker_waiting_requests Requests queued in the worker's scheduler (its /get_load).\n"
           "# TYPE sgl_router_worker_waiting_requests gauge\n";
    for (const auto& w : workers)
        out += fmt::format("sgl_router_worker_waiting_requests{{worker=\"{}\"}} {}\n", w.state.url, w.state.waiting);
    out += "# HELP sgl_router_processed_requests_total Requests sent to each worker (retries included).\n"
           "# TYPE sgl_router_processed_requests_total counter\n";
    for (const auto& w : workers)
        out += fmt::format("sgl_router_processed_requests_total{{worker=\"{}\"}} {}\n", w.state.url, w.requests);
    out += "# HELP sgl_router_worker_failures_total Attempts that failed on each worker.\n"
           "# TYPE sgl_router_worker_failures_total counter\n";
    for (const auto& w : workers)
        out += fmt::format("sgl_router_worker_failures_total{{worker=\"{}\"}} {}\n", w.state.url, w.failures);
    out += "# HELP sgl_router_retries_total Attempts made again on another worker.\n# TYPE sgl_router_retries_total counter\n";
    out += fmt::format("sgl_router_retries_total {}\n", s.retries.load());
    out += "# HELP sgl_router_cache_hits_total cache_aware picks that followed a prefix match.\n"
           "# TYPE sgl_router_cache_hits_total counter\n";
    out += fmt::format("sgl_router_cache_hits_total {}\n", s.cache_hits.load());
    out += "# HELP sgl_router_cache_misses_total cache_aware picks without a prefix match.\n"
           "# TYPE sgl_router_cache_misses_total counter\n";
    out += fmt::format("sgl_router_cache_misses_total {}\n", s.cache_misses.load());
    std::lock_guard<std::mutex> lock(s.metrics_mu);
    out += "# HELP sgl_router_requests_total Requests received per route.\n# TYPE sgl_router_requests_total counter\n";
    for (const auto& [route, n] : s.requests_by_route) out += fmt::format("sgl_router_requests_total{{route=\"{}\"}} {}\n", route, n);
    out += "# HELP sgl_router_request_errors_total Requests the gateway could not complete, by kind.\n"
           "# TYPE sgl_router_request_errors_total counter\n";
    for (const auto& [kind, n] : s.errors_by_kind)
        out += fmt::format("sgl_router_request_errors_total{{error_type=\"{}\"}} {}\n", kind, n);
    return out;
}

Status add_or_remove(Shared& s, bool add, const std::string& url) {
    if (add) {
        TSR_RETURN_IF_ERROR(s.registry.add(url, Clock::now()));
        s.monitor_cv.notify_all();  // check the new worker now
    } else {
        TSR_RETURN_IF_ERROR(s.registry.remove(url));
        s.sessions.forget_worker(url);
        std::lock_guard<std::mutex> lock(s.route_mu);
        s.router.remove_worker(url);
    }
    TSR_LOG_C(INFO, kLog, "worker {} {}", url, add ? "added" : "removed");
    return Status::Ok();
}

void change_worker(Shared& s, Client& client, bool add, const std::string& url) {
    const Status st = add_or_remove(s, add, url);
    if (!st.ok()) {
        client.respond_error(st.code() == StatusCode::kNotFound ? 404 : 400, st.message(), "invalid_request_error");
        return;
    }
    client.respond(200, kJson, nlohmann::json{{"status", "success"}, {"worker", url}}.dump());
}

void handle(Shared& s, Client& client, const ReadRequest& req) {
    const std::string& path = req.head.path;
    const std::string& method = req.head.method;
    const bool admin = path == "/add_worker" || path == "/remove_worker" || is_broadcast_route(path) ||
                       (path == "/workers" && method != "GET");
    const bool open = path == "/health" || path == "/liveness" || path == "/ping";
    const server::RouteKind kind = open    ? server::RouteKind::kOpen
                                   : admin ? server::RouteKind::kAdmin
                                           : server::RouteKind::kApi;
    server::AccessPolicy policy{s.options.api_key, s.options.admin_api_key, s.options.host, s.options.allowed_hosts};
    if (auto denied = server::check_access(policy, kind, req.head.header("host"), req.head.header("authorization"))) {
        client.respond(denied->http_status, kJson, denied->to_json());
        return;
    }
    s.count(s.requests_by_route, is_generation_route(path) || path == "/v1/models" || path == "/health" ||
                                         path == "/metrics" || path == "/get_server_info" || admin
                                     ? path
                                     : "other");
    auto wrong_method = [&](const char* want) {
        if (method == want) return false;
        client.respond(405, kJson, error_json(405, "use " + std::string(want) + " " + path, "invalid_request_error"),
                       {{"Allow", want}});
        return true;
    };
    if (is_generation_route(path)) {
        if (wrong_method("POST")) return;
        if (s.stopping.load()) {
            client.keep_alive = false;
            client.respond_error(503, "the gateway is shutting down", "service_unavailable");
            return;
        }
        proxy(s, client, req, /*by_policy=*/true);
    } else if (path == "/health" || path == "/liveness" || path == "/readiness" || path == "/ping") {
        const std::size_t healthy = s.registry.healthy_count();
        if (path == "/liveness" || healthy > 0) {
            client.respond(200, kJson, nlohmann::json{{"status", "ok"}, {"healthy_workers", healthy}}.dump());
        } else {
            client.respond_error(503, "no healthy worker: " + describe_workers(s), "service_unavailable");
        }
    } else if (path == "/workers" || path == "/list_workers") {
        if (method == "GET") {
            client.respond(200, kJson, workers_json(s).dump());
            return;
        }
        std::string url = query_param(req.head.query, "url");
        if (url.empty()) {
            const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
            if (body.is_object() && body.contains("url") && body["url"].is_string()) url = body["url"].get<std::string>();
        }
        if (path != "/workers" || (method != "POST" && method != "DELETE") || url.empty()) {
            client.respond_error(400, "POST /workers {\"url\": ...} adds a worker, DELETE /workers?url=... removes one",
                                 "invalid_request_error");
            return;
        }
        change_worker(s, client, method == "POST", url);
    } else if (path == "/add_worker" || path == "/remove_worker") {
        if (wrong_method("POST")) return;
        const std::string url = query_param(req.head.query, "url");
        if (url.empty()) {
            client.respond_error(400, path + " needs ?url=http://host:port", "invalid_request_error");
            return;
        }
        change_worker(s, client, path == "/add_worker", url);
    } else if (path == "/metrics") {
        if (wrong_method("GET")) return;
        std::string text = metrics_text(s);
        if (s.options.replicas) {
            // A worker that does not answer keeps its place (an empty text): dp_rank is its index.
            std::vector<std::string> texts;
            for (const auto& url : s.registry.urls()) {
                auto r = worker_get(s, url, "/metrics", kInfoTimeout);
                texts.push_back(r.ok() && r->status == 200 ? r->body : std::string());
            }
            text += merge_replica_metrics(texts);
        }
        client.respond(200, "text/plain; version=0.0.4; charset=utf-8", text);
    } else if (path == "/get_server_info" || path == "/server_info") {
        if (wrong_method("GET")) return;
        auto infos = gather_json(s, "/get_server_info");
        if (infos.empty()) {
            client.respond_error(503, "no healthy worker answered /get_server_info: " + describe_workers(s),
                                 "service_unavailable");
            return;
        }
        nlohmann::json merged = infos.front().second;
        nlohmann::json states = nlohmann::json::array();
        for (const auto& [url, info] : infos) {
            if (!info.contains("internal_states")) continue;
            for (auto st : info["internal_states"]) {
                st["worker"] = url;
                states.push_back(std::move(st));
            }
        }
        merged["internal_states"] = states;
        if (s.options.replicas) merged["dp_size"] = s.registry.urls().size();
        merged["gateway"] = workers_json(s);
        client.respond(200, kJson, merged.dump());
    } else if (path == "/get_load") {
        if (wrong_method("GET")) return;
        nlohmann::json loads = nlohmann::json::array();
        int dp_rank = 0;
        for (const auto& [url, load] : gather_json(s, "/get_load")) {
            for (auto entry : load.is_array() ? load : nlohmann::json::array({load})) {
                entry["dp_rank"] = dp_rank;
                entry["worker"] = url;
                loads.push_back(std::move(entry));
            }
            ++dp_rank;
        }
        client.respond(200, kJson, loads.dump());
    } else if (is_broadcast_route(path)) {
        // Every worker's cache, aborts, pause or recorder (the recorder on the first only under DP attention).
        if (wrong_method("POST")) return;
        std::string failed;
        std::vector<std::string> urls = s.registry.urls();
        if (s.options.expert_record_first_worker_only && is_expert_record_route(path) && !urls.empty()) urls.resize(1);
        // /pause_generation, /continue_generation and the memory occupation routes answer as
        // one server does (SGLang's JSON).
        const bool memory_route = path == "/release_memory_occupation" || path == "/resume_memory_occupation";
        const bool worker_answer = path == "/pause_generation" || path == "/continue_generation" || memory_route ||
                                   path == "/update_weight_version";
        // A weight update waits for each worker's running requests; its answers are combined.
        const bool weight_update = path == "/update_weights_from_disk";
        std::vector<nlohmann::json> updates;
        std::optional<std::string> answer;
        // Workers' 4xx answers: the request's fault, not the workers'.
        std::vector<net::HttpResponse> refusals;
        const auto send = [&](const std::string& url) {
            auto e = net::parse_http_url(url);
            net::HttpRequest r;
            r.method = "POST";
            r.path = path;
            // A weight update waits for requests and loads, a resume loads.
            r.timeout = path == "/flush_cache"               ? kInfoTimeout
                        : weight_update || memory_route ? std::chrono::milliseconds(std::chrono::hours(24))
                                                         : std::chrono::milliseconds(60'000);
            const std::string auth = req.head.header("authorization");
            if (!auth.empty()) r.headers.emplace_back("Authorization", auth);
            if (!req.body.empty()) {
                r.body = req.body;
                r.headers.emplace_back("Content-Type", "application/json");
            }
            return e.ok() ? net::http_fetch(*e, r) : StatusOr<net::HttpResponse>(e.status());
        };
        std::vector<std::optional<StatusOr<net::HttpResponse>>> answers(urls.size());
        if (weight_update || memory_route) {
            // All at once: under DP attention the groups run them in the same round, each
            // once its own engine takes it.
            std::vector<std::thread> senders;
            for (std::size_t i = 0; i < urls.size(); ++i)
                senders.emplace_back([&, i] { answers[i] = send(urls[i]); });
            for (std::thread& t : senders) t.join();
        } else {
            for (std::size_t i = 0; i < urls.size(); ++i) answers[i] = send(urls[i]);
        }
        for (std::size_t i = 0; i < urls.size(); ++i) {
            const std::string& url = urls[i];
            StatusOr<net::HttpResponse>& got = *answers[i];
            if (weight_update) {
                updates.push_back(weight_update_answer(url, got));
                continue;
            }
            if (got.ok() && got->status >= 400 && got->status < 500) refusals.push_back(*got);
            if (!got.ok() || got->status != 200)
                failed += (failed.empty() ? "" : "; ") + url + ": " +
                          (got.ok() ? "HTTP " + std::to_string(got->status) + " " + got->body : got.status().message());
            else if (!answer)
                answer = got->body;
        }
        if (weight_update) {
            const nlohmann::json combined = combine_weight_updates(updates);
            client.respond(combined["success"].get<bool>() ? 200 : 400, kJson, combined.dump());
        } else if (worker_answer && !refusals.empty()) {
            // Refused: one server's answer, the workers' different reasons joined by " | ".
            std::string message;
            for (const net::HttpResponse& r : refusals) {
                const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
                const std::string why = body.is_object() && body.contains("error") && body["error"].is_object()
                                            ? body["error"].value("message", r.body)
                                            : r.body;
                if (message.find(why) == std::string::npos) message += (message.empty() ? "" : " | ") + why;
            }
            client.respond_error(refusals.front().status, message, "invalid_request_error");
        } else if (!failed.empty())
            client.respond_error(503, "POST " + path + " failed on: " + failed, "service_unavailable");
        else if (worker_answer && answer)
            client.respond(200, kJson, *answer);
        else
            client.respond(200, "text/plain; charset=utf-8", "Done on every worker: POST " + path + "\n");
    } else if (path == "/open_session" || path == "/close_session") {
        session_route(s, client, req);
    } else {
        // /v1/models, /get_model_info, /health_generate, ...: any healthy worker answers.
        proxy(s, client, req, /*by_policy=*/false);
    }
}

void serve_connection(const std::shared_ptr<Shared>& s, int fd) {
    std::string buffer;
    Client client{fd};
    ReadLimits limits;
    limits.max_body = s->options.max_body_bytes;
    while (!client.broken && client.keep_alive) {
        auto got = read_request(fd, buffer, limits);
        if (!got.ok()) {
            client.keep_alive = false;
            const StatusCode code = got.status().code();
            if (code == StatusCode::kOutOfRange)
                client.respond_error(got.status().message().find("headers") != std::string::npos ? 431 : 413,
                                     got.status().message(), "invalid_request_error");
            else if (code == StatusCode::kInvalidArgument)
                client.respond_error(400, got.status().message(), "invalid_request_error");
            break;
        }
        if (!got->has_value()) break;
        const ReadRequest& req = **got;
        client.keep_alive = req.head.keep_alive && !s->stopping.load();
        s->in_flight += 1;
        handle(*s, client, req);
        s->in_flight -= 1;
    }
    {
        std::lock_guard<std::mutex> lock(s->conn_mu);
        s->conn_fds.erase(fd);
    }
    ::close(fd);
    s->connections -= 1;
}

// Health checks, load polls and tree eviction, on one thread.
void monitor(const std::shared_ptr<Shared>& s) {
    auto next_poll = Clock::now();
    auto next_eviction = Clock::now() + s->options.eviction_interval;
    while (!s->stopping.load()) {
        const auto now = Clock::now();
        const std::vector<std::string> due = s->options.health.disabled ? std::vector<std::string>{}
                                                                        : s->registry.due_for_check(now);
        std::vector<std::thread> checks;
        for (const std::string& url : due) {
            checks.emplace_back([s, url] {
                auto r = worker_get(*s, url, s->options.health.endpoint, s->options.health.timeout);
                const bool ok = r.ok() && r->status == 200;
                const std::string error = r.ok() ? "health check answered HTTP " + std::to_string(r->status)
                                                 : r.status().message();
                on_transition(*s, url, s->registry.report(url, ok, ok ? "" : error, Clock::now()), error);
            });
        }
        for (auto& t : checks) t.join();
        if (s->options.load_poll_interval.count() > 0 && now >= next_poll) {
            next_poll = now + s->options.load_poll_interval;
            for (const auto& w : s->registry.snapshot()) {
                if (w.health != Health::kHealthy) continue;
                auto r = worker_get(*s, w.state.url, "/get_load", std::chrono::milliseconds(1'000));
                if (!r.ok() || r->status != 200) continue;
                const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
                std::int64_t waiting = 0, tokens = 0;
                double usage = -1.0;
                for (const auto& e : j.is_array() ? j : nlohmann::json::array({j})) {
                    if (!e.is_object()) continue;
                    waiting += e.value("num_waiting_reqs", std::int64_t{0});
                    tokens += e.value("num_tokens", std::int64_t{0});
                    if (e.contains("token_usage") && e["token_usage"].is_number())
                        usage = std::max(usage, e["token_usage"].get<double>());
                }
                s->registry.set_load(w.state.url, waiting, tokens, usage);
            }
        }
        if (now >= next_eviction) {
            next_eviction = now + s->options.eviction_interval;
            s->sessions.expire(now);
            std::lock_guard<std::mutex> lock(s->route_mu);
            s->router.evict(s->options.max_tree_size);
        }
        std::unique_lock<std::mutex> lock(s->monitor_mu);
        s->monitor_cv.wait_for(lock, kTick);
    }
}

}  // namespace

class Gateway::Impl {
 public:
    explicit Impl(GatewayOptions options) : s_(std::make_shared<Shared>(std::move(options))) {}

    Status start() {
        TSR_RETURN_IF_ERROR(s_->options.validate());
        for (const auto& url : s_->options.worker_urls) TSR_RETURN_IF_ERROR(s_->registry.add(url, Clock::now()));
        TSR_RETURN_IF_ERROR(listen());
        accept_thread_ = std::thread([this] { accept_loop(); });
        monitor_thread_ = std::thread([s = s_] { monitor(s); });
        return Status::Ok();
    }

    int port() const { return port_; }

    void stop(std::chrono::milliseconds drain) {
        if (!accept_thread_.joinable()) return;
        s_->stopping.store(true);
        ::shutdown(listen_fd_, SHUT_RDWR);
        accept_thread_.join();
        ::close(listen_fd_);
        const auto deadline = Clock::now() + drain;
        while (s_->in_flight.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        {
            std::lock_guard<std::mutex> lock(s_->conn_mu);
            for (int fd : s_->conn_fds) ::shutdown(fd, SHUT_RDWR);
        }
        // Connection threads see their sockets close and end; one still waiting on a worker
        // holds only the shared state, so it is left to finish on its own.
        const auto closing = Clock::now() + std::chrono::seconds(2);
        while (s_->connections.load() > 0 && Clock::now() < closing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        s_->monitor_cv.notify_all();
        monitor_thread_.join();
    }

    Shared& shared() { return *s_; }

 private:
    Status listen() {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        addrinfo* res = nullptr;
        const std::string port = std::to_string(s_->options.port);
        if (int rc = ::getaddrinfo(s_->options.host.c_str(), port.c_str(), &hints, &res); rc != 0 || res == nullptr)
            return Status::InvalidArgument("--host " + s_->options.host + ": " + ::gai_strerror(rc));
        const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
            const std::string why = std::strerror(errno);
            ::freeaddrinfo(res);
            if (fd >= 0) ::close(fd);
            return Status(StatusCode::kUnavailable, "cannot listen on " + s_->options.host + ":" + port + ": " + why +
                                                        " (is another server using the port? choose another --port)");
        }
        ::freeaddrinfo(res);
        sockaddr_storage addr{};
        socklen_t len = sizeof(addr);
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
        listen_fd_ = fd;
        return Status::Ok();
    }

    void accept_loop() {
        while (!s_->stopping.load()) {
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (s_->stopping.load()) return;
                std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EMFILE and the like
                continue;
            }
            set_timeouts(fd, kClientIoTimeout);
            if (static_cast<std::size_t>(s_->connections.load()) >= s_->options.max_connections) {
                write_all(fd, response_bytes(503, kJson,
                                             error_json(503, "the gateway has too many open connections (limit " +
                                                                 std::to_string(s_->options.max_connections) + ")",
                                                        "service_unavailable"),
                                             {{"Retry-After", "1"}}, false));
                ::close(fd);
                continue;
            }
            s_->connections += 1;
            {
                std::lock_guard<std::mutex> lock(s_->conn_mu);
                s_->conn_fds.insert(fd);
            }
            std::thread([s = s_, fd] { serve_connection(s, fd); }).detach();
        }
    }

    std::shared_ptr<Shared> s_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::thread accept_thread_;
    std::thread monitor_thread_;
};

Gateway::Gateway(GatewayOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Gateway::~Gateway() { stop(); }
Status Gateway::start() { return impl_->start(); }
int Gateway::port() const { return impl_->port(); }
void Gateway::stop(std::chrono::milliseconds drain) { impl_->stop(drain); }

Status Gateway::add_worker(const std::string& url) { return add_or_remove(impl_->shared(), true, url); }
Status Gateway::remove_worker(const std::string& url) { return add_or_remove(impl_->shared(), false, url); }

std::vector<WorkerInfo> Gateway::workers() const { return impl_->shared().registry.snapshot(); }

}  // namespace tessera::gateway
