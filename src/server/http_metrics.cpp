#include "server/http_metrics.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/histogram.h"
#include "base/logging.h"

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

// SGLang's default_bucket_prompt_tokens, for prompt and generation tokens both.
const std::vector<double> kTokenBuckets = {
    100,   300,   500,   700,   1000,  1500,  2000,   3000,   4000,   5000,   6000,    7000,
    8000,  9000,  10000, 12500, 15000, 17500, 20000,  22500,  25000,  27500,  30000,   35000,
    40000, 60000, 80000, 100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000};

std::optional<double> number(const std::string& text) {
    try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v)) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

// Prometheus float rendering ("1.0", "0.25", "+Inf").
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

StatusOr<std::vector<double>> token_histogram_buckets(std::string_view flag, const std::vector<std::string>& rule) {
    const auto invalid = [&](const std::string& message) {
        return Status::InvalidArgument(std::string(flag) + " " + message);
    };
    if (rule.empty() || rule[0] == "default") {
        if (rule.size() > 1)
            return invalid(
                fmt::format("default rule should only have one parameter: ['default'], got {}", rule.size()));
        return kTokenBuckets;
    }
    if (rule[0] == "tse") {
        if (rule.size() != 4)
            return invalid(fmt::format("TSE rule requires exactly 4 parameters: ['tse', middle, base, count], got {}",
                                       rule.size()));
        const auto middle = number(rule[1]), base = number(rule[2]), count = number(rule[3]);
        if (!middle || !base || !count || *count != std::floor(*count))
            return invalid("TSE rule parameters must be: ['tse', <float:middle>, <float:base>, <int:count>]");
        if (*base <= 1) return invalid(fmt::format("TSE base must be larger than 1, got: {}", *base));
        if (*count <= 0) return invalid(fmt::format("TSE count must be positive, got: {}", *count));
        if (*middle <= 0) return invalid(fmt::format("TSE middle must be positive, got: {}", *middle));
        // observability/utils.py two_sides_exponential_buckets.
        std::set<double> bounds = {*middle};
        double distance = 1;
        for (int i = 0; i < static_cast<int>(std::ceil(*count / 2)); ++i) {
            distance *= *base;
            bounds.insert(*middle + distance);
            bounds.insert(std::max(0.0, *middle - distance));
        }
        return std::vector<double>(bounds.begin(), bounds.end());
    }
    if (rule[0] == "custom") {
        if (rule.size() < 2) return invalid("custom rule requires at least one bucket value: ['custom', value1, ...]");
        std::set<double> bounds;
        for (std::size_t i = 1; i < rule.size(); ++i) {
            const auto v = number(rule[i]);
            if (!v) return invalid("custom rule bucket values must be numeric");
            if (*v < 0) return invalid(fmt::format("custom rule bucket values should be non-negative, got: {}", *v));
            if (!bounds.insert(*v).second) return invalid("custom rule bucket values should not contain duplicates");
        }
        return std::vector<double>(bounds.begin(), bounds.end());
    }
    return Status::InvalidArgument(
        fmt::format("Unsupported {} rule type: '{}'. Must be one of: 'tse', 'default', 'custom'", flag, rule[0]));
}

Status check_latency_buckets(std::string_view flag, const std::vector<double>& bounds) {
    for (std::size_t i = 0; i < bounds.size(); ++i) {
        if (bounds[i] < 0 || (i > 0 && bounds[i] <= bounds[i - 1]))
            return Status::InvalidArgument(fmt::format(
                "{} {}: give non-negative bounds in increasing order, in seconds", flag, fmt::join(bounds, " ")));
    }
    return Status::Ok();
}

namespace {
const std::vector<double>& or_default(const std::vector<double>& given, const std::vector<double>& fallback) {
    return given.empty() ? fallback : given;
}
}  // namespace

Status check_label_name(std::string_view flag, const std::string& name) {
    const bool valid = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
    if (!valid || name.rfind("__", 0) == 0 || name == "le")
        return Status::InvalidArgument(std::string(flag) + ": '" + name +
                                       "' is not a label name Prometheus accepts (letters, digits and _, not "
                                       "starting with a digit or __, not le)");
    return Status::Ok();
}

StatusOr<std::string> metric_labels(const std::string& model_name, const std::string& extra_json) {
    std::vector<std::pair<std::string, std::string>> labels = {{"model_name", model_name}};
    if (!extra_json.empty()) {
        const auto extra = nlohmann::ordered_json::parse(extra_json, nullptr, false);
        if (!extra.is_object())
            return Status::InvalidArgument("--extra-metric-labels " + extra_json +
                                           ": give a JSON object of label names and values, e.g. "
                                           "'{\"cluster\": \"a\"}'");
        for (const auto& item : extra.items()) {
            const std::string& name = item.key();  // not a structured binding: clang cannot capture those
            const auto& value = item.value();
            TSR_RETURN_IF_ERROR(check_label_name("--extra-metric-labels", name));
            const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
            const auto same =
                std::find_if(labels.begin(), labels.end(), [&](const auto& l) { return l.first == name; });
            if (same != labels.end()) same->second = text;
            else labels.emplace_back(name, text);
        }
    }
    std::string out;
    for (const auto& [name, value] : labels)
        out += fmt::format("{}{}=\"{}\"", out.empty() ? "" : ",", name, escape_label(value));
    return out;
}

