#pragma once
// gateway/policy.h — which worker gets a request. The gateway's policies as
// sgl-model-gateway defines them (policies/{cache_aware,round_robin,random,power_of_two}.rs)
// and the DP controller's load-balance methods (managers/data_parallel_controller.py
// round_robin_scheduler, total_requests_scheduler, total_tokens_scheduler), as one
// `Router::pick` over the workers a request may go to. Deterministic given the seed, so the
// tests check hand-computed cases. Not thread-safe: the gateway calls it under its lock.

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/prefix_tree.h"

namespace tessera::gateway {

enum class PolicyKind {
    kCacheAware,     // prefix tree, unless the load is imbalanced
    kRoundRobin,     // next in turn
    kRandom,         // uniform
    kPowerOfTwo,     // the less loaded of two random workers
    kTotalRequests,  // fewest requests in flight (--load-balance-method total_requests / shortest_queue)
    kTotalTokens,    // fewest prompt tokens in flight (total_tokens / minimum_tokens)
};

// Gateway names (cache_aware, round_robin, random, power_of_two) and SGLang's DP
// load-balance names (round_robin, total_requests, total_tokens, and their former names
// shortest_queue, minimum_tokens; auto = round_robin).
StatusOr<PolicyKind> parse_policy(std::string_view name);
const char* policy_name(PolicyKind kind);

// What a policy sees of one worker a request may go to.
struct WorkerState {
    std::string url;
    std::int64_t in_flight = 0;         // requests this gateway has outstanding on it
    std::int64_t in_flight_tokens = 0;  // their estimated prompt tokens
    // From the worker's GET /get_load, when it answers one; -1: unknown.
    std::int64_t waiting = -1;  // requests queued in its scheduler, not yet running
    std::int64_t tokens = -1;   // tokens it holds in KV
    double kv_usage = -1.0;     // fraction of its KV pool in use
};

struct CacheAwareConfig {
    // sgl-model-gateway's CLI defaults (src/main.rs).
    double cache_threshold = 0.3;          // prefix match rate above which the cache wins
    std::int64_t balance_abs_threshold = 64;  // imbalanced: max - min load > this ...
    double balance_rel_threshold = 1.5;       // ... and max > min * this
    // tessera's overload rule: a cache hit on a worker whose own report shows it cannot take
    // more (KV nearly full, or its queue this much longer than the shortest) goes to the
    // least pressed worker instead; request counts alone do not decide it.
    double kv_overload_threshold = 0.9;
    std::int64_t queue_overload_threshold = 4;
};

// A request's prompt tokens as the gateway estimates them without a tokenizer.
std::int64_t estimate_tokens(std::string_view text);

class Router {
 public:
    Router(PolicyKind kind, CacheAwareConfig config, std::uint64_t seed);

    // Index into `workers` (non-empty) of the one to use for a request whose routing text
    // is `text`; cache_aware also records the text as cached on the chosen worker.
    std::size_t pick(const std::vector<WorkerState>& workers, std::string_view text);

    void remove_worker(const std::string& url) { tree_.remove_tenant(url); }
    void evict(std::size_t max_bytes_per_worker) { tree_.evict(max_bytes_per_worker); }
    const PrefixTree& tree() const { return tree_; }
    PolicyKind kind() const { return kind_; }
    // Whether the last pick() followed a prefix match (cache_aware), for the hit-rate metric.
    bool last_was_cache_hit() const { return last_cache_hit_; }

    // Whether `w` reports more load than it can take (see CacheAwareConfig); exposed for tests.
    bool overloaded(const WorkerState& w, const std::vector<WorkerState>& all) const;

 private:
    std::size_t pick_cache_aware(const std::vector<WorkerState>& workers, std::string_view text);

    PolicyKind kind_;
    CacheAwareConfig config_;
    PrefixTree tree_;
    std::uint64_t round_robin_ = 0;
    bool last_cache_hit_ = false;
    std::mt19937_64 rng_;
};

}  // namespace tessera::gateway
