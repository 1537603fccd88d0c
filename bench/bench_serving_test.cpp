// Tests of `tessera bench serve`'s logic against a fake OpenAI-compatible server that
// streams tokens on a known schedule (TTFT, then one token per ITL), fails chosen requests,
// and records when each request arrived and how many were in flight at once.

#include "bench/bench_serving.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct FakeServerConfig {
    std::chrono::milliseconds ttft{50};
    std::chrono::milliseconds itl{20};
    int fail_every = 0;          // request k (1-based) with k % fail_every == 0 → HTTP 500
    int stream_error_every = 0;  // ... → an error event after the first token
    bool send_usage = true;      // the usage chunk of OpenAI streams
};

// A threaded HTTP/1.1 server on 127.0.0.1 speaking just enough of the OpenAI streaming API
// (and SGLang's /generate) for the client under test. One thread per connection.
class FakeOpenAiServer {
 public:
    explicit FakeOpenAiServer(FakeServerConfig config) : config_(config), start_(Clock::now()) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        const int one = 1;
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = 0;
        EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        EXPECT_EQ(::listen(listen_fd_, 256), 0);
        socklen_t len = sizeof(addr);
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = ntohs(addr.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~FakeOpenAiServer() {
        stop_ = true;
        acceptor_.join();
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& t : workers_) t.join();
        ::close(listen_fd_);
    }

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    int max_in_flight() const { return max_in_flight_.load(); }
    int generation_requests() const { return n_generation_.load(); }
    // Seconds since the server started, when each generation request was fully read.
    std::vector<double> arrivals() {
        std::lock_guard<std::mutex> lock(mu_);
        std::vector<double> a = arrivals_;
        std::sort(a.begin(), a.end());
        return a;
    }
    Json last_body() {
        std::lock_guard<std::mutex> lock(mu_);
        return last_body_;
    }

