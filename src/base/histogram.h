#pragma once
// base/histogram.h — a Prometheus histogram with fixed upper bounds, and numbers as
// Prometheus text writes them. Not thread-safe: its owner guards it.

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// A float sample value: "3.0", not "3".
std::string prometheus_number(double v);

class Histogram {
 public:
    // `bounds`: increasing upper bounds; +Inf is implicit.
    explicit Histogram(std::vector<double> bounds = {});
    void observe(double value, std::int64_t count = 1);
    // Appends the _bucket / _sum / _count samples of `name`; `labels` is label text without
    // braces (may be empty).
    void render(std::string& out, const std::string& name, const std::string& labels) const;
    std::int64_t count() const { return count_; }

 private:
    std::vector<double> bounds_;
    std::vector<std::int64_t> counts_;  // per bucket, not cumulative; last = +Inf
    double sum_ = 0.0;
    std::int64_t count_ = 0;
};

}  // namespace tessera
