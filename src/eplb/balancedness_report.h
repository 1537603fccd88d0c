#pragma once
// eplb/balancedness_report.h — balancedness over the last 10, 100 and 1000 forward passes,
// as SGLang's expert distribution recorder reports it: the "[Expert Balancedness]" log line
// and the sglang:eplb_balancedness summary on /metrics. Written by the model thread of the
// output rank, read by HTTP threads; thread-safe.

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace tessera::eplb {

class BalancednessReport {
 public:
    void add(std::int64_t pass_id, double balancedness, std::int64_t gpu_physical_count_sum);
    // "[Expert Balancedness] forward_pass_id=... current_pass_balancedness=... last_10_... " (SGLang's text).
    std::string log_line() const;
    // Prometheus text: a summary of the passes' balancedness (quantiles over the last 1000).
    std::string prometheus(const std::string& labels) const;
    std::int64_t passes() const;

 private:
    mutable std::mutex mu_;
    std::deque<double> last_;  // GUARDED_BY(mu_): at most 1000
    std::int64_t pass_id_ = 0, count_sum_ = 0, passes_ = 0;
    double sum_ = 0.0;
};

}  // namespace tessera::eplb