 private:
    void accept_loop() {
        while (!stop_) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            const int fd = ::accept(listen_fd_, nullptr, nullptr);
            if (fd < 0) continue;
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            std::lock_guard<std::mutex> lock(mu_);
            workers_.emplace_back([this, fd] {
                handle(fd);
                ::close(fd);
            });
        }
    }

    static bool write_all(int fd, const std::string& s) {
        std::size_t off = 0;
        while (off < s.size()) {
            const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    static std::string chunk(const std::string& payload) {
        char size[32];
        std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
        return size + payload + "\r\n";
    }
    static std::string sse(const Json& j) { return chunk("data: " + j.dump() + "\n\n"); }

    void handle(int fd) {
        std::string buf;
        char io[4096];
        std::size_t header_end;
        while ((header_end = buf.find("\r\n\r\n")) == std::string::npos) {
            const ssize_t n = ::recv(fd, io, sizeof(io), 0);
            if (n <= 0) return;
            buf.append(io, static_cast<std::size_t>(n));
        }
        const std::string head = buf.substr(0, header_end);
        std::size_t content_length = 0;
        const std::size_t cl = head.find("Content-Length: ");
        if (cl != std::string::npos) content_length = std::stoul(head.substr(cl + 16));
        std::string body = buf.substr(header_end + 4);
        while (body.size() < content_length) {
            const ssize_t n = ::recv(fd, io, sizeof(io), 0);
            if (n <= 0) return;
            body.append(io, static_cast<std::size_t>(n));
        }
        const Clock::time_point t0 = Clock::now();
        const std::string path =
            head.substr(head.find(' ') + 1, head.find(' ', head.find(' ') + 1) - head.find(' ') - 1);
        if (path == "/v1/models") {
            const std::string j = R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})";
            write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(j.size()) + "\r\nConnection: close\r\n\r\n" + j);
            return;
        }
        const Json req = Json::parse(body, nullptr, false);
        const int k = ++n_generation_;
        {
            std::lock_guard<std::mutex> lock(mu_);
            arrivals_.push_back(std::chrono::duration<double>(t0 - start_).count());
            last_body_ = req;
        }
        if (config_.fail_every > 0 && k % config_.fail_every == 0) {
            const std::string j = R"({"error":{"message":"fake failure )" + std::to_string(k) + R"("}})";
            write_all(fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(j.size()) + "\r\nConnection: close\r\n\r\n" + j);
            return;
        }
        const int now_in_flight = ++in_flight_;
        for (int m = max_in_flight_.load();
             now_in_flight > m && !max_in_flight_.compare_exchange_weak(m, now_in_flight);) {
        }
        const bool native = path == "/generate";
        const bool chat = path == "/v1/chat/completions";
        const std::int64_t n_tokens = native ? req["sampling_params"]["max_new_tokens"].get<std::int64_t>()
                                             : req["max_tokens"].get<std::int64_t>();
        write_all(fd,
                  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                  "Connection: close\r\n\r\n");
        std::string text;
        for (std::int64_t i = 0; i < n_tokens; ++i) {
            std::this_thread::sleep_until(t0 + config_.ttft + config_.itl * i);
            if (i == 1 && config_.stream_error_every > 0 && k % config_.stream_error_every == 0) {
                --in_flight_;
                write_all(fd, sse(Json{{"error", {{"message", "fake stream error"}}}}) + chunk("data: [DONE]\n\n") +
                                  "0\r\n\r\n");
                return;
            }
            const std::string piece = " t" + std::to_string(i);
            text += piece;
            Json c;
            if (native) {
                c = {{"text", text},
                     {"meta_info",
                      {{"completion_tokens", i + 1},
                       {"prompt_tokens", 7},
                       {"finish_reason", i + 1 == n_tokens ? Json{{"type", "length"}} : Json(nullptr)}}}};
            } else if (chat) {
                c = {{"choices",
                      Json::array({{{"index", 0}, {"delta", {{"content", piece}}}, {"finish_reason", nullptr}}})}};
            } else {
                c = {{"choices", Json::array({{{"index", 0}, {"text", piece}, {"finish_reason", nullptr}}})}};
            }
            if (native && i + 1 == n_tokens) --in_flight_;  // before the client can see the end
            write_all(fd, sse(c));
        }
        if (!native) {
            --in_flight_;
            std::string tail;
            if (config_.send_usage)
                tail += sse(Json{{"choices", Json::array()},
                                 {"usage", {{"prompt_tokens", 7}, {"completion_tokens", n_tokens}}}});
            tail += chunk("data: [DONE]\n\n");
            write_all(fd, tail);
        }
        write_all(fd, "0\r\n\r\n");
    }

    const FakeServerConfig config_;
    const Clock::time_point start_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread acceptor_;
    std::atomic<int> in_flight_{0};
    std::atomic<int> max_in_flight_{0};
    std::atomic<int> n_generation_{0};
    std::mutex mu_;
    std::vector<std::thread> workers_;  // GUARDED_BY(mu_)
    std::vector<double> arrivals_;      // GUARDED_BY(mu_)
    Json last_body_;                    // GUARDED_BY(mu_)
};

std::vector<BenchPrompt> prompts(int n, std::int64_t output_len) {
    return std::vector<BenchPrompt>(static_cast<std::size_t>(n), BenchPrompt{"hello world", 2, output_len});
}

BenchServeOptions options_for(const FakeOpenAiServer& server, ApiBackend backend = ApiBackend::kOpenAi) {
    BenchServeOptions o;
    o.base_url = server.url();
    auto ep = parse_http_url(o.base_url);
    EXPECT_TRUE(ep.ok());
    o.request.endpoint = *ep;
    o.request.backend = backend;
    o.request.model = "fake-model";
    o.warmup_requests = 0;
    o.show_progress = false;
    return o;
}

void expect_within(double actual, double expected, double rel, const char* what) {
    EXPECT_NEAR(actual, expected, expected * rel) << what;
}

// ---- the client pieces ----------------------------------------------------------------

