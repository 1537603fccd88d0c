#include "scheduler/priority_preemption.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tessera::scheduler {

std::vector<std::size_t> choose_preemption(const PreemptionRequest& request,
                                           std::span<const PreemptionCandidate> running, const PriorityOrder& order,
                                           std::int64_t threshold, double new_token_ratio) {
    std::vector<std::size_t> by_worst(running.size());
    std::iota(by_worst.begin(), by_worst.end(), std::size_t{0});
    const std::int64_t worse = -order.sign();
    std::stable_sort(by_worst.begin(), by_worst.end(), [&](std::size_t a, std::size_t b) {
        const auto key = [&](std::size_t i) {
            return std::pair<double, double>(static_cast<double>(running[i].priority) * static_cast<double>(worse),
                                             -static_cast<double>(running[i].queue_entry));
        };
        return key(a) < key(b);
    });
    double needed = request.tokens_needed;
    std::vector<std::size_t> victims;
    for (const std::size_t i : by_worst) {
        // In doubles: the worst priority is a 64-bit extreme, and only the comparison matters.
        const double gap = (static_cast<double>(request.priority) - static_cast<double>(running[i].priority)) *
                           static_cast<double>(worse);
        if (!(gap > static_cast<double>(threshold))) break;
        victims.push_back(i);
        needed -= static_cast<double>(running[i].remaining_tokens) * new_token_ratio;
        if (needed <= 0.0) break;
    }
    if (victims.empty() || needed > 0.0) return {};
    return victims;
}

}  // namespace tessera::scheduler
