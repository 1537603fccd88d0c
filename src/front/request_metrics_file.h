#pragma once
// front/request_metrics_file.h — --export-metrics-to-file with --export-metrics-to-file-dir DIR:
// one JSON line per finished request in DIR/sglang-request-metrics-YYYYMMDD_HH.log (local
// hour; a new file each hour, none deleted), as SGLang's observability/
// request_metrics_exporter.py FileRequestMetricsExporter writes it: "request_parameters" (the
// request as a JSON string), then the fields of the request's meta_info. Thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/backend.h"

namespace tessera::front {

// What a finished request's line holds besides its parameters (/generate's meta_info fields).
struct RequestMetrics {
    std::string_view rid;
    std::string_view finish_reason;            // "stop", "length", "abort"
    std::optional<std::string> matched_stop;   // with "stop"
    server::Usage usage;
    double e2e_latency_s = 0.0;
};

class RequestMetricsFile {
 public:
    using Clock = std::function<std::chrono::system_clock::time_point()>;
    // `clock`: tests; unset: the system clock.
    explicit RequestMetricsFile(std::string directory, Clock clock = {});

    // Creates the directory and checks a file can be appended there: what the launch reports
    // before loading weights.
    static Status check_directory(const std::string& directory);
    // The request's parameters as the line's "request_parameters" string.
    static std::string parameters_json(std::string_view rid, const server::GenerationInput& input,
                                       const server::GenerationParams& params);

    void write(std::string_view parameters_json, const RequestMetrics& metrics);

 private:
    std::string path_at(std::chrono::system_clock::time_point now) const;

    std::string directory_;
    Clock clock_;
    std::mutex mu_;
};

}  // namespace tessera::front