TEST(HttpClientTest, ParsesUrls) {
    auto e = parse_http_url("http://127.0.0.1:30000");
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->host, "127.0.0.1");
    EXPECT_EQ(e->port, 30000);
    EXPECT_EQ(e->path_prefix, "");
    e = parse_http_url("http://localhost:8080/api/");
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->path_prefix, "/api");
    e = parse_http_url("http://[::1]:9000");
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->host, "::1");
    EXPECT_EQ(e->port, 9000);
    EXPECT_EQ(parse_http_url("http://example.com")->port, 80);
    EXPECT_FALSE(parse_http_url("https://x:1").ok());
    EXPECT_FALSE(parse_http_url("http://x:0").ok());
    EXPECT_FALSE(parse_http_url("http://x:abc").ok());
}

TEST(HttpClientTest, DecodesChunkedBodiesSplitAnywhere) {
    const std::string wire = "4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n";
    for (std::size_t step = 1; step <= wire.size(); ++step) {
        ChunkedDecoder d;
        std::string out;
        for (std::size_t i = 0; i < wire.size(); i += step) {
            ASSERT_TRUE(d.feed(std::string_view(wire).substr(i, step), [&](std::string_view b) {
                             out.append(b);
                             return true;
                         }).ok());
        }
        EXPECT_TRUE(d.done()) << "step " << step;
        EXPECT_EQ(out, "Wikipedia in \r\n\r\nchunks.") << "step " << step;
    }
    ChunkedDecoder bad;
    EXPECT_FALSE(bad.feed("zz\r\n", [](std::string_view) { return true; }).ok());
}

TEST(HttpClientTest, SplitsSseDataLines) {
    SseParser p;
    EXPECT_TRUE(p.feed("data: {\"a\"").empty());
    auto ev = p.feed(":1}\r\n\r\nevent: x\ndata:[DONE]\n");
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0], "{\"a\":1}");
    EXPECT_EQ(ev[1], "[DONE]");
}

TEST(LatencyStatsTest, MatchesNumpyPercentiles) {
    std::vector<double> v = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
    LatencySummary s = summarize(v);
    EXPECT_DOUBLE_EQ(s.mean, 5.5);
    EXPECT_DOUBLE_EQ(s.median, 5.5);
    EXPECT_NEAR(s.p90, 9.1, 1e-12);
    EXPECT_NEAR(s.p99, 9.91, 1e-12);
    EXPECT_DOUBLE_EQ(s.min, 1);
    EXPECT_DOUBLE_EQ(s.max, 10);
    EXPECT_EQ(summarize({}).count, 0u);
}

TEST(ArrivalsTest, PoissonGapsHaveTheRequestedRate) {
    const auto t = poisson_arrival_offsets(20000, 50.0, 3);
    ASSERT_EQ(t.size(), 20000u);
    EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
    expect_within(t.back() / 20000.0, 1.0 / 50.0, 0.03, "mean gap");
    // Exponential gaps: the standard deviation equals the mean.
    double sum2 = 0.0;
    for (std::size_t i = 1; i < t.size(); ++i) sum2 += (t[i] - t[i - 1]) * (t[i] - t[i - 1]);
    const double sd = std::sqrt(sum2 / (t.size() - 1) - std::pow(t.back() / t.size(), 2));
    expect_within(sd, 1.0 / 50.0, 0.05, "gap std");
    EXPECT_EQ(poisson_arrival_offsets(5, std::numeric_limits<double>::infinity(), 1), std::vector<double>(5, 0.0));
    EXPECT_EQ(poisson_arrival_offsets(10, 5.0, 9), poisson_arrival_offsets(10, 5.0, 9));
}

// ---- against the fake server ----------------------------------------------------------

