#pragma once
// server/http_server.h — the HTTP front: SGLang's OpenAI-compatible routes over a Backend.
// Boost.Beast lives only in http_server.cpp. All sockets are asynchronous on
// n_io_threads threads (one is enough for 1000 concurrent SSE streams); each connection
// runs on its own strand, and backend events are posted to it (the backend thread never
// blocks on a client).
// Thread-safety: start() / stop() from one controlling thread; port() after start().

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/http_metrics.h"
#include "server/openai_protocol.h"

namespace tessera::server {

class Backend;

struct HttpServerOptions {
    std::string host = "127.0.0.1";
    int port = 30000;  // 0: any free port (read it back with HttpServer::port())
    int n_io_threads = 1;
    // Generation requests open at once; beyond it → 503 with Retry-After, so memory stays
    // bounded.
    std::int64_t max_pending_requests = 4096;
    std::size_t max_body_bytes = 32u << 20;  // larger bodies → 413
    std::size_t max_header_bytes = 16u << 10;  // larger headers → 431
    // Unsent SSE bytes per connection before the client counts as stalled (abort + close).
    std::size_t max_unsent_bytes = 8u << 20;
    int retry_after_seconds = 1;
    std::chrono::milliseconds keep_alive_timeout{60'000};  // idle or slow request headers
    std::chrono::milliseconds health_generate_timeout{20'000};  // SGLANG_HEALTH_CHECK_TIMEOUT
    std::chrono::milliseconds drain_timeout{300'000};  // stop(): wait for streams to flush
    // Access (server/http_access.h): every route but /health needs `Authorization: Bearer
    // <api_key>` when api_key is set; state-changing routes need admin_api_key when set.
    // The Host header must name the bound address (a loopback name when bound to loopback)
    // or one of allowed_hosts, which defeats DNS rebinding from a web page.
    std::string api_key;
    std::string admin_api_key;
    std::vector<std::string> allowed_hosts;
    // How requests are read and answered: parsers, defaults (the served name and context
    // length come from the backend).
    ProtocolOptions protocol;
    std::string weight_version = "default";  // --weight-version, reported by /model_info
    MetricBuckets metric_buckets;             // /metrics histogram bounds
    std::string metric_labels;                // metric_labels(); "" for model_name alone
    CustomMetricLabels custom_metric_labels;  // --tokenizer-metrics-custom-labels-header / -allowed-custom-labels

    Status validate() const;
};

class HttpServer {
 public:
    // `backend` must outlive the server.
    HttpServer(Backend& backend, HttpServerOptions options);
    ~HttpServer();  // stop()s if still running
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds, listens and starts the io threads; returns once connections are accepted.
    Status start();
    int port() const;  // the bound port (useful with port 0)
    // Graceful: stop accepting, refuse new requests (503), backend.drain(), let in-flight
    // responses finish writing (up to drain_timeout), then close everything and join.
    void stop();

 private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
