#pragma once
// front/request_log.h — --log-requests: one line when a request is received and one when it
// finishes, with as much as --log-requests-level asks (SGLang's server_args.py levels):
//   0 metadata (rid, token counts, finish reason); 1 and the sampling parameters;
//   2 and the input and output, each cut to 2048 characters; 3 all of them.
// --log-requests-format text (readable) or json (one object per line). --log-requests-target
// sends the json lines to standard output and/or files in directories instead of the log
// (SGLang's request_logger.py). Used by the engine from the HTTP threads (received) and the
// scheduler thread (finished); both are thread-safe.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

#include "server/backend.h"

namespace tessera::front {

struct RequestLogOptions {
    bool enabled = false;  // --log-requests
    int level = 2;         // --log-requests-level
    bool json = false;
    // "stdout", or a directory: json lines go to <directory>/<host>_<rank>.log, a new file each
    // hour (the previous one renamed "<name>.YYYY-MM-DD_HH" after the hour it began in, as
    // SGLang's TimedRotatingFileHandler(when="H")). Empty: the json lines go to the log.
    std::vector<std::string> targets;
    int rank = 0;  // of the process that logs, in the file names
    std::function<std::chrono::system_clock::time_point()> clock;  // tests; unset: the system clock
};

// Creates each target directory and checks its file can be appended to: what the launch
// reports before loading weights ("--log-requests-target DIR: ...").
Status check_request_log_targets(const RequestLogOptions& options);

// Creates the directory of `path` and opens the file for appending, as a launch checks where
// a flag will write before it loads weights: "" when it can, else why not.
std::string cannot_append(const std::string& path);

class RequestLog {
 public:
    explicit RequestLog(RequestLogOptions options);
    ~RequestLog();

    bool on() const { return enabled_.load(std::memory_order_relaxed); }
    // How many characters of a request's output the finish line shows (0: none).
    std::size_t output_chars() const;
    // /configure_logging (SGLang's RequestLogger.configure): unset fields stay. Json lines go to
    // the launch's --log-requests-target, if it gave any, else to the log.
    void configure(std::optional<bool> enabled, std::optional<int> level, std::optional<bool> json);

    // `params` as the request will run (max_new_tokens resolved).
    void received(std::string_view rid, const server::GenerationInput& input, const server::GenerationParams& params,
                  std::int64_t prompt_tokens) const;
    void finished(std::string_view rid, std::string_view finish_reason, const server::Usage& usage,
                  std::string_view output) const;

 private:
    class Targets;
    void write(const std::string& line) const;  // to the targets when json lines have some

    RequestLogOptions options_;
    std::atomic<bool> enabled_;
    std::atomic<int> level_;
    std::atomic<bool> json_;
    std::unique_ptr<Targets> targets_;  // null without --log-requests-target
};

}  // namespace tessera::front