// TTFT 100 ms, then one token every 25 ms: 12 tokens take 100 + 11·25 = 375 ms. 8 requests,
// 4 at a time, all at once: two waves, 750 ms; 96 tokens → 128 tok/s. (A long TTFT keeps the
// client's fixed costs — connect, thread start — small; 10% leaves room for the scheduling
// noise of a 2-core machine running other tests at the same time (5% failed now and then),
// while a wrong schedule is off by a whole TTFT or ITL.)
constexpr double kScheduleTolerance = 0.10;
void check_schedule(ApiBackend backend, bool send_usage) {
    SCOPED_TRACE(std::string(api_backend_name(backend)) + (send_usage ? " with usage" : " without usage"));
    FakeOpenAiServer server(
        {.ttft = std::chrono::milliseconds(100), .itl = std::chrono::milliseconds(25), .send_usage = send_usage});
    BenchServeOptions o = options_for(server, backend);
    o.max_concurrency = 4;
    auto r = run_benchmark(o, prompts(8, 12));
    ASSERT_TRUE(r.ok()) << r.status().message();
    const BenchServeMetrics& m = r->metrics;
    EXPECT_EQ(m.completed, 8);
    EXPECT_EQ(m.failed, 0);
    EXPECT_EQ(m.total_output_tokens, 8 * 12);
    EXPECT_EQ(m.total_input_tokens, 8 * 2);
    expect_within(m.ttft_ms.mean, 100.0, kScheduleTolerance, "mean TTFT");
    expect_within(m.ttft_ms.median, 100.0, kScheduleTolerance, "median TTFT");
    expect_within(m.itl_ms.mean, 25.0, kScheduleTolerance, "mean ITL");
    expect_within(m.itl_ms.median, 25.0, kScheduleTolerance, "median ITL");
    expect_within(m.tpot_ms.mean, 25.0, kScheduleTolerance, "mean TPOT");
    expect_within(m.e2e_latency_ms.mean, 375.0, kScheduleTolerance, "mean E2E");
    expect_within(m.duration_s, 0.750, kScheduleTolerance, "duration");
    expect_within(m.output_throughput, 96 / 0.750, kScheduleTolerance, "output tok/s");
    expect_within(m.input_throughput, 16 / 0.750, kScheduleTolerance, "input tok/s");
    expect_within(m.request_throughput, 8 / 0.750, kScheduleTolerance, "req/s");
    EXPECT_EQ(m.itl_ms.count, 8u * 11u);
    EXPECT_EQ(server.max_in_flight(), 4);
    EXPECT_EQ(m.max_in_flight, 4);
}

TEST(BenchServeTest, TimingMatchesTheFakeScheduleOpenAi) { check_schedule(ApiBackend::kOpenAi, true); }
TEST(BenchServeTest, TimingMatchesTheFakeScheduleChat) { check_schedule(ApiBackend::kOpenAiChat, true); }
TEST(BenchServeTest, TimingMatchesTheFakeScheduleNative) { check_schedule(ApiBackend::kTesseraNative, true); }
// Without a usage chunk the tokens are counted from the stream.
TEST(BenchServeTest, CountsStreamedTokensWithoutUsage) { check_schedule(ApiBackend::kOpenAi, false); }

TEST(BenchServeTest, CountsFailuresWithTheirErrors) {
    FakeOpenAiServer server({.ttft = std::chrono::milliseconds(5),
                             .itl = std::chrono::milliseconds(2),
                             .fail_every = 3,
                             .stream_error_every = 4});
    BenchServeOptions o = options_for(server);
    auto r = run_benchmark(o, prompts(12, 4));
    ASSERT_TRUE(r.ok()) << r.status().message();
    // Requests 3, 6, 9, 12 answer 500; 4 and 8 break mid-stream.
    EXPECT_EQ(r->metrics.failed, 6);
    EXPECT_EQ(r->metrics.completed, 6);
    EXPECT_EQ(r->metrics.total_output_tokens, 6 * 4);
    bool saw_http = false, saw_stream = false;
    for (const std::string& e : r->metrics.errors) {
        saw_http |= e.find("HTTP 500") != std::string::npos && e.find("fake failure") != std::string::npos;
        saw_stream |= e.find("fake stream error") != std::string::npos;
    }
    EXPECT_TRUE(saw_http);
    EXPECT_TRUE(saw_stream);
    EXPECT_LE(r->metrics.errors.size(), 5u);

    // A server that is down: every request fails, with the connect error.
    BenchServeOptions down = options_for(server);
    down.request.endpoint.port = 1;
    auto d = run_benchmark(down, prompts(2, 4));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->metrics.failed, 2);
    ASSERT_FALSE(d->metrics.errors.empty());
    EXPECT_NE(d->metrics.errors[0].find("cannot connect"), std::string::npos) << d->metrics.errors[0];
    // ... and with a warm-up the run stops with that error.
    down.warmup_requests = 1;
    EXPECT_FALSE(run_benchmark(down, prompts(2, 4)).ok());
}

