#pragma once
// gateway/worker_registry.h — the workers behind the gateway and what it knows of each: its
// health (active checks and what proxied requests showed), the requests it has in flight
// from here, the load it reports, and its counters for /metrics. Workers are added and
// removed while serving. Health follows sgl-model-gateway's thresholds (a worker turns
// unhealthy after --health-failure-threshold consecutive failures and comes back after
// --health-success-threshold consecutive successes), with two departures its users asked
// for: a worker never seen healthy yet is admitted on its first success (so the gateway can
// start before its workers), and an unhealthy worker is probed with backoff (1 s doubling up
// to the check interval) so it returns soon after it restarts. A client's 4xx is never a
// failure. Thread-safe.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gateway/policy.h"

namespace tessera::gateway {

using Clock = std::chrono::steady_clock;

struct HealthConfig {
    // sgl-model-gateway's defaults (src/main.rs).
    int failure_threshold = 3;
    int success_threshold = 2;
    std::chrono::milliseconds interval{60'000};
    std::chrono::milliseconds timeout{5'000};
    std::string endpoint = "/health";
    bool disabled = false;          // every worker counts as healthy
    bool remove_unhealthy = false;  // drop a worker when it turns unhealthy
    std::chrono::milliseconds first_backoff{1'000};  // first re-check of an unhealthy worker
};

enum class Health { kPending, kHealthy, kUnhealthy };
const char* health_name(Health h);

// One worker as /workers and /metrics show it.
struct WorkerInfo {
    WorkerState state;
    Health health = Health::kPending;
    int consecutive_failures = 0;
    std::int64_t requests = 0;  // requests sent to it (attempts, retries included)
    std::int64_t failures = 0;  // attempts that failed (connect, I/O, 5xx)
    std::int64_t cache_routed = 0;  // cache_aware requests that went here on a prefix match
    std::string last_error;
};

// What changed when a result was reported (for the log).
enum class Transition { kNone, kBecameHealthy, kBecameUnhealthy, kRemoved };

class WorkerRegistry {
 public:
    explicit WorkerRegistry(HealthConfig config);

    // `url` is http://host:port[/prefix]; an invalid URL or one already present is refused.
    Status add(const std::string& url, Clock::time_point now);
    Status remove(const std::string& url);
    std::vector<std::string> urls() const;

    // The workers a request may go to: healthy and not in `exclude`.
    std::vector<WorkerState> routable(const std::vector<std::string>& exclude) const;
    std::size_t healthy_count() const;

    // A proxied request starts / ends on `url` (in-flight counts for the policies).
    void begin_request(const std::string& url, std::int64_t tokens);
    void end_request(const std::string& url, std::int64_t tokens);

    // The result of a health check, or of a proxied attempt (`passive`): a passive success
    // only clears the failure count of a healthy worker; it never re-admits one.
    Transition report(const std::string& url, bool ok, const std::string& error, Clock::time_point now,
                      bool passive = false);
    void set_load(const std::string& url, std::int64_t waiting, std::int64_t tokens, double kv_usage);
    void count_cache_routed(const std::string& url);

    // Workers whose next health check is due at `now` (each is then scheduled again).
    std::vector<std::string> due_for_check(Clock::time_point now);

    std::vector<WorkerInfo> snapshot() const;

 private:
    struct Record {
        WorkerInfo info;
        int consecutive_successes = 0;
        Clock::time_point next_check;
        std::chrono::milliseconds backoff{0};
    };

    const HealthConfig config_;
    mutable std::mutex mu_;
    std::map<std::string, Record> workers_;  // GUARDED_BY(mu_), in URL order
    std::vector<std::string> order_;         // GUARDED_BY(mu_), in the order added
};

// Retry backoff as sgl-model-gateway's --retry-* flags (src/main.rs defaults).
struct RetryConfig {
    int max_retries = 5;
    std::chrono::milliseconds initial_backoff{50};
    std::chrono::milliseconds max_backoff{30'000};
    double multiplier = 1.5;
    double jitter = 0.2;
    bool disabled = false;
};

// The wait before retry `attempt` (1 = the first retry); `unit` is a uniform draw in [0, 1)
// that places the jitter.
std::chrono::milliseconds retry_delay(const RetryConfig& config, int attempt, double unit);

}  // namespace tessera::gateway
