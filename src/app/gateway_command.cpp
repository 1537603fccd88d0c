// `tessera gateway`: sgl-model-gateway's launch flags (src/main.rs) over gateway::Gateway.
// Runs until SIGINT / SIGTERM, then drains in-flight requests.

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "base/env.h"
#include "base/logging.h"
#include "gateway/gateway.h"
#include "server/http_access.h"

namespace tessera::app {

namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal.store(sig); }

}  // namespace

int run_gateway(int argc, char** argv) {
    CLI::App app{"tessera gateway: route requests over workers (tessera or SGLang-compatible servers) with "
                 "sgl-model-gateway's policies, health checks and retries"};
    app.name("tessera gateway");
    gateway::GatewayOptions o;
    std::string policy = "cache_aware";
    std::string log_level = env().log_level.empty() ? "info" : env().log_level;
    double eviction_secs = 120, health_interval_secs = 60, health_timeout_secs = 5, request_timeout_secs = 1800;
    std::int64_t retry_initial_ms = 50, retry_max_ms = 30'000, load_poll_ms = 1'000;
    app.add_option("--host", o.host, "address to listen on")->capture_default_str();
    app.add_option("--port", o.port, "port to listen on (0: any free port)")->capture_default_str();
    app.add_option("--worker-urls", o.worker_urls,
                   "workers at start (http://host:port ...); more can be added while serving (POST /add_worker?url=)");
    app.add_option("--policy", policy, "cache_aware, round_robin, random or power_of_two")
        ->check(CLI::IsMember({"cache_aware", "round_robin", "random", "power_of_two"}))
        ->capture_default_str();
    app.add_option("--cache-threshold", o.cache.cache_threshold,
                   "cache_aware: prefix match rate above which the worker holding the prefix wins")
        ->capture_default_str();
    app.add_option("--balance-abs-threshold", o.cache.balance_abs_threshold,
                   "cache_aware: imbalanced when max - min requests in flight exceeds this ...")
        ->capture_default_str();
    app.add_option("--balance-rel-threshold", o.cache.balance_rel_threshold, "... and max exceeds min times this")
        ->capture_default_str();
    app.add_option("--kv-overload-threshold", o.cache.kv_overload_threshold,
                   "cache_aware: a cache hit on a worker whose KV pool is this full goes elsewhere")
        ->capture_default_str();
    app.add_option("--queue-overload-threshold", o.cache.queue_overload_threshold,
                   "cache_aware: ... or whose scheduler queue is this much longer than the shortest")
        ->capture_default_str();
    app.add_option("--eviction-interval", eviction_secs, "seconds between prefix tree evictions")->capture_default_str();
    app.add_option("--max-tree-size", o.max_tree_size, "bytes of routed text the tree keeps per worker")
        ->capture_default_str();
    app.add_option("--health-check-interval-secs", health_interval_secs, "seconds between health checks")
        ->capture_default_str();
    app.add_option("--health-check-timeout-secs", health_timeout_secs, "a health check slower than this fails")
        ->capture_default_str();
    app.add_option("--health-failure-threshold", o.health.failure_threshold,
                   "consecutive failures (checks or requests) that make a worker unhealthy")
        ->capture_default_str();
    app.add_option("--health-success-threshold", o.health.success_threshold,
                   "consecutive successful checks that bring an unhealthy worker back")
        ->capture_default_str();
    app.add_option("--health-check-endpoint", o.health.endpoint, "path of the health check")->capture_default_str();
    app.add_flag("--disable-health-check", o.health.disabled, "treat every worker as healthy");
    app.add_flag("--remove-unhealthy-workers", o.health.remove_unhealthy, "drop a worker when it turns unhealthy");
    app.add_option("--retry-max-retries", o.retry.max_retries, "attempts on other workers after a failure")
        ->capture_default_str();
    app.add_option("--retry-initial-backoff-ms", retry_initial_ms, "wait before the first retry")->capture_default_str();
    app.add_option("--retry-max-backoff-ms", retry_max_ms, "longest wait between retries")->capture_default_str();
    app.add_option("--retry-backoff-multiplier", o.retry.multiplier, "growth of the wait per retry")->capture_default_str();
    app.add_option("--retry-jitter-factor", o.retry.jitter, "random +- share of each wait")->capture_default_str();
    app.add_flag("--disable-retries", o.retry.disabled, "one attempt per request");
    app.add_option("--request-timeout-secs", request_timeout_secs, "longest wait for a worker's next bytes")
        ->capture_default_str();
    app.add_option("--load-poll-interval-ms", load_poll_ms,
                   "how often each worker's GET /get_load is read (queue, KV use; 0: never)")
        ->capture_default_str();
    app.add_option("--api-key", o.api_key,
                   "clients must send this bearer key (every route but /health); also sent to the workers "
                   "(env: TESSERA_API_KEY)");
    app.add_option("--admin-api-key", o.admin_api_key, "key of the worker admin routes and /flush_cache");
    app.add_option("--worker-api-key", o.worker_api_key, "key the gateway's own calls send to workers (default: --api-key)");
    app.add_option("--max-concurrent-requests", o.max_connections, "open client connections at most")
        ->capture_default_str();
    app.add_option("--random-seed", o.seed, "seed of the random and power_of_two policies")->capture_default_str();
    app.add_option("--log-level", log_level, "debug, info, warn or error")
        ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    if (log_level == "debug") logging::set_min_level(logging::Level::kDebug);
    if (log_level == "warn" || log_level == "warning") logging::set_min_level(logging::Level::kWarn);
    if (log_level == "error") logging::set_min_level(logging::Level::kError);
    o.policy = gateway::parse_policy(policy).value();
    if (o.api_key.empty()) o.api_key = env().api_key;
    o.eviction_interval = std::chrono::milliseconds(static_cast<std::int64_t>(eviction_secs * 1000));
    o.health.interval = std::chrono::milliseconds(static_cast<std::int64_t>(health_interval_secs * 1000));
    o.health.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(health_timeout_secs * 1000));
    o.request_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(request_timeout_secs * 1000));
    o.retry.initial_backoff = std::chrono::milliseconds(retry_initial_ms);
    o.retry.max_backoff = std::chrono::milliseconds(retry_max_ms);
    o.load_poll_interval = std::chrono::milliseconds(load_poll_ms);
    if (o.api_key.empty() && !server::is_loopback_host(o.host))
        TSR_LOG(WARN, "listening on {} without an API key: anyone who can reach it can use the workers behind it; "
                "set --api-key (or TESSERA_API_KEY)", o.host);

    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    gateway::Gateway gw(o);
    if (Status s = gw.start(); !s.ok()) {
        TSR_LOG(ERROR, "{}", s.message());
        return 1;
    }
    TSR_LOG(INFO, "gateway on http://{}:{} with policy {} over {} worker(s) (admitted when healthy)", o.host,
            gw.port(), policy, o.worker_urls.size());
    while (g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    TSR_LOG(INFO, "signal {}: draining in-flight requests", g_stop_signal.load());
    gw.stop();
    TSR_LOG(INFO, "stopped");
    return 0;
}

}  // namespace tessera::app
