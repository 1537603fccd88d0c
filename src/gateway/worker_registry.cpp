#include "gateway/worker_registry.h"

#include <algorithm>
#include <cmath>

#include "net/http_client.h"

namespace tessera::gateway {

const char* health_name(Health h) {
    switch (h) {
        case Health::kPending: return "pending";
        case Health::kHealthy: return "healthy";
        case Health::kUnhealthy: return "unhealthy";
    }
    return "?";
}

WorkerRegistry::WorkerRegistry(HealthConfig config) : config_(std::move(config)) {}

Status WorkerRegistry::add(const std::string& url, Clock::time_point now) {
    auto endpoint = net::parse_http_url(url);
    if (!endpoint.ok()) return Status::InvalidArgument("worker URL " + url + ": " + endpoint.status().message());
    std::lock_guard<std::mutex> lock(mu_);
    if (workers_.count(url) != 0) return Status::InvalidArgument("worker " + url + " is already registered");
    Record r;
    r.info.state.url = url;
    r.info.health = config_.disabled ? Health::kHealthy : Health::kPending;
    r.next_check = now;  // checked at once
    workers_.emplace(url, std::move(r));
    order_.push_back(url);
    return Status::Ok();
}

Status WorkerRegistry::remove(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    if (workers_.erase(url) == 0) return Status::NotFound("worker " + url + " is not registered");
    order_.erase(std::remove(order_.begin(), order_.end(), url), order_.end());
    return Status::Ok();
}

std::vector<std::string> WorkerRegistry::urls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
}

std::vector<WorkerState> WorkerRegistry::routable(const std::vector<std::string>& exclude) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<WorkerState> out;
    for (const auto& url : order_) {
        const Record& r = workers_.at(url);
        if (r.info.health != Health::kHealthy) continue;
        if (std::find(exclude.begin(), exclude.end(), url) != exclude.end()) continue;
        out.push_back(r.info.state);
    }
    return out;
}

std::size_t WorkerRegistry::healthy_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<std::size_t>(std::count_if(workers_.begin(), workers_.end(), [](const auto& kv) {
        return kv.second.info.health == Health::kHealthy;
    }));
}

void WorkerRegistry::begin_request(const std::string& url, std::int64_t tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(url);
    if (it == workers_.end()) return;
    it->second.info.state.in_flight += 1;
    it->second.info.state.in_flight_tokens += tokens;
    it->second.info.requests += 1;
}

void WorkerRegistry::end_request(const std::string& url, std::int64_t tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(url);
    if (it == workers_.end()) return;  // removed while the request ran
    WorkerState& s = it->second.info.state;
    s.in_flight = std::max<std::int64_t>(0, s.in_flight - 1);
    s.in_flight_tokens = std::max<std::int64_t>(0, s.in_flight_tokens - tokens);
}

Transition WorkerRegistry::report(const std::string& url, bool ok, const std::string& error, Clock::time_point now,
                                  bool passive) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(url);
    if (it == workers_.end()) return Transition::kNone;
    Record& r = it->second;
    if (ok) {
        r.info.consecutive_failures = 0;
        if (passive || config_.disabled) return Transition::kNone;
        r.consecutive_successes += 1;
        r.backoff = std::chrono::milliseconds(0);
        const bool admit = r.info.health == Health::kPending ||
                           (r.info.health == Health::kUnhealthy && r.consecutive_successes >= config_.success_threshold);
        if (admit) {
            r.info.health = Health::kHealthy;
            r.info.last_error.clear();
            return Transition::kBecameHealthy;
        }
        if (r.info.health == Health::kUnhealthy) r.next_check = now + config_.first_backoff;
        return Transition::kNone;
    }
    r.consecutive_successes = 0;
    r.info.consecutive_failures += 1;
    r.info.last_error = error;
    if (passive) r.info.failures += 1;
    if (config_.disabled) return Transition::kNone;
    if (r.info.health == Health::kUnhealthy) {
        r.backoff = std::min(std::max(r.backoff * 2, config_.first_backoff), config_.interval);
        r.next_check = now + r.backoff;
        return Transition::kNone;
    }
    if (r.info.consecutive_failures < config_.failure_threshold) {
        // Not yet: look again soon rather than a whole interval later.
        r.next_check = std::min(r.next_check, now + config_.first_backoff);
        return Transition::kNone;
    }
    if (config_.remove_unhealthy) {
        workers_.erase(it);
        order_.erase(std::remove(order_.begin(), order_.end(), url), order_.end());
        return Transition::kRemoved;
    }
    const bool was_healthy = r.info.health == Health::kHealthy;
    r.info.health = Health::kUnhealthy;
    r.backoff = config_.first_backoff;
    r.next_check = now + r.backoff;
    return was_healthy ? Transition::kBecameUnhealthy : Transition::kNone;
}

void WorkerRegistry::set_load(const std::string& url, std::int64_t waiting, std::int64_t tokens, double kv_usage) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(url);
    if (it == workers_.end()) return;
    it->second.info.state.waiting = waiting;
    it->second.info.state.tokens = tokens;
    it->second.info.state.kv_usage = kv_usage;
}

void WorkerRegistry::count_cache_routed(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(url);
    if (it != workers_.end()) it->second.info.cache_routed += 1;
}

std::vector<std::string> WorkerRegistry::due_for_check(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> due;
    for (const auto& url : order_) {
        Record& r = workers_.at(url);
        if (r.next_check > now) continue;
        due.push_back(url);
        r.next_check = now + (r.info.health == Health::kUnhealthy ? std::max(r.backoff, config_.first_backoff)
                                                                  : config_.interval);
    }
    return due;
}

std::vector<WorkerInfo> WorkerRegistry::snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<WorkerInfo> out;
    for (const auto& url : order_) out.push_back(workers_.at(url).info);
    return out;
}

std::chrono::milliseconds retry_delay(const RetryConfig& config, int attempt, double unit) {
    const double base = static_cast<double>(config.initial_backoff.count()) *
                        std::pow(config.multiplier, std::max(0, attempt - 1));
    const double capped = std::min(base, static_cast<double>(config.max_backoff.count()));
    const double jittered = capped * (1.0 + config.jitter * (2.0 * unit - 1.0));
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(std::max(0.0, jittered))));
}

}  // namespace tessera::gateway
