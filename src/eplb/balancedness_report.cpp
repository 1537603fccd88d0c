#include "eplb/balancedness_report.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace tessera::eplb {

void BalancednessReport::add(std::int64_t pass_id, double balancedness, std::int64_t gpu_physical_count_sum) {
    std::lock_guard<std::mutex> lock(mu_);
    last_.push_back(balancedness);
    if (last_.size() > 1000) last_.pop_front();
    pass_id_ = pass_id;
    count_sum_ = gpu_physical_count_sum;
    ++passes_;
    sum_ += balancedness;
}

std::int64_t BalancednessReport::passes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return passes_;
}

std::string BalancednessReport::log_line() const {
    std::lock_guard<std::mutex> lock(mu_);
    auto average = [&](std::size_t n) {
        n = std::min(n, last_.size());
        double s = 0.0;
        for (std::size_t i = last_.size() - n; i < last_.size(); ++i) s += last_[i];
        return n == 0 ? 0.0 : s / static_cast<double>(n);
    };
    std::string line = fmt::format("[Expert Balancedness] forward_pass_id={} current_pass_balancedness={:.3f} ", pass_id_,
                                   last_.empty() ? 0.0 : last_.back());
    for (std::size_t n : {10, 100, 1000}) line += fmt::format("last_{}_average_balancedness={:.3f} ", n, average(n));
    return line + fmt::format(" gpu_physical_count_sum={}", count_sum_);
}

std::string BalancednessReport::prometheus(const std::string& labels) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> sorted(last_.begin(), last_.end());
    std::sort(sorted.begin(), sorted.end());
    std::string out =
        "# HELP sglang:eplb_balancedness Balancedness of the MoE load over EP ranks per forward pass "
        "(mean / max tokens per rank; 1 is even).\n# TYPE sglang:eplb_balancedness summary\n";
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (double q : {0.5, 0.9, 0.99}) {
        const double v = sorted.empty() ? 0.0
                                        : sorted[std::min(sorted.size() - 1,
                                                          static_cast<std::size_t>(q * static_cast<double>(sorted.size())))];
        out += fmt::format("sglang:eplb_balancedness{{{}quantile=\"{}\"}} {}\n", sep, q, v);
    }
    out += fmt::format("sglang:eplb_balancedness_sum{{{}}} {}\n", labels, sum_);
    out += fmt::format("sglang:eplb_balancedness_count{{{}}} {}\n", labels, passes_);
    return out;
}

}  // namespace tessera::eplb
