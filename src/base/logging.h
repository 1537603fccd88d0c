#pragma once
// base/logging.h — TSR_LOG(INFO, "format {}", value): the only way tessera logs.
// Lines go to stderr as "[time LEVEL component] message"; the format string is checked
// at compile time by fmt. Thread-safe.

#include <optional>
#include <string_view>

#include <fmt/core.h>

namespace tessera::logging {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Process-wide settings, set at start-up by the binary's main() (the level also by
// /configure_logging while serving).
void set_min_level(Level level);
// --log-level's names, as Python's logging takes them: debug, info, warn or warning, error,
// critical (logged as error); nullopt for another.
std::optional<Level> level_named(std::string_view name);
void set_prefix(std::string prefix);  // e.g. "tp0" — shown in every line
bool enabled(Level level);
void write(Level level, std::string_view component, std::string_view message);

}  // namespace tessera::logging

#define TSR_LOG_LEVEL_DEBUG ::tessera::logging::Level::kDebug
#define TSR_LOG_LEVEL_INFO ::tessera::logging::Level::kInfo
#define TSR_LOG_LEVEL_WARN ::tessera::logging::Level::kWarn
#define TSR_LOG_LEVEL_ERROR ::tessera::logging::Level::kError

// TSR_LOG(INFO, "loaded {} tensors", n); the component is the source folder's concern,
// given with TSR_LOG_C(INFO, "loader", ...), or "tessera" by default.
#define TSR_LOG_C(level, component, ...)                                          \
    do {                                                                          \
        if (::tessera::logging::enabled(TSR_LOG_LEVEL_##level))                   \
            ::tessera::logging::write(TSR_LOG_LEVEL_##level, component,           \
                                      ::fmt::format(__VA_ARGS__));                \
    } while (0)
#define TSR_LOG(level, ...) TSR_LOG_C(level, "tessera", __VA_ARGS__)
