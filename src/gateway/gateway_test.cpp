// The gateway over real sockets on 127.0.0.1: tessera's HTTP server over a fake backend as
// workers, and a raw socket worker that dies mid-stream.
#include "gateway/gateway.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "net/http_client.h"
#include "server/http_server.h"
#include "server/http_test_support.h"

namespace tessera::gateway {
namespace {

using std::chrono::milliseconds;

struct Worker {
    Worker() : server(backend, options()) { EXPECT_TRUE(server.start().ok()); }
    static server::HttpServerOptions options() {
        server::HttpServerOptions o;
        o.port = 0;
        o.drain_timeout = milliseconds(200);
        return o;
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(server.port()); }
    server::testing::FakeBackend backend;
    server::HttpServer server;
};

GatewayOptions fast_options(std::vector<std::string> urls, PolicyKind policy = PolicyKind::kRoundRobin) {
    GatewayOptions o;
    o.port = 0;
    o.worker_urls = std::move(urls);
    o.policy = policy;
    o.health.interval = milliseconds(200);
    o.health.first_backoff = milliseconds(50);
    o.retry.initial_backoff = milliseconds(1);
    o.load_poll_interval = milliseconds(100);
    return o;
}

bool wait_healthy(const Gateway& g, std::size_t n) {
    for (int i = 0; i < 200; ++i) {
        std::size_t healthy = 0;
        for (const auto& w : g.workers()) healthy += w.health == Health::kHealthy ? 1 : 0;
        if (healthy == n) return true;
        std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
}

net::HttpResponse post(int port, const std::string& path, const std::string& body) {
    net::HttpEndpoint e{"127.0.0.1", port, ""};
    net::HttpRequest r;
    r.method = "POST";
    r.path = path;
    r.body = body;
    r.headers.emplace_back("Content-Type", "application/json");
    r.timeout = milliseconds(10'000);
    auto got = net::http_fetch(e, r);
    EXPECT_TRUE(got.ok()) << got.status().message();
    return got.ok() ? *got : net::HttpResponse{};
}

net::HttpResponse get(int port, const std::string& path) {
    net::HttpEndpoint e{"127.0.0.1", port, ""};
    net::HttpRequest r;
    r.path = path;
    auto got = net::http_fetch(e, r);
    EXPECT_TRUE(got.ok()) << got.status().message();
    return got.ok() ? *got : net::HttpResponse{};
}

// The `data:` payloads of a streamed POST /v1/completions through the gateway.
std::vector<std::string> stream_events(int port, const std::string& body, int* status) {
    net::HttpEndpoint e{"127.0.0.1", port, ""};
    net::HttpRequest req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body;
    req.headers.emplace_back("Content-Type", "application/json");
    net::HttpResponseHead head;
    net::SseParser sse;
    std::vector<std::string> events;
    const Status st = net::http_call(e, req, &head, [&](std::string_view b) {
        for (auto& ev : sse.feed(b)) events.push_back(ev);
        return true;
    });
    EXPECT_TRUE(st.ok()) << st.message();
    *status = head.status;
    return events;
}

const std::string kCompletion = R"({"model": "tiny", "prompt": "hello", "max_tokens": 3})";

TEST(GatewayTest, PassesCompletionsAndStreamsThrough) {
    Worker w;
    Gateway g(fast_options({w.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    auto r = post(g.port(), "/v1/completions", kCompletion);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(nlohmann::json::parse(r.body)["choices"][0]["text"], "t1 t2 t3 ");

    int status = 0;
    const auto events =
        stream_events(g.port(), R"({"model": "tiny", "prompt": "hello", "max_tokens": 3, "stream": true})", &status);
    EXPECT_EQ(status, 200);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_EQ(get(g.port(), "/v1/models").status, 200);
}

// A session lives in one worker's engine: the gateway opens it on one worker and sends every
// turn and the close there, whatever the policy says.
TEST(GatewayTest, ASessionsTurnsAndCloseGoToTheWorkerHoldingIt) {
    Worker a, b;
    Gateway g(fast_options({a.url(), b.url()}, PolicyKind::kRoundRobin));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    std::vector<std::string> ids;
    for (int i = 0; i < 4; ++i) {
        auto r = post(g.port(), "/open_session", R"({"capacity_of_str_len": 10})");
        ASSERT_EQ(r.status, 200) << r.body;
        ids.push_back(nlohmann::json::parse(r.body).get<std::string>());
    }
    EXPECT_EQ(a.backend.open_sessions().size(), 2u) << "sessions are spread over the workers";
    EXPECT_EQ(b.backend.open_sessions().size(), 2u);
    auto r = post(g.port(), "/open_session", R"({"capacity_of_str_len": 10, "session_id": "mine"})");
    ASSERT_EQ(r.status, 200) << r.body;
    Worker& holder = a.backend.open_sessions().count("mine") ? a : b;
    Worker& other = &holder == &a ? b : a;
    const std::size_t before = holder.backend.requests().size();
    for (int i = 0; i < 6; ++i) {
        r = post(g.port(), "/generate",
                 R"({"text": "hi", "sampling_params": {"max_new_tokens": 2}, "session_params": {"id": "mine"}})");
        EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_EQ(holder.backend.requests().size(), before + 6) << "every turn on the holder, not round robin";
    r = post(g.port(), "/open_session", R"({"capacity_of_str_len": 10, "session_id": "mine"})");
    EXPECT_EQ(r.status, 400) << "the same id goes to its holder, which refuses the duplicate: " << r.body;
    EXPECT_EQ(other.backend.open_sessions().count("mine"), 0u);
    r = post(g.port(), "/close_session", R"({"session_id": "mine"})");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(holder.backend.open_sessions().count("mine"), 0u);
    EXPECT_EQ(post(g.port(), "/close_session", R"({"session_id": "never"})").status, 200) << "as a worker answers";
    r = post(g.port(), "/close_session", R"({"capacity_of_str_len": 10})");
    EXPECT_EQ(r.status, 400) << "a worker's refusal of a close without an id: " << r.body;

    // The holder gone, its sessions' turns are refused instead of sent where the session is not.
    r = post(g.port(), "/open_session", R"({"capacity_of_str_len": 10, "session_id": "on-b"})");
    ASSERT_EQ(r.status, 200);
    const bool on_a = a.backend.open_sessions().count("on-b") != 0;
    ASSERT_TRUE(g.remove_worker(on_a ? a.url() : b.url()).ok());
    r = post(g.port(), "/generate", R"({"text": "hi", "session_params": {"id": "on-b"}})");
    EXPECT_EQ(r.status, 200) << "a forgotten session goes by policy; the worker answers for it: " << r.body;
}

TEST(GatewayTest, ASessionOnAnUnhealthyWorkerIsRefusedNotMoved) {
    std::unique_ptr<Worker> workers[2] = {std::make_unique<Worker>(), std::make_unique<Worker>()};
    GatewayOptions o = fast_options({workers[0]->url(), workers[1]->url()});
    o.replicas = true;
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    auto r = post(g.port(), "/open_session", R"({"capacity_of_str_len": 10, "session_id": "s"})");
    ASSERT_EQ(r.status, 200) << r.body;
    const int holder = workers[0]->backend.open_sessions().count("s") != 0 ? 0 : 1;
    r = post(g.port(), "/generate", R"({"text": "hi", "session_params": {"id": "s"}, "data_parallel_rank": )" +
                                        std::to_string(1 - holder) + "}");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("is held by DP rank " + std::to_string(holder)), std::string::npos) << r.body;
    workers[holder]->server.stop();
    workers[holder].reset();
    for (int i = 0; i < 500 && g.workers()[static_cast<std::size_t>(holder)].health == Health::kHealthy; ++i)
        std::this_thread::sleep_for(milliseconds(10));
    r = post(g.port(), "/generate", R"({"text": "hi", "session_params": {"id": "s"}})");
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_NE(r.body.find("holding session s cannot take requests"), std::string::npos) << r.body;
}

// The front of DP replicas merges their /metrics: each sample gets its replica's dp_rank, and
// each family comes once, described once, with every replica's samples together.
TEST(GatewayTest, ReplicaMetricsAreMergedFamilyByFamily) {
    Worker a, b;
    GatewayOptions o = fast_options({a.url(), b.url()});
    o.replicas = true;
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    const std::string text = get(g.port(), "/metrics").body;
    const auto at = [&](const std::string& s) { return text.find(s); };
    const std::size_t help = at("# HELP sglang:num_running_reqs Running requests.");
    const std::size_t running0 = at("sglang:num_running_reqs{dp_rank=\"0\",model_name=\"tiny\"} 0");
    const std::size_t running1 = at("sglang:num_running_reqs{dp_rank=\"1\",model_name=\"tiny\"} 0");
    const std::size_t step = at("# TYPE sglang:step_seconds histogram");
    const std::size_t bucket1 = at("sglang:step_seconds_bucket{dp_rank=\"1\",");
    const std::size_t count0 = at("sglang:step_seconds_count{dp_rank=\"0\",");
    for (std::size_t p : {help, running0, running1, step, bucket1, count0}) ASSERT_NE(p, std::string::npos) << text;
    EXPECT_LT(help, running0);
    EXPECT_LT(running1, step) << "both replicas' samples before the next family: " << text;
    EXPECT_LT(step, count0);
    EXPECT_EQ(text.find("# HELP sglang:num_running_reqs", help + 1), std::string::npos) << "described once";
    EXPECT_EQ(text.find("# TYPE sglang:step_seconds", step + 1), std::string::npos);
}

TEST(GatewayTest, ClientErrorsPassThroughWithoutRetryOrHealthPenalty) {
    Worker a, b;
    GatewayOptions o = fast_options({a.url(), b.url()});
    o.health.failure_threshold = 1;
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    for (int i = 0; i < 4; ++i) {
        auto r = post(g.port(), "/v1/completions", R"({"model": "tiny", "prompt": "__reject__"})");
        EXPECT_EQ(r.status, 400) << r.body;
    }
    std::int64_t requests = 0;
    for (const auto& w : g.workers()) {
        EXPECT_EQ(w.health, Health::kHealthy);
        EXPECT_EQ(w.failures, 0);
        requests += w.requests;
    }
    EXPECT_EQ(requests, 4) << "no retries";
}

TEST(GatewayTest, RetriesOnAnotherWorkerWhenOneIsGone) {
    auto a = std::make_unique<Worker>();
    Worker b;
    GatewayOptions o = fast_options({a->url(), b.url()});
    o.health.interval = milliseconds(60'000);  // only failed requests reveal the death
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    a->server.stop();
    a.reset();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(post(g.port(), "/v1/completions", kCompletion).status, 200);
    const auto ws = g.workers();
    EXPECT_EQ(ws[0].health, Health::kUnhealthy) << "3 consecutive failures";
    EXPECT_EQ(ws[0].failures, 3);
    EXPECT_EQ(ws[1].requests, 6);
    EXPECT_NE(get(g.port(), "/metrics").body.find("sgl_router_retries_total 3"), std::string::npos);
}

TEST(GatewayTest, BusyWorkersAreTriedInTurnAndTheLastAnswerPassedOn) {
    Worker a, b;
    Gateway g(fast_options({a.url(), b.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    auto r = post(g.port(), "/v1/completions", R"({"model": "tiny", "prompt": "__full__"})");
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_NE(r.body.find("queue is full"), std::string::npos) << r.body;
    for (const auto& w : g.workers()) {
        EXPECT_EQ(w.requests, 1) << "each worker tried once, the failed one excluded";
        EXPECT_EQ(w.health, Health::kHealthy) << "a full queue is not ill health";
    }
}

TEST(GatewayTest, NoHealthyWorkerIsAClearError) {
    GatewayOptions o = fast_options({"http://127.0.0.1:1"});
    Gateway g(o);
    ASSERT_TRUE(g.start().ok()) << "the gateway starts while its workers are down";
    auto r = post(g.port(), "/v1/completions", kCompletion);
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("no healthy worker"), std::string::npos) << r.body;
    EXPECT_EQ(get(g.port(), "/health").status, 503);
    EXPECT_EQ(get(g.port(), "/liveness").status, 200);
}

TEST(GatewayTest, WorkersAddedAtRunTimeGetTraffic) {
    Worker a, b;
    Gateway g(fast_options({a.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    auto added = post(g.port(), "/add_worker?url=" + b.url(), "");
    EXPECT_EQ(added.status, 200) << added.body;
    EXPECT_EQ(post(g.port(), "/add_worker?url=" + b.url(), "").status, 400) << "already there";
    ASSERT_TRUE(wait_healthy(g, 2));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(post(g.port(), "/v1/completions", kCompletion).status, 200);
    EXPECT_EQ(g.workers().at(1).requests, 2);
    auto listed = nlohmann::json::parse(get(g.port(), "/list_workers").body);
    EXPECT_EQ(listed["urls"].size(), 2u);
    EXPECT_EQ(post(g.port(), "/remove_worker?url=" + a.url(), "").status, 200);
    EXPECT_EQ(post(g.port(), "/remove_worker?url=" + a.url(), "").status, 404);
    EXPECT_EQ(g.workers().size(), 1u);
}

TEST(GatewayTest, KeysAreCheckedAndTheClientsKeyReachesTheWorker) {
    server::testing::FakeBackend backend;
    server::HttpServerOptions wo = Worker::options();
    wo.api_key = "sk-worker";
    server::HttpServer keyed(backend, wo);
    ASSERT_TRUE(keyed.start().ok());
    GatewayOptions o = fast_options({"http://127.0.0.1:" + std::to_string(keyed.port())});
    o.api_key = "sk-worker";
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    EXPECT_EQ(post(g.port(), "/v1/completions", kCompletion).status, 401) << "no key";
    EXPECT_EQ(get(g.port(), "/health").status, 200) << "open, as on a worker";
    net::HttpEndpoint e{"127.0.0.1", g.port(), ""};
    net::HttpRequest r;
    r.method = "POST";
    r.path = "/v1/completions";
    r.body = kCompletion;
    r.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer sk-worker"}};
    auto got = net::http_fetch(e, r);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->status, 200) << got->body;
    keyed.stop();
}

TEST(GatewayTest, AClientLeavingMidStreamAbortsTheWorkersRequest) {
    Worker w;
    Gateway g(fast_options({w.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    net::HttpEndpoint e{"127.0.0.1", g.port(), ""};
    net::HttpRequest req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"model": "tiny", "prompt": "hello", "max_tokens": 4000, "stream": true})";
    req.headers.emplace_back("Content-Type", "application/json");
    net::HttpResponseHead head;
    int pieces = 0;
    // The client stops reading after two pieces of the stream and closes its connection.
    ASSERT_TRUE(net::http_call(e, req, &head, [&](std::string_view) { return ++pieces < 2; }).ok());
    ASSERT_EQ(head.status, 200);
    bool aborted = false;
    for (int i = 0; i < 300 && !aborted; ++i) {
        for (const auto& r : w.backend.requests()) aborted = aborted || w.backend.was_aborted(r.request_id);
        std::this_thread::sleep_for(milliseconds(10));
    }
    EXPECT_TRUE(aborted) << "the worker's request must not run on for a client that left";
}

TEST(GatewayTest, AdminRoutesReachEveryWorker) {
    Worker a;
    auto b = std::make_unique<Worker>();
    Gateway g(fast_options({a.url(), b->url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    auto flushed = post(g.port(), "/flush_cache", "");
    EXPECT_EQ(flushed.status, 200) << flushed.body;
    const std::string gone = b->url();
    b->server.stop();
    b.reset();
    flushed = post(g.port(), "/flush_cache", "");
    EXPECT_EQ(flushed.status, 503);
    EXPECT_NE(flushed.body.find(gone), std::string::npos) << "names the worker that did not flush: " << flushed.body;
    EXPECT_EQ(post(g.port(), "/start_expert_distribution_record", "").status, 503) << "fanned out, so the dead worker shows";
}

// The memory occupation and weight version routes reach every worker and answer as one server
// does; when the workers refuse, their different reasons are joined (under DP attention one
// group may be busy while the other gives up waiting for it).
TEST(GatewayTest, RlRoutesReachEveryWorkerAndRefusalsAreJoined) {
    Worker a, b;
    Gateway g(fast_options({a.url(), b.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    auto released = post(g.port(), "/release_memory_occupation", R"({"tags": ["weights"]})");
    EXPECT_EQ(released.status, 200) << released.body;
    EXPECT_EQ(released.body, "null");
    EXPECT_EQ(a.backend.memory_calls(), (std::vector<std::string>{"release weights"}));
    EXPECT_EQ(b.backend.memory_calls(), (std::vector<std::string>{"release weights"}));
    a.backend.memory_answer = Status::InvalidArgument("group 0 is busy");
    b.backend.memory_answer = Status::InvalidArgument("group 1 gave up");
    auto refused = post(g.port(), "/resume_memory_occupation", "{}");
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_NE(refused.body.find("group 0 is busy | group 1 gave up"), std::string::npos) << refused.body;
    b.backend.memory_answer = Status::InvalidArgument("group 0 is busy");
    refused = post(g.port(), "/resume_memory_occupation", "{}");
    EXPECT_NE(refused.body.find(R"("message":"group 0 is busy")"), std::string::npos) << "one reason once: "
                                                                                        << refused.body;
    // The weight version every worker reports; SageMaker's /ping answered by the front.
    auto version = post(g.port(), "/update_weight_version", R"({"new_version": "step-3"})");
    EXPECT_EQ(version.status, 200) << version.body;
    for (const Worker* w : {&a, &b})
        EXPECT_NE(get(w->server.port(), "/model_info").body.find(R"("weight_version":"step-3")"), std::string::npos);
    EXPECT_EQ(get(g.port(), "/ping").status, 200);
}

// /abort_request goes to every worker with its body: a request id may be on any of them. Also
// for DP-attention groups, whose recorder commands go to the first worker only.
TEST(GatewayTest, AbortRequestReachesEveryWorker) {
    Worker a, b;
    GatewayOptions o = fast_options({a.url(), b.url()}, PolicyKind::kRoundRobin);
    o.expert_record_first_worker_only = true;
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    net::HttpResponse first, second;
    const auto long_generate = [&](const std::string& rid, net::HttpResponse& out) {
        return std::thread([&, rid] {
            out = post(g.port(), "/generate",
                       R"({"text": "x", "rid": ")" + rid + R"(", "sampling_params": {"max_new_tokens": 3000}})");
        });
    };
    std::thread one = long_generate("job-1", first), two = long_generate("job-2", second);
    for (int i = 0; i < 300 && a.backend.n_active() + b.backend.n_active() < 2; ++i)
        std::this_thread::sleep_for(milliseconds(10));
    ASSERT_EQ(a.backend.n_active(), 1u) << "round robin puts one on each worker";
    ASSERT_EQ(b.backend.n_active(), 1u);
    const auto aborted = post(g.port(), "/abort_request", R"({"rid": "job-"})");
    EXPECT_EQ(aborted.status, 200) << aborted.body;
    one.join();
    two.join();
    EXPECT_NE(first.body.find("\"abort\""), std::string::npos) << first.body;
    EXPECT_NE(second.body.find("\"abort\""), std::string::npos) << second.body;
    EXPECT_TRUE(a.backend.was_aborted("job-1") || a.backend.was_aborted("job-2"));
    EXPECT_TRUE(b.backend.was_aborted("job-1") || b.backend.was_aborted("job-2"));
}

// /pause_generation and /continue_generation reach every worker, with their bodies, and answer
// with the worker's JSON.
TEST(GatewayTest, PauseAndContinueReachEveryWorker) {
    Worker a, b;
    GatewayOptions o = fast_options({a.url(), b.url()});
    o.expert_record_first_worker_only = true;  // as the DP-attention front
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    const auto paused = post(g.port(), "/pause_generation", R"({"mode": "retract"})");
    EXPECT_EQ(paused.status, 200) << paused.body;
    EXPECT_EQ(paused.body, R"({"message":"Generation paused successfully.","status":"ok"})");
    EXPECT_EQ(post(g.port(), "/continue_generation", "{}").status, 200);
    for (const Worker* w : {&a, &b})
        EXPECT_EQ(w->backend.pauses(), (std::vector<std::string>{"retract", "continue"}));
}

TEST(GatewayTest, InFlightTokensAreCountedByTheGivenCounter) {
    Worker w;
    w.backend.hold_until_active(2);  // the first request stays in flight until a second comes
    GatewayOptions o = fast_options({w.url()}, PolicyKind::kTotalTokens);
    o.count_tokens = [](std::string_view text) { return static_cast<std::int64_t>(10 * text.size()); };
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    std::thread first([&] { post(g.port(), "/v1/completions", R"({"model": "tiny", "prompt": "hello", "max_tokens": 2})"); });
    std::int64_t seen = 0;
    for (int i = 0; i < 300 && seen == 0; ++i) {
        seen = g.workers().at(0).state.in_flight_tokens;
        std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_EQ(seen, 50) << "10 x the 5 bytes of \"hello\"";
    post(g.port(), "/v1/completions", R"({"model": "tiny", "prompt": "hi", "max_tokens": 2})");
    first.join();
    // The gateway ends its count right after the client has the answer: wait for it.
    for (int i = 0; i < 300 && g.workers().at(0).state.in_flight_tokens != 0; ++i)
        std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(g.workers().at(0).state.in_flight_tokens, 0);
}

// A listening socket on 127.0.0.1, any free port.
int listen_on_loopback(int* port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd, 16);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
    return fd;
}

// A worker that answers every request with "{}" and counts the connections that carried a
// POST; it keeps connections open unless `close_after_answer`, when it closes each one after
// its answer without saying so (as a server whose keep-alive timer ran out would).
class CountingWorker {
 public:
    explicit CountingWorker(bool close_after_answer) : close_(close_after_answer) {
        fd_ = listen_on_loopback(&port_);
        thread_ = std::thread([this] {
            for (;;) {
                const int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                conns_.emplace_back([this, c] { serve(c); });
            }
        });
    }
    ~CountingWorker() {
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
        for (auto& t : conns_) t.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    int post_connections() const { return post_connections_.load(); }

 private:
    void serve(int c) {
        std::string buf;
        bool counted = false;
        char io[4096];
        for (;;) {
            std::size_t end;
            while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
                const ssize_t n = ::recv(c, io, sizeof(io), 0);
                if (n <= 0) {
                    ::close(c);
                    return;
                }
                buf.append(io, static_cast<std::size_t>(n));
            }
            std::size_t body = 0;
            if (auto cl = buf.find("Content-Length: "); cl != std::string::npos && cl < end)
                body = std::stoul(buf.substr(cl + 16));
            while (buf.size() < end + 4 + body) {
                const ssize_t n = ::recv(c, io, sizeof(io), 0);
                if (n <= 0) {
                    ::close(c);
                    return;
                }
                buf.append(io, static_cast<std::size_t>(n));
            }
            if (buf.rfind("POST", 0) == 0 && !counted) {
                counted = true;
                post_connections_ += 1;
            }
            buf.erase(0, end + 4 + body);
            const std::string out = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
            ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
            if (close_) {
                ::close(c);
                return;
            }
        }
    }

    const bool close_;
    int fd_ = -1;
    int port_ = 0;
    std::atomic<int> post_connections_{0};
    std::thread thread_;
    std::vector<std::thread> conns_;
};

TEST(GatewayTest, ConnectionsToWorkersAreReusedAndStaleOnesReplaced) {
    CountingWorker keeps(/*close_after_answer=*/false);
    {
        Gateway g(fast_options({keeps.url()}));
        ASSERT_TRUE(g.start().ok());
        ASSERT_TRUE(wait_healthy(g, 1));
        for (int i = 0; i < 5; ++i) EXPECT_EQ(post(g.port(), "/generate", R"({"text": "x"})").status, 200);
        EXPECT_EQ(keeps.post_connections(), 1) << "five requests over one kept-alive connection";
    }
    CountingWorker closes(/*close_after_answer=*/true);
    Gateway g(fast_options({closes.url()}));
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 1));
    for (int i = 0; i < 5; ++i) EXPECT_EQ(post(g.port(), "/generate", R"({"text": "x"})").status, 200);
    EXPECT_EQ(closes.post_connections(), 5) << "a connection the worker closed is never reused";
}

// A worker that answers a stream's head and one event, then drops the connection.
class DyingStreamWorker {
 public:
    DyingStreamWorker() {
        fd_ = listen_on_loopback(&port_);
        thread_ = std::thread([this] {
            for (;;) {
                const int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                char buf[8192];
                const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
                const std::string req(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
                std::string out;
                if (req.rfind("GET /health", 0) == 0) {
                    out = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                } else {
                    out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "10\r\ndata: {\"a\": 1}\n\n\r\n";
                }
                ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
                ::close(c);
            }
        });
    }
    ~DyingStreamWorker() {
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
    int fd_ = -1;
    int port_ = 0;
    std::thread thread_;
};

TEST(GatewayTest, AStreamThatBreaksEndsWithAnErrorEventAndIsNotReplayed) {
    DyingStreamWorker dying;
    Worker healthy;
    GatewayOptions o = fast_options({dying.url(), healthy.url()});
    Gateway g(o);
    ASSERT_TRUE(g.start().ok());
    ASSERT_TRUE(wait_healthy(g, 2));
    int status = 0;
    const auto events = stream_events(g.port(), R"({"model": "tiny", "prompt": "hello", "stream": true})", &status);
    EXPECT_EQ(status, 200);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0], "{\"a\": 1}");
    EXPECT_NE(events[1].find("failed mid-stream"), std::string::npos) << events[1];
    EXPECT_EQ(g.workers().at(1).requests, 0) << "not replayed on the other worker";
}

}  // namespace
}  // namespace tessera::gateway
