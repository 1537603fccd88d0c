#include "base/logging.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace tessera::logging {

namespace {
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::mutex g_mu;
std::string g_prefix;  // GUARDED_BY(g_mu)

spdlog::logger& logger() {
    static std::shared_ptr<spdlog::logger> instance = [] {
        auto l = std::make_shared<spdlog::logger>(
            "tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        l->set_pattern("[%Y-%m-%d %H:%M:%S.%e %^%L%$] %v");
        l->set_level(spdlog::level::trace);
        return l;
    }();
    return *instance;
}

spdlog::level::level_enum to_spdlog(Level level) {
    switch (level) {
        case Level::kDebug: return spdlog::level::debug;
        case Level::kInfo: return spdlog::level::info;
        case Level::kWarn: return spdlog::level::warn;
        case Level::kError: return spdlog::level::err;
    }
    return spdlog::level::info;
}
}  // namespace

void set_min_level(Level level) { g_min_level.store(static_cast<int>(level)); }

std::optional<Level> level_named(std::string_view name) {
    if (name == "debug") return Level::kDebug;
    if (name == "info") return Level::kInfo;
    if (name == "warn" || name == "warning") return Level::kWarn;
    if (name == "error" || name == "critical") return Level::kError;
    return std::nullopt;
}

void set_prefix(std::string prefix) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_prefix = std::move(prefix);
}

bool enabled(Level level) { return static_cast<int>(level) >= g_min_level.load(); }

void write(Level level, std::string_view component, std::string_view message) {
    std::string prefix;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        prefix = g_prefix;
    }
    if (prefix.empty()) {
        logger().log(to_spdlog(level), "[{}] {}", component, message);
    } else {
        logger().log(to_spdlog(level), "[{} {}] {}", component, prefix, message);
    }
}

}  // namespace tessera::logging
