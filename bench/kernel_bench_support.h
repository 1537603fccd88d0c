#pragma once
// bench/kernel_bench_support.h — what the kernel benchmarks (src/kernels/*_bench.cpp) share:
// their `--name=N` flags and the median time of a step repeated for a while.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::bench {

// `arg` is `key` followed by a number (key includes the '='): stores it in *out.
inline bool number_flag(std::string_view arg, std::string_view key, std::int64_t* out) {
    if (arg.substr(0, key.size()) != key) return false;
    *out = std::stoll(std::string(arg.substr(key.size())));
    return true;
}

// Median seconds of step() over at least 5 runs, then more until 2 s or 50 runs.
template <typename Step>
double median_step_seconds(Step&& step) {
    const auto now = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    std::vector<double> steps;
    const double start = now();
    while (steps.size() < 5 || (now() - start < 2.0 && steps.size() < 50)) {
        const double t0 = now();
        step();
        steps.push_back(now() - t0);
    }
    std::sort(steps.begin(), steps.end());
    return steps[steps.size() / 2];
}

}  // namespace tessera::bench
