#include "gateway/policy.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace tessera::gateway {

StatusOr<PolicyKind> parse_policy(std::string_view name) {
    if (name == "cache_aware") return PolicyKind::kCacheAware;
    if (name == "round_robin" || name == "auto") return PolicyKind::kRoundRobin;
    if (name == "random") return PolicyKind::kRandom;
    if (name == "power_of_two") return PolicyKind::kPowerOfTwo;
    if (name == "total_requests" || name == "shortest_queue") return PolicyKind::kTotalRequests;
    if (name == "total_tokens" || name == "minimum_tokens") return PolicyKind::kTotalTokens;
    return Status::InvalidArgument("unknown routing policy '" + std::string(name) +
                                   "': choose cache_aware, round_robin, random, power_of_two, total_requests or "
                                   "total_tokens");
}

const char* policy_name(PolicyKind kind) {
    switch (kind) {
        case PolicyKind::kCacheAware: return "cache_aware";
        case PolicyKind::kRoundRobin: return "round_robin";
        case PolicyKind::kRandom: return "random";
        case PolicyKind::kPowerOfTwo: return "power_of_two";
        case PolicyKind::kTotalRequests: return "total_requests";
        case PolicyKind::kTotalTokens: return "total_tokens";
    }
    return "?";
}

std::int64_t estimate_tokens(std::string_view text) {
    // ~4 bytes per token for English BPE vocabularies; at least one token.
    return std::max<std::int64_t>(1, static_cast<std::int64_t>((text.size() + 3) / 4));
}

Router::Router(PolicyKind kind, CacheAwareConfig config, std::uint64_t seed)
    : kind_(kind), config_(config), rng_(seed) {}

namespace {

// First index with the smallest key (ties go to the earlier worker, as SGLang's min_by).
template <typename Key>
std::size_t argmin(const std::vector<WorkerState>& workers, Key key) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < workers.size(); ++i)
        if (key(workers[i]) < key(workers[best])) best = i;
    return best;
}

}  // namespace

bool Router::overloaded(const WorkerState& w, const std::vector<WorkerState>& all) const {
    if (w.kv_usage >= config_.kv_overload_threshold) return true;
    if (w.waiting < 0) return false;
    std::int64_t shortest = w.waiting;
    for (const auto& o : all)
        if (o.waiting >= 0) shortest = std::min(shortest, o.waiting);
    return w.waiting - shortest >= config_.queue_overload_threshold;
}

std::size_t Router::pick(const std::vector<WorkerState>& workers, std::string_view text) {
    const std::size_t n = workers.size();
    last_cache_hit_ = false;
    switch (kind_) {
        case PolicyKind::kCacheAware:
            return pick_cache_aware(workers, text);
        case PolicyKind::kRoundRobin:
            return static_cast<std::size_t>(round_robin_++ % n);
        case PolicyKind::kRandom:
            return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
        case PolicyKind::kPowerOfTwo: {
            if (n == 1) return 0;
            const std::size_t a = std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
            std::size_t b = std::uniform_int_distribution<std::size_t>(0, n - 2)(rng_);
            if (b >= a) ++b;
            // The workers' own token loads when both report one, else requests in flight.
            const bool tokens = workers[a].tokens >= 0 && workers[b].tokens >= 0;
            const std::int64_t la = tokens ? workers[a].tokens : workers[a].in_flight;
            const std::int64_t lb = tokens ? workers[b].tokens : workers[b].in_flight;
            return lb < la ? b : a;
        }
        case PolicyKind::kTotalRequests:
            return argmin(workers, [](const WorkerState& w) { return w.in_flight; });
        case PolicyKind::kTotalTokens:
            return argmin(workers, [](const WorkerState& w) { return std::make_pair(w.in_flight_tokens, w.in_flight); });
    }
    return 0;
}

std::size_t Router::pick_cache_aware(const std::vector<WorkerState>& workers, std::string_view text) {
    const auto least_loaded = [&] {
        return argmin(workers, [this](const WorkerState& w) {
            return std::make_pair(w.in_flight, tree_.tenant_bytes(w.url));
        });
    };
    std::int64_t max_load = std::numeric_limits<std::int64_t>::min();
    std::int64_t min_load = std::numeric_limits<std::int64_t>::max();
    for (const auto& w : workers) {
        max_load = std::max(max_load, w.in_flight);
        min_load = std::min(min_load, w.in_flight);
    }
    const bool imbalanced = max_load - min_load > config_.balance_abs_threshold &&
                            static_cast<double>(max_load) > static_cast<double>(min_load) * config_.balance_rel_threshold;
    std::size_t chosen = 0;
    if (workers.size() == 1) {
        chosen = 0;
    } else if (imbalanced) {
        chosen = least_loaded();
    } else {
        const auto match = tree_.prefix_match(text, [&workers](const std::string& url) {
            return std::any_of(workers.begin(), workers.end(), [&url](const WorkerState& w) { return w.url == url; });
        });
        const double rate = text.empty() ? 0.0 : static_cast<double>(match.matched) / static_cast<double>(text.size());
        if (rate > config_.cache_threshold) {
            last_cache_hit_ = true;
            for (std::size_t i = 0; i < workers.size(); ++i)
                if (workers[i].url == match.tenant) chosen = i;
            if (overloaded(workers[chosen], workers)) {
                // The cache hit loses to balance: the least pressed worker that can take it.
                std::size_t best = chosen;
                for (std::size_t i = 0; i < workers.size(); ++i) {
                    if (overloaded(workers[i], workers)) continue;
                    const auto key = [](const WorkerState& w) {
                        return std::make_tuple(std::max<std::int64_t>(w.waiting, 0), std::max(w.kv_usage, 0.0), w.in_flight);
                    };
                    if (best == chosen || key(workers[i]) < key(workers[best])) best = i;
                }
                last_cache_hit_ = best == chosen;
                chosen = best;
            }
        } else {
            chosen = least_loaded();
        }
    }
    tree_.insert(text, workers[chosen].url);
    return chosen;
}

}  // namespace tessera::gateway
