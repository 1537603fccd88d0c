#include "front/crash_dump.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "front/request_log.h"

namespace tessera::front {

namespace {

using Json = nlohmann::ordered_json;

constexpr auto kWindow = std::chrono::minutes(5);  // SGLang keeps requests finished in the last 300 s

std::string host_name() {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) return "localhost";
    return host;
}

double unix_seconds(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

CrashDump::CrashDump(std::string folder, std::string server_info_json, Clock clock)
    : folder_(std::move(folder)), server_info_json_(std::move(server_info_json)), clock_(std::move(clock)) {
    if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
}

Status CrashDump::check_folder(const std::string& folder) {
    const std::filesystem::path probe = std::filesystem::path(folder) / host_name() / ".write_test";
    if (const std::string why = cannot_append(probe.string()); !why.empty())
        return Status::InvalidArgument(fmt::format("--crash-dump-folder {}: cannot write in {} ({}); give a folder "
                                                   "this user can create files in",
                                                   folder, probe.parent_path().string(), why));
    std::error_code ec;
    std::filesystem::remove(probe, ec);
    return Status::Ok();
}

void CrashDump::forget_old(std::chrono::system_clock::time_point now) {
    while (!finished_.empty() && now - finished_.front().finished_at >= kWindow) finished_.pop_front();
}

void CrashDump::received(std::string_view rid, std::string parameters_json) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = running_[std::string(rid)];
    e.rid = rid;
    e.parameters_json = std::move(parameters_json);
    e.received_at = clock_();
}

void CrashDump::on_event(std::string_view rid, const server::GenerationEvent& ev) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(std::string(rid));
    if (it == running_.end()) return;
    Entry& e = it->second;
    e.text += ev.text;
    e.output_ids.insert(e.output_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    e.usage = ev.usage;
    if (!ev.finish_reason && !ev.error) return;
    e.finish_reason = ev.finish_reason.value_or("abort");
    if (ev.error) e.error = ev.error->message();
    const auto now = clock_();
    e.finished_at = now;
    finished_.push_back(std::move(e));
    running_.erase(it);
    forget_old(now);
}

StatusOr<std::string> CrashDump::write(std::string_view why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!written_.empty()) {
        TSR_LOG_C(WARN, "request", "crash dump already written ({}), skipping", written_);
        return written_;
    }
    const auto now = clock_();
    forget_old(now);
    if (finished_.empty() && running_.empty()) return std::string();
    TSR_LOG_C(INFO, "request", "Dumping requests before crash. crash_dump_folder={}", folder_);
    Json requests = Json::array();
    const auto add = [&](const Entry& e, bool finished) {
        Json meta = Json{{"id", e.rid},
                         {"prompt_tokens", e.usage.prompt_tokens},
                         {"completion_tokens", e.usage.completion_tokens},
                         {"cached_tokens", e.usage.cached_tokens}};
        meta["finish_reason"] = finished ? Json{{"type", e.finish_reason}} : Json(nullptr);
        if (!e.error.empty()) meta["error"] = e.error;
        requests.push_back(Json{{"request", Json::parse(e.parameters_json, nullptr, false)},
                                {"output", Json{{"text", e.text}, {"output_ids", e.output_ids}, {"meta_info", meta}}},
                                {"created_time", unix_seconds(e.received_at)},
                                {"finished_time", finished ? Json(unix_seconds(e.finished_at)) : Json(nullptr)}});
    };
    for (const Entry& e : finished_) add(e, true);
    for (const auto& [rid, e] : running_) add(e, false);
    const Json dump = Json{{"reason", why},
                           {"server_args", Json::parse(server_info_json_, nullptr, false)},
                           {"requests", std::move(requests)}};

    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    localtime_r(&t, &local);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", &local);
    const std::filesystem::path dir = std::filesystem::path(folder_) / host_name();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = (dir / fmt::format("crash_dump_{}.json", stamp)).string();
    std::ofstream out(path);
    out << dump.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    out.close();
    if (!out) return Status::Internal("cannot write the crash dump " + path);
    TSR_LOG_C(INFO, "request", "Dumped {} finished and {} unfinished requests before crash to {}", finished_.size(),
              running_.size(), path);
    written_ = path;
    return path;
}

}  // namespace tessera::front
