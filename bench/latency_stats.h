#pragma once
// bench/latency_stats.h — the summary statistics the benchmark tools report: mean, median,
// p90, p99 (and std, min, max) of a sample, with percentiles interpolated linearly between
// order statistics (numpy's default, which SGLang's bench_serving uses). Pure functions.

#include <cstddef>
#include <vector>

namespace tessera::bench {

struct LatencySummary {
    double mean = 0.0;
    double median = 0.0;
    double p90 = 0.0;
    double p99 = 0.0;
    double std = 0.0;  // population standard deviation
    double min = 0.0;
    double max = 0.0;
    std::size_t count = 0;
};

// Percentile q in [0, 100] of `sorted` (ascending); 0 for an empty sample.
double percentile_sorted(const std::vector<double>& sorted, double q);

// All zeros (count 0) for an empty sample.
LatencySummary summarize(std::vector<double> values);

}  // namespace tessera::bench
