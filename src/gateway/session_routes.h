#pragma once
// gateway/session_routes.h — which worker holds each session opened through the gateway.
// An SGLang session (/open_session, session_params on /generate) lives in one engine, so the
// gateway (and the front of a --dp-size launch) opens it on one worker and sends every turn
// and the close there. SGLang's own DP controller broadcasts the open and routes turns by
// load, so a turn that continues a request can land on a rank that never saw it; pinning
// is what makes sessions work behind a front. Thread-safe.

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tessera::gateway {

class SessionRoutes {
 public:
    using Clock = std::chrono::steady_clock;

    // Session `id` lives on `url`. With a timeout (the session's own, in seconds) the route
    // is forgotten once the session has been idle that long, plus a grace for the engine's
    // clock (routing a late turn to its worker is right as long as the engine may have it).
    void opened(const std::string& id, const std::string& url, std::optional<double> timeout_s, Clock::time_point now);
    // The worker holding `id` (a use: the idle time starts again), or none.
    std::optional<std::string> worker(const std::string& id, Clock::time_point now);
    // Forgets `id`; returns the worker that held it.
    std::optional<std::string> closed(const std::string& id);
    void forget_worker(const std::string& url);  // the worker left: its sessions went with it
    void expire(Clock::time_point now);
    std::size_t size() const;

    static constexpr std::chrono::seconds kGrace{60};

 private:
    struct Route {
        std::string url;
        std::optional<Clock::duration> idle_limit;
        Clock::time_point last_used;
    };
    static bool expired(const Route& r, Clock::time_point now) {
        return r.idle_limit && now - r.last_used > *r.idle_limit;
    }

    mutable std::mutex mu_;
    std::unordered_map<std::string, Route> routes_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::gateway
