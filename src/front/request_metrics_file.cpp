#include "front/request_metrics_file.h"

#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "front/request_log.h"

namespace tessera::front {

namespace {
using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
}  // namespace

RequestMetricsFile::RequestMetricsFile(std::string directory, Clock clock)
    : directory_(std::move(directory)), clock_(std::move(clock)) {
    if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
}

std::string RequestMetricsFile::path_at(std::chrono::system_clock::time_point now) const {
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    localtime_r(&t, &local);
    char hour[32];
    std::strftime(hour, sizeof(hour), "%Y%m%d_%H", &local);
    return (std::filesystem::path(directory_) / fmt::format("sglang-request-metrics-{}.log", hour)).string();
}

Status RequestMetricsFile::check_directory(const std::string& directory) {
    const std::string path = RequestMetricsFile(directory).path_at(std::chrono::system_clock::now());
    if (const std::string why = cannot_append(path); !why.empty())
        return Status::InvalidArgument(fmt::format("--export-metrics-to-file-dir {}: cannot write {} ({}); give a "
                                                   "directory this user can create files in",
                                                   directory, path, why));
    return Status::Ok();
}

std::string RequestMetricsFile::parameters_json(std::string_view rid, const server::GenerationInput& in,
                                                const server::GenerationParams& p) {
    Json j = Json::object();
    if (in.text) j["text"] = *in.text;
    if (in.input_ids) j["input_ids"] = *in.input_ids;
    if (in.chat_json) {
        const Json chat = Json::parse(*in.chat_json, nullptr, false);
        if (chat.is_object() && chat.contains("messages")) j["messages"] = chat["messages"];
    }
    j["sampling_params"] = Json{{"max_new_tokens", p.max_new_tokens}, {"temperature", p.temperature},
                                {"top_p", p.top_p},     {"top_k", p.top_k},
                                {"min_p", p.min_p},     {"frequency_penalty", p.frequency_penalty},
                                {"presence_penalty", p.presence_penalty}, {"ignore_eos", p.ignore_eos},
                                {"skip_special_tokens", p.skip_special_tokens}};
    if (!p.stop.empty()) j["sampling_params"]["stop"] = p.stop;
    if (!p.stop_token_ids.empty()) j["sampling_params"]["stop_token_ids"] = p.stop_token_ids;
    j["rid"] = rid;
    if (p.logprobs) j["return_logprob"] = true;
    if (p.priority) j["priority"] = *p.priority;
    return dump(j);
}

void RequestMetricsFile::write(std::string_view parameters_json, const RequestMetrics& m) {
    Json finish = Json{{"type", m.finish_reason}};
    if (m.finish_reason == "stop") finish["matched"] = m.matched_stop ? Json(*m.matched_stop) : Json(nullptr);
    if (m.finish_reason == "length") finish["length"] = m.usage.completion_tokens;
    const Json line = Json{{"request_parameters", parameters_json},
                           {"id", m.rid},
                           {"finish_reason", std::move(finish)},
                           {"prompt_tokens", m.usage.prompt_tokens},
                           {"completion_tokens", m.usage.completion_tokens},
                           {"cached_tokens", m.usage.cached_tokens},
                           {"e2e_latency", m.e2e_latency_s}};
    const std::string text = dump(line) + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    const std::string path = path_at(clock_());
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
        TSR_LOG_C(ERROR, "request", "Failed to write perf metrics to file: cannot append to {}", path);
        return;
    }
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
}

}  // namespace tessera::front
