#pragma once
// front/request_log.h — --log-requests: one line when a request is received and one when it
// finishes, with as much as --log-requests-level asks (SGLang's server_args.py levels):
//   0 metadata (rid, token counts, finish reason); 1 and the sampling parameters;
//   2 and the input and output, each cut to 2048 characters; 3 all of them.
// --log-requests-format text (readable) or json (one object per line). Used by the engine
// from the HTTP threads (received) and the scheduler thread (finished); logging is thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/backend.h"

namespace tessera::front {

struct RequestLogOptions {
    int level = -1;  // -1: off
    bool json = false;
};

class RequestLog {
 public:
    explicit RequestLog(RequestLogOptions options) : options_(options) {}

    bool on() const { return options_.level >= 0; }
    // How many characters of a request's output the finish line shows (0: none).
    std::size_t output_chars() const;

    // `params` as the request will run (max_new_tokens resolved).
    void received(std::string_view rid, const server::GenerationInput& input, const server::GenerationParams& params,
                  std::int64_t prompt_tokens) const;
    void finished(std::string_view rid, std::string_view finish_reason, const server::Usage& usage,
                  std::string_view output) const;

 private:
    RequestLogOptions options_;
};

}  // namespace tessera::front