TEST(BenchServeTest, ArrivalsFollowThePoissonSchedule) {
    FakeOpenAiServer server({.ttft = std::chrono::milliseconds(2), .itl = std::chrono::milliseconds(1)});
    BenchServeOptions o = options_for(server);
    o.request_rate = 25.0;
    o.seed = 11;
    const int n = 20;
    auto r = run_benchmark(o, prompts(n, 2));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->metrics.completed, n);
    const std::vector<double> expected = poisson_arrival_offsets(n, 25.0, 11);
    const std::vector<double> seen = server.arrivals();
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
    // Each arrival's lag behind its scheduled time, measured from the smallest lag (no request
    // can leave before its time, so the smallest is the schedule's origin plus the least
    // delay): none more than 100 ms behind, the typical one within 10 ms. A loaded CI host
    // delays threads, and the first request also pays for its connection (measured from it,
    // every later one once looked 6 ms early); a wrong schedule is off by tens to hundreds of
    // ms at this rate.
    std::vector<double> lag(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) lag[i] = seen[i] - expected[i];
    const double origin = *std::min_element(lag.begin(), lag.end());
    for (int i = 0; i < n; ++i) {
        lag[i] -= origin;
        EXPECT_LT(lag[i], 0.100) << "request " << i << " came late";
    }
    std::nth_element(lag.begin(), lag.begin() + n / 2, lag.end());
    EXPECT_LT(lag[n / 2], 0.010) << "median deviation from the schedule";
    // The run lasts as long as the schedule plus the last request's 3 ms (and the same
    // allowance for a loaded host).
    EXPECT_GE(r->metrics.duration_s, expected.back());
    EXPECT_LT(r->metrics.duration_s, expected.back() + 0.003 + 0.100);
}

TEST(BenchServeTest, NeverExceedsTheConcurrencyCap) {
    FakeOpenAiServer server({.ttft = std::chrono::milliseconds(20), .itl = std::chrono::milliseconds(5)});
    BenchServeOptions o = options_for(server);
    o.max_concurrency = 3;
    o.warmup_requests = 2;
    auto r = run_benchmark(o, prompts(12, 4));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->metrics.completed, 12);
    EXPECT_EQ(server.max_in_flight(), 3);
    EXPECT_EQ(server.generation_requests(), 14);  // warm-up included
    // Unlimited: all 12 at once.
    FakeOpenAiServer wide({.ttft = std::chrono::milliseconds(100), .itl = std::chrono::milliseconds(5)});
    BenchServeOptions u = options_for(wide);
    auto all = run_benchmark(u, prompts(12, 2));
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(wide.max_in_flight(), 12);
}

TEST(BenchServeTest, MergesTheExtraRequestBody) {
    FakeOpenAiServer server({.ttft = std::chrono::milliseconds(1), .itl = std::chrono::milliseconds(1)});
    BenchServeOptions o = options_for(server);
    o.request.extra_body = Json::parse(R"({"logit_bias": {"42": -100}, "temperature": 0.5})");
    ASSERT_TRUE(run_benchmark(o, prompts(1, 3)).ok());
    Json body = server.last_body();
    EXPECT_EQ(body["logit_bias"]["42"], -100);
    EXPECT_EQ(body["temperature"], 0.5);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["max_tokens"], 3);
    EXPECT_EQ(body["model"], "fake-model");
    EXPECT_EQ(body["stream_options"]["include_usage"], true);

    BenchServeOptions n = options_for(server, ApiBackend::kTesseraNative);
    n.request.extra_body = Json::parse(R"({"sampling_params": {"top_k": 5}, "rid": "x"})");
    ASSERT_TRUE(run_benchmark(n, prompts(1, 3)).ok());
    body = server.last_body();
    EXPECT_EQ(body["sampling_params"]["top_k"], 5);
    EXPECT_EQ(body["sampling_params"]["max_new_tokens"], 3);
    EXPECT_EQ(body["sampling_params"]["ignore_eos"], true);
    EXPECT_EQ(body["rid"], "x");
    EXPECT_EQ(body["text"], "hello world");

    auto model = fetch_served_model(parse_http_url(server.url()).value(), std::chrono::milliseconds(2000));
    ASSERT_TRUE(model.ok());
    EXPECT_EQ(*model, "fake-model");
}

