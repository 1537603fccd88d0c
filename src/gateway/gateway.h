#pragma once
// gateway/gateway.h — `tessera gateway`, and the front of a `--dp-size N` launch: an HTTP
// proxy in front of workers (tessera or any SGLang-compatible server) that picks a worker per
// request (gateway/policy.h), passes the request and its answer through unchanged (streams
// included), retries on another worker when one fails before answering, checks the workers'
// health, polls their load, and lets workers be added and removed while serving.
// Asio sockets live only in gateway.cpp; one thread per client connection (blocking I/O:
// a gateway connection mostly waits on its worker), capped at max_connections.
// Thread-safety: start() / stop() from one controlling thread; the rest from any thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/policy.h"
#include "gateway/worker_registry.h"

namespace tessera::gateway {

struct GatewayOptions {
    std::string host = "127.0.0.1";
    int port = 30000;  // 0: any free port (read it back with Gateway::port())
    std::vector<std::string> worker_urls;
    PolicyKind policy = PolicyKind::kCacheAware;
    CacheAwareConfig cache;
    std::size_t max_tree_size = 67'108'864;  // bytes of routed text kept per worker
    std::chrono::milliseconds eviction_interval{120'000};
    HealthConfig health;
    RetryConfig retry;
    std::chrono::milliseconds request_timeout{1'800'000};  // each read from a worker
    std::chrono::milliseconds load_poll_interval{1'000};   // GET /get_load of each worker; 0: never
    // Clients must send `Authorization: Bearer <api_key>` on every route but /health when set;
    // admin routes (workers, /flush_cache) need admin_api_key when that is set. The client's
    // Authorization header is passed to the worker; the gateway's own calls (health, load,
    // server info) send worker_api_key (default: api_key).
    std::string api_key;
    std::string admin_api_key;
    std::string worker_api_key;
    // Host header names accepted besides the bound address (DNS rebinding defence, as serve's
    // --allowed-hosts).
    std::vector<std::string> allowed_hosts;
    std::size_t max_connections = 1024;
    std::size_t max_body_bytes = 32u << 20;
    std::uint64_t seed = 0;
    // Counts a request's prompt tokens for total_tokens (and the in-flight token gauges); the
    // DP front passes its model's tokenizer. Unset: estimate_tokens (bytes / 4).
    std::function<std::int64_t(std::string_view)> count_tokens;
    // The front of one launch's DP replicas: worker i is "DP rank" i (/get_load,
    // /get_server_info and /metrics say so); data_parallel_rank in a request picks one.
    bool replicas = false;
    // DP-attention groups share every rank's expert recorder: its commands go to the first
    // worker only, whose lockstep applies them on every rank in one step.
    bool expert_record_first_worker_only = false;

    Status validate() const;
};

class Gateway {
 public:
    explicit Gateway(GatewayOptions options);
    ~Gateway();  // stop()s if still running
    Gateway(const Gateway&) = delete;
    Gateway& operator=(const Gateway&) = delete;

    // Binds and starts serving; workers need not be up yet (they are admitted when healthy).
    Status start();
    int port() const;
    // Stops accepting, lets in-flight requests finish (up to `drain`), then closes the rest.
    void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(30'000));

    Status add_worker(const std::string& url);
    Status remove_worker(const std::string& url);
    std::vector<WorkerInfo> workers() const;

 private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::gateway
