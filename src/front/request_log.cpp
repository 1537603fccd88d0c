#include "front/request_log.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "base/text.h"

namespace tessera::front {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kPartialChars = 2048;  // level 2 (SGLang's max_length for partial logs)

std::string cut(std::string_view text, std::size_t chars) {
    if (text.size() <= chars) return std::string(text);
    return std::string(text.substr(0, chars)) + "...";
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// "Receive: rid=..., prompt_tokens=..." or, as JSON, the fields and "event": "receive".
std::string render(std::string_view label, Json line, bool json) {
    if (json) {
        line["event"] = ascii_lower(label);
        return dump(line);
    }
    std::string text;
    for (const auto& [key, value] : line.items())
        text += (text.empty() ? "" : ", ") + key + "=" + (value.is_string() ? value.get<std::string>() : dump(value));
    return std::string(label) + ": " + text;
}

constexpr auto kRotation = std::chrono::hours(1);

std::string log_file_path(const std::string& directory, int rank) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "localhost");
    return (std::filesystem::path(directory) / fmt::format("{}_{}.log", host, rank)).string();
}

}  // namespace

std::string cannot_append(const std::string& path) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    if (ec) return ec.message();
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) return "fopen failed";
    std::fclose(f);
    return "";
}

Status check_request_log_targets(const RequestLogOptions& options) {
    for (const std::string& target : options.targets) {
        if (ascii_lower(target) == "stdout") continue;
        const std::string path = log_file_path(target, options.rank);
        if (const std::string why = cannot_append(path); !why.empty())
            return Status::InvalidArgument(fmt::format("--log-requests-target {}: cannot write {} ({}); give stdout or "
                                                       "a directory this user can create files in",
                                                       target, path, why));
    }
    return Status::Ok();
}

// The open targets: a line goes to every one, files begin anew every hour.
class RequestLog::Targets {
 public:
    explicit Targets(const RequestLogOptions& options) : clock_(options.clock) {
        if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
        const auto now = clock_();
        for (const std::string& target : options.targets) {
            if (ascii_lower(target) == "stdout") {
                to_stdout_ = true;
                continue;
            }
            File& f = files_.emplace_back(File{log_file_path(target, options.rank)});
            open(f, now);
        }
    }
    ~Targets() {
        for (File& f : files_)
            if (f.out) std::fclose(f.out);
    }

    void write(const std::string& line) {
        std::lock_guard<std::mutex> lock(mu_);
        if (to_stdout_) {
            std::fwrite(line.data(), 1, line.size(), stdout);
            std::fputc('\n', stdout);
            std::fflush(stdout);
        }
        const auto now = clock_();
        for (File& f : files_) {
            if (now >= f.rollover_at) rotate(f, now);
            if (!f.out) continue;
            std::fwrite(line.data(), 1, line.size(), f.out);
            std::fputc('\n', f.out);
            std::fflush(f.out);
        }
    }

 private:
    struct File {
        std::string path;
        std::FILE* out = nullptr;
        std::chrono::system_clock::time_point began;
        std::chrono::system_clock::time_point rollover_at;
    };

    void open(File& f, std::chrono::system_clock::time_point now) {
        f.out = std::fopen(f.path.c_str(), "a");
        if (!f.out) TSR_LOG_C(ERROR, "request", "--log-requests-target: cannot append to {}", f.path);
        f.began = now;
        f.rollover_at = now + kRotation;
    }

    // The finished file is named after the hour it began in: "<path>.2026-12-04_13".
    void rotate(File& f, std::chrono::system_clock::time_point now) {
        if (f.out) std::fclose(f.out);
        const std::time_t began = std::chrono::system_clock::to_time_t(f.began);
        std::tm local{};
        localtime_r(&began, &local);
        char suffix[32];
        std::strftime(suffix, sizeof(suffix), "%Y-%m-%d_%H", &local);
        std::error_code ec;
        std::filesystem::rename(f.path, f.path + "." + suffix, ec);
        if (ec) TSR_LOG_C(WARN, "request", "--log-requests-target: cannot rename {}: {}", f.path, ec.message());
        open(f, now);
    }

    std::mutex mu_;
    std::function<std::chrono::system_clock::time_point()> clock_;
    bool to_stdout_ = false;
    std::vector<File> files_;
};

RequestLog::RequestLog(RequestLogOptions options)
    : options_(std::move(options)), enabled_(options_.enabled), level_(options_.level), json_(options_.json) {
    if (!options_.targets.empty()) targets_ = std::make_unique<Targets>(options_);
}

void RequestLog::configure(std::optional<bool> enabled, std::optional<int> level, std::optional<bool> json) {
    if (level) level_.store(*level, std::memory_order_relaxed);
    if (json) json_.store(*json, std::memory_order_relaxed);
    if (enabled) enabled_.store(*enabled, std::memory_order_relaxed);
}

RequestLog::~RequestLog() = default;

void RequestLog::write(const std::string& line) const {
    if (targets_ && json_.load(std::memory_order_relaxed)) return targets_->write(line);
    TSR_LOG_C(INFO, "request", "{}", line);
}

std::size_t RequestLog::output_chars() const {
    const int level = level_.load(std::memory_order_relaxed);
    if (level < 2) return 0;
    return level == 2 ? kPartialChars : std::string::npos;
}

void RequestLog::received(std::string_view rid, const server::GenerationInput& in, const server::GenerationParams& p,
                          std::int64_t prompt_tokens) const {
    if (!on()) return;
    Json line = Json::object();
    line["rid"] = rid;
    line["prompt_tokens"] = prompt_tokens;
    const int level = level_.load(std::memory_order_relaxed);
    if (level >= 1) {
        line["sampling_params"] = Json{{"max_new_tokens", p.max_new_tokens}, {"temperature", p.temperature},
                                       {"top_p", p.top_p}, {"top_k", p.top_k}, {"min_p", p.min_p},
                                       {"frequency_penalty", p.frequency_penalty},
                                       {"presence_penalty", p.presence_penalty}, {"ignore_eos", p.ignore_eos},
                                       {"stop", p.stop}};
    }
    if (level >= 2) {
        const std::size_t chars = output_chars();
        if (in.text) line["text"] = cut(*in.text, chars);
        if (in.chat_json) line["chat"] = cut(*in.chat_json, chars);
        if (in.input_ids) line["input_ids"] = cut(dump(Json(*in.input_ids)), chars);
    }
    write(render("Receive", std::move(line), json_.load(std::memory_order_relaxed)));
}

void RequestLog::finished(std::string_view rid, std::string_view finish_reason, const server::Usage& usage,
                          std::string_view output) const {
    if (!on()) return;
    Json line = Json{{"rid", rid},
                     {"finish_reason", finish_reason},
                     {"prompt_tokens", usage.prompt_tokens},
                     {"completion_tokens", usage.completion_tokens},
                     {"cached_tokens", usage.cached_tokens}};
    if (level_.load(std::memory_order_relaxed) >= 2) line["out"] = cut(output, output_chars());
    write(render("Finish", std::move(line), json_.load(std::memory_order_relaxed)));
}

}  // namespace tessera::front
