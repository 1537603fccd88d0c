#include "bench/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tessera::bench {

double percentile_sorted(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0.0;
    const double pos = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

LatencySummary summarize(std::vector<double> values) {
    LatencySummary s;
    if (values.empty()) return s;
    std::sort(values.begin(), values.end());
    s.count = values.size();
    const double n = static_cast<double>(values.size());
    s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
    double var = 0.0;
    for (double v : values) var += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(var / n);
    s.median = percentile_sorted(values, 50.0);
    s.p90 = percentile_sorted(values, 90.0);
    s.p99 = percentile_sorted(values, 99.0);
    s.min = values.front();
    s.max = values.back();
    return s;
}

}  // namespace tessera::bench
