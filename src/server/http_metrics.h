#pragma once
// server/http_metrics.h — the HTTP (tokenizer-side) Prometheus metrics with SGLang's names:
// sglang:prompt_tokens_total, sglang:generation_tokens_total (counters) and the
// time_to_first_token / inter_token_latency / e2e_request_latency histograms, labelled
// model_name. Thread-safe (one mutex; updates are a few adds).

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::server {

// A Prometheus histogram with fixed upper bounds (seconds); +Inf is implicit.
class Histogram {
 public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value, std::int64_t count = 1);
    // Appends the _bucket / _sum / _count samples of `name` with the given label text.
    void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
    std::vector<double> bounds_;
    std::vector<std::int64_t> counts_;  // per bucket, not cumulative; last = +Inf
    double sum_ = 0.0;
    std::int64_t count_ = 0;
};

class HttpMetrics {
 public:
    explicit HttpMetrics(std::string model_name);

    void add_prompt_tokens(std::int64_t n);
    void add_generation_tokens(std::int64_t n);
    void observe_time_to_first_token(double seconds);
    // `n_tokens` tokens arrived `seconds` after the previous ones: observes seconds / n, n times.
    void observe_inter_token_latency(double seconds, std::int64_t n_tokens);
    void observe_e2e_request_latency(double seconds);

    std::string render() const;  // Prometheus text format

 private:
    const std::string labels_;  // {model_name="…"}
    mutable std::mutex mu_;
    double prompt_tokens_ = 0;      // GUARDED_BY(mu_)
    double generation_tokens_ = 0;  // GUARDED_BY(mu_)
    Histogram ttft_;                // GUARDED_BY(mu_)
    Histogram itl_;                 // GUARDED_BY(mu_)
    Histogram e2e_;                 // GUARDED_BY(mu_)
};

}  // namespace tessera::server