namespace {

MetricBuckets resolved(const MetricBuckets& b) {
    return {or_default(b.time_to_first_token, kTtftBuckets), or_default(b.inter_token_latency, kItlBuckets),
            or_default(b.e2e_request_latency, kE2eBuckets), or_default(b.prompt_tokens, kTokenBuckets),
            or_default(b.generation_tokens, kTokenBuckets)};
}

// ,name="value" for every allowed custom label, in the allowed order.
std::string custom_label_text(const std::vector<std::string>& names, const nlohmann::json& values) {
    std::string out;
    for (const std::string& name : names) {
        std::string value;
        if (values.is_object() && values.contains(name))
            value = values[name].is_string() ? values[name].get<std::string>() : values[name].dump();
        out += fmt::format(",{}=\"{}\"", name, escape_label(value));
    }
    return out;
}

// Distinct custom label sets kept apart; a request's values are the client's, so they are bounded.
constexpr std::size_t kMaxSeries = 1000;

}  // namespace

HttpMetrics::Series::Series(const MetricBuckets& b)
    : ttft(b.time_to_first_token),
      itl(b.inter_token_latency),
      e2e(b.e2e_request_latency),
      prompt(b.prompt_tokens),
      uncached_prompt(b.prompt_tokens),
      generation(b.generation_tokens) {}

HttpMetrics::HttpMetrics(std::string labels, const MetricBuckets& buckets, std::vector<std::string> custom_label_names)
    : labels_(std::move(labels)),
      buckets_(resolved(buckets)),
      custom_names_(std::move(custom_label_names)),
      no_custom_(custom_label_text(custom_names_, nlohmann::json())) {
    series_.emplace(no_custom_, Series(buckets_));
}

std::string HttpMetrics::series_of(std::string_view header_value) const {
    if (custom_names_.empty() || header_value.empty()) return no_custom_;
    const nlohmann::json values = nlohmann::json::parse(header_value, nullptr, false);
    if (!values.is_object()) {
        // SGLang logs the decode error and serves the request without the labels.
        TSR_LOG_C(WARN, "http", "Error in request: the custom labels header is not a JSON object: {}",
                  std::string(header_value.substr(0, 200)));
        return no_custom_;
    }
    return custom_label_text(custom_names_, values);
}

HttpMetrics::Series& HttpMetrics::series(const std::string& key) {
    auto it = series_.find(key.empty() ? no_custom_ : key);
    if (it != series_.end()) return it->second;
    if (series_.size() >= kMaxSeries) {
        if (!warned_full_)
            TSR_LOG_C(WARN, "http", "{} distinct custom metric label sets: later ones are counted without their "
                      "labels", kMaxSeries);
        warned_full_ = true;
        return series_.at(no_custom_);
    }
    return series_.emplace(key, Series(buckets_)).first->second;
}

void HttpMetrics::observe_request_tokens(std::int64_t prompt, std::int64_t cached, std::int64_t generated,
                                         const std::string& key) {
    std::lock_guard lock(mu_);
    Series& s = series(key);
    s.prompt.observe(static_cast<double>(prompt));
    s.uncached_prompt.observe(static_cast<double>(prompt - cached));
    s.generation.observe(static_cast<double>(generated));
}

void HttpMetrics::add_prompt_tokens(std::int64_t n, const std::string& key) {
    std::lock_guard lock(mu_);
    series(key).prompt_tokens += static_cast<double>(n);
}

void HttpMetrics::add_generation_tokens(std::int64_t n, const std::string& key) {
    std::lock_guard lock(mu_);
    series(key).generation_tokens += static_cast<double>(n);
}

void HttpMetrics::observe_time_to_first_token(double seconds, const std::string& key) {
    std::lock_guard lock(mu_);
    series(key).ttft.observe(seconds);
}

void HttpMetrics::observe_inter_token_latency(double seconds, std::int64_t n_tokens, const std::string& key) {
    if (n_tokens <= 0) return;
    std::lock_guard lock(mu_);
    series(key).itl.observe(seconds / static_cast<double>(n_tokens), n_tokens);
}

void HttpMetrics::observe_e2e_request_latency(double seconds, const std::string& key) {
    std::lock_guard lock(mu_);
    series(key).e2e.observe(seconds);
}

std::string HttpMetrics::render() const {
    std::lock_guard lock(mu_);
    std::string out;
    auto counter = [&](const char* base, const char* help, double Series::*value) {
        out += fmt::format("# HELP sglang:{} {}\n# TYPE sglang:{} counter\n", base, help, base);
        for (const auto& [key, s] : series_)
            out += fmt::format("sglang:{}_total{{{}{}}} {}\n", base, labels_, key, prometheus_number(s.*value));
    };
    counter("prompt_tokens", "Number of prefill tokens processed.", &Series::prompt_tokens);
    counter("generation_tokens", "Number of generation tokens processed.", &Series::generation_tokens);
    auto histogram = [&](const char* name, const char* help, Histogram Series::*h) {
        out += fmt::format("# HELP sglang:{} {}\n# TYPE sglang:{} histogram\n", name, help, name);
        for (const auto& [key, s] : series_) (s.*h).render(out, std::string("sglang:") + name, labels_ + key);
    };
    histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", &Series::ttft);
    histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &Series::itl);
    histogram("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", &Series::e2e);
    histogram("prompt_tokens_histogram", "Histogram of prompt token length.", &Series::prompt);
    histogram("uncached_prompt_tokens_histogram", "Histogram of prompt tokens not taken from the prefix cache.",
              &Series::uncached_prompt);
    histogram("generation_tokens_histogram", "Histogram of generation token length.", &Series::generation);
    return out;
}

}  // namespace tessera::server
