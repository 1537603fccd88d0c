#pragma once
// front/crash_dump.h — --crash-dump-folder DIR: the requests that finished in the last five
// minutes and those still running, with their parameters and output so far, written once
// when the server fails (its ranks can no longer run steps together) or gets SIGQUIT, to
// DIR/<host>/crash_dump_YYYY-MM-DD_HH-MM-SS.json (SGLang's TokenizerManager
// record_request_for_crash_dump and dump_requests_before_crash, which write a pickle).
// Thread-safe: requests arrive on HTTP threads, their events on the scheduler thread.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "server/backend.h"

namespace tessera::front {

class CrashDump {
 public:
    using Clock = std::function<std::chrono::system_clock::time_point()>;
    // `server_info_json`: the launch's settings, written with the requests. `clock`: tests.
    CrashDump(std::string folder, std::string server_info_json, Clock clock = {});

    // Creates the folder and checks a file can be written there: what the launch reports
    // before loading weights.
    static Status check_folder(const std::string& folder);

    // `parameters_json`: RequestMetricsFile::parameters_json of the request.
    void received(std::string_view rid, std::string parameters_json);
    void on_event(std::string_view rid, const server::GenerationEvent& event);
    // Writes the file (once: later calls return the first one's path); "" when there was
    // nothing to write, as SGLang writes nothing then.
    StatusOr<std::string> write(std::string_view why);

 private:
    struct Entry {
        std::string rid;
        std::string parameters_json;
        std::string text;
        std::vector<std::int32_t> output_ids;
        std::string finish_reason;  // "" while running
        std::string error;
        server::Usage usage;
        std::chrono::system_clock::time_point received_at, finished_at;
    };
    void forget_old(std::chrono::system_clock::time_point now);  // REQUIRES: mu_ held

    const std::string folder_;
    const std::string server_info_json_;
    Clock clock_;
    std::mutex mu_;
    std::unordered_map<std::string, Entry> running_;  // GUARDED_BY(mu_)
    std::deque<Entry> finished_;                      // GUARDED_BY(mu_); oldest first
    std::string written_;                             // GUARDED_BY(mu_); the dump's path once written
};

}  // namespace tessera::front
