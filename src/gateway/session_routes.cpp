#include "gateway/session_routes.h"

#include <utility>

namespace tessera::gateway {

void SessionRoutes::opened(const std::string& id, const std::string& url, std::optional<double> timeout_s,
                           Clock::time_point now) {
    std::optional<Clock::duration> limit;
    if (timeout_s) {
        limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_s)) + kGrace;
    }
    std::lock_guard<std::mutex> lock(mu_);
    routes_[id] = Route{url, limit, now};
}

std::optional<std::string> SessionRoutes::worker(const std::string& id, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = routes_.find(id);
    if (it == routes_.end()) return std::nullopt;
    if (expired(it->second, now)) {
        routes_.erase(it);
        return std::nullopt;
    }
    it->second.last_used = now;
    return it->second.url;
}

std::optional<std::string> SessionRoutes::closed(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = routes_.find(id);
    if (it == routes_.end()) return std::nullopt;
    std::string url = std::move(it->second.url);
    routes_.erase(it);
    return url;
}

void SessionRoutes::forget_worker(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(routes_, [&](const auto& entry) { return entry.second.url == url; });
}

void SessionRoutes::expire(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(routes_, [&](const auto& entry) { return expired(entry.second, now); });
}

std::size_t SessionRoutes::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return routes_.size();
}

}  // namespace tessera::gateway
