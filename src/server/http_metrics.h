#pragma once
// server/http_metrics.h — the HTTP (tokenizer-side) Prometheus metrics with SGLang's names:
// sglang:prompt_tokens_total, sglang:generation_tokens_total (counters), the
// time_to_first_token / inter_token_latency / e2e_request_latency histograms and the
// prompt / uncached prompt / generation token histograms, labelled model_name. Thread-safe (one
// mutex; updates are a few adds).

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/histogram.h"
#include "base/status.h"

namespace tessera::server {

// Histogram bounds: --bucket-time-to-first-token, --bucket-inter-token-latency and
// --bucket-e2e-request-latency (seconds), and what --prompt-tokens-buckets and
// --generation-tokens-buckets resolve to. Empty: SGLang's defaults.
struct MetricBuckets {
    std::vector<double> time_to_first_token;
    std::vector<double> inter_token_latency;
    std::vector<double> e2e_request_latency;
    std::vector<double> prompt_tokens;
    std::vector<double> generation_tokens;
};

// A token-count bucket rule as SGLang reads it (observability/utils.py generate_buckets, with
// validate_buckets_rule's checks and messages): "default", "tse <middle> <base> <count>" (two
// sides exponential around middle) or "custom <bound> ..."; empty is "default".
StatusOr<std::vector<double>> token_histogram_buckets(std::string_view flag, const std::vector<std::string>& rule);

// Latency bounds given on the command line: they must be non-negative and increase.
Status check_latency_buckets(std::string_view flag, const std::vector<double>& bounds);

// The labels every sample carries, as Prometheus text without braces: model_name="..." and
// --extra-metric-labels' (a JSON object of label names and values, "" for none; a name given
// there replaces the same one, as SGLang's labels.update does). Refuses names Prometheus does
// not allow.
StatusOr<std::string> metric_labels(const std::string& model_name, const std::string& extra_json);

// A label name Prometheus accepts, else InvalidArgument naming `flag`.
Status check_label_name(std::string_view flag, const std::string& name);

// --tokenizer-metrics-allowed-custom-labels: the label names a request may set in the
// --tokenizer-metrics-custom-labels-header header, a JSON object such as {"team": "a"} (SGLang's
// serving_base.py extract_custom_labels: other names are dropped). Every sample carries each
// allowed label, "" when the request gave none.
struct CustomMetricLabels {
    std::string header = "x-custom-labels";
    std::vector<std::string> allowed;
};

class HttpMetrics {
 public:
    // `labels`: what metric_labels() renders; `custom_label_names`: the allowed custom labels.
    explicit HttpMetrics(std::string labels, const MetricBuckets& buckets = {},
                         std::vector<std::string> custom_label_names = {});

    // The series a request's samples go to, from its custom-labels header value (empty, or
    // not a JSON object: the series of no custom labels). Pass it to the calls below.
    std::string series_of(std::string_view header_value) const;

    void add_prompt_tokens(std::int64_t n, const std::string& series = {});
    void add_generation_tokens(std::int64_t n, const std::string& series = {});
    // A finished request's token counts, into the token histograms.
    void observe_request_tokens(std::int64_t prompt, std::int64_t cached, std::int64_t generated,
                                const std::string& series = {});
    void observe_time_to_first_token(double seconds, const std::string& series = {});
    // `n_tokens` tokens arrived `seconds` after the previous ones: observes seconds / n, n times.
    void observe_inter_token_latency(double seconds, std::int64_t n_tokens, const std::string& series = {});
    void observe_e2e_request_latency(double seconds, const std::string& series = {});

    std::string render() const;  // Prometheus text format

 private:
    struct Series {
        explicit Series(const MetricBuckets& b);
        double prompt_tokens = 0;
        double generation_tokens = 0;
        Histogram ttft, itl, e2e, prompt, uncached_prompt, generation;
    };
    // The series of `key` (its custom labels' text), created on first use; past kMaxSeries
    // distinct ones, the series of no custom labels. REQUIRES: mu_ held.
    Series& series(const std::string& key);

    const std::string labels_;  // model_name="…" and --extra-metric-labels
    const MetricBuckets buckets_;
    const std::vector<std::string> custom_names_;
    const std::string no_custom_;  // every custom label at "": the default series' key
    mutable std::mutex mu_;
    std::map<std::string, Series> series_;  // GUARDED_BY(mu_); by custom labels' text
    bool warned_full_ = false;             // GUARDED_BY(mu_)
};

}  // namespace tessera::server