TEST(BenchServeTest, JsonLineHasEveryField) {
    FakeOpenAiServer server({.ttft = std::chrono::milliseconds(2), .itl = std::chrono::milliseconds(1)});
    BenchServeOptions o = options_for(server);
    auto r = run_benchmark(o, prompts(3, 3));
    ASSERT_TRUE(r.ok());
    const Json j = Json::parse(metrics_json_line(o, 3, r->metrics));
    for (const char* key : {"backend",
                            "base_url",
                            "model",
                            "dataset",
                            "num_prompts",
                            "request_rate",
                            "max_concurrency",
                            "random_input_len",
                            "random_output_len",
                            "random_range_ratio",
                            "seed",
                            "completed",
                            "failed",
                            "errors",
                            "duration_s",
                            "request_throughput",
                            "input_throughput",
                            "output_throughput",
                            "total_input_tokens",
                            "total_output_tokens"})
        EXPECT_TRUE(j.contains(key)) << key;
    for (const char* metric : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms"})
        for (const char* stat : {"mean", "median", "p90", "p99"})
            EXPECT_TRUE(j.contains(std::string(stat) + "_" + metric)) << stat << "_" << metric;
    EXPECT_EQ(j["request_rate"], "inf");
    EXPECT_TRUE(j["max_concurrency"].is_null());
    EXPECT_EQ(j["completed"], 3);
    EXPECT_EQ(j["total_input_tokens_reported"], 21);
    const std::string summary = format_summary(o, r->metrics);
    EXPECT_NE(summary.find("Serving Benchmark Result"), std::string::npos);
    EXPECT_NE(summary.find("Median TTFT (ms):"), std::string::npos);
}

// ---- prompts -----------------------------------------------------------------------------

TEST(PromptGeneratorTest, RandomPromptsHaveExactlyTheTokenCount) {
    auto tok = tokenizer::Tokenizer::load(std::string(TSR_TOKENIZER_ASSETS) + "/qwen3");
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    RandomDatasetOptions o{.num_prompts = 12, .input_len = 300, .output_len = 20, .range_ratio = 0.1, .seed = 5};
    auto ds = make_random_dataset(**tok, o);
    ASSERT_TRUE(ds.ok()) << ds.status().message();
    ASSERT_EQ(ds->size(), 12u);
    bool varied = false;
    for (const BenchPrompt& p : *ds) {
        EXPECT_EQ(static_cast<std::int64_t>((*tok)->encode(p.text, false).size()), p.prompt_len);
        EXPECT_GE(p.prompt_len, 30);
        EXPECT_LE(p.prompt_len, 300);
        EXPECT_GE(p.output_len, 2);
        EXPECT_LE(p.output_len, 20);
        varied |= p.prompt_len != (*ds)[0].prompt_len;
    }
    EXPECT_TRUE(varied);
    o.range_ratio = 1.0;
    for (std::int64_t len : {1, 2, 32, 1000}) {
        o.input_len = len;
        o.num_prompts = 2;
        auto exact = make_random_dataset(**tok, o);
        ASSERT_TRUE(exact.ok());
        for (const BenchPrompt& p : *exact) {
            EXPECT_EQ(p.prompt_len, len);
            EXPECT_EQ(static_cast<std::int64_t>((*tok)->encode(p.text, false).size()), len);
        }
    }
    // Same seed, same prompts.
    auto a = make_random_dataset(**tok, o), b = make_random_dataset(**tok, o);
    EXPECT_EQ((*a)[0].text, (*b)[0].text);
}

}  // namespace
}  // namespace tessera::bench
