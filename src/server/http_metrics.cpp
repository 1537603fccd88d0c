#include "server/http_metrics.h"

#include <fmt/format.h>

namespace tessera::server {
namespace {

// Bucket bounds as in SGLang's TokenizerMetricsCollector defaults.
const std::vector<double> kTtftBuckets = {0.1, 0.2, 0.4, 0.6, 0.8, 1,  2,   4,   6,   8,
                                          10,  20,  40,  60,  80,  100, 200, 400, 600, 1200};
const std::vector<double> kItlBuckets = {0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025,
                                         0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400,
                                         0.600, 0.800, 1.0,   2.0,   4.0,   6.0,   8.0};
const std::vector<double> kE2eBuckets = {0.1, 0.2, 0.4, 0.6, 0.8, 1,   2,   4,   6,   8,   10,
                                         20,  40,  60,  80,  100, 200, 400, 600, 1200, 1800, 2400};

// Prometheus float rendering ("1.0", "0.25", "+Inf").
std::string prom_number(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

std::string escape_label(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, std::int64_t count) {
    std::size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    counts_[i] += count;
    sum_ += value * static_cast<double>(count);
    count_ += count;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    // labels is "model_name=\"x\""; buckets add le.
    std::int64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += counts_[i];
        const std::string le = i < bounds_.size() ? prom_number(bounds_[i]) : "+Inf";
        out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, prom_number(static_cast<double>(cumulative)));
    }
    out += fmt::format("{}_sum{{{}}} {}\n", name, labels, prom_number(sum_));
    out += fmt::format("{}_count{{{}}} {}\n", name, labels, prom_number(static_cast<double>(count_)));
}

HttpMetrics::HttpMetrics(std::string model_name)
    : labels_("model_name=\"" + escape_label(model_name) + "\""),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets) {}

void HttpMetrics::add_prompt_tokens(std::int64_t n) {
    std::lock_guard lock(mu_);
    prompt_tokens_ += static_cast<double>(n);
}

void HttpMetrics::add_generation_tokens(std::int64_t n) {
    std::lock_guard lock(mu_);
    generation_tokens_ += static_cast<double>(n);
}

void HttpMetrics::observe_time_to_first_token(double seconds) {
    std::lock_guard lock(mu_);
    ttft_.observe(seconds);
}

void HttpMetrics::observe_inter_token_latency(double seconds, std::int64_t n_tokens) {
    if (n_tokens <= 0) return;
    std::lock_guard lock(mu_);
    itl_.observe(seconds / static_cast<double>(n_tokens), n_tokens);
}

void HttpMetrics::observe_e2e_request_latency(double seconds) {
    std::lock_guard lock(mu_);
    e2e_.observe(seconds);
}

std::string HttpMetrics::render() const {
    std::lock_guard lock(mu_);
    std::string out;
    auto counter = [&](const char* base, const char* help, double value) {
        out += fmt::format("# HELP sglang:{} {}\n# TYPE sglang:{} counter\n", base, help, base);
        out += fmt::format("sglang:{}_total{{{}}} {}\n", base, labels_, prom_number(value));
    };
    counter("prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
    counter("generation_tokens", "Number of generation tokens processed.", generation_tokens_);
    auto histogram = [&](const char* name, const char* help, const Histogram& h) {
        out += fmt::format("# HELP sglang:{} {}\n# TYPE sglang:{} histogram\n", name, help, name);
        h.render(out, std::string("sglang:") + name, labels_);
    };
    histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
    histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
    histogram("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2e_);
    return out;
}

}  // namespace tessera::server
