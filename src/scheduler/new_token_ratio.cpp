#include "scheduler/new_token_ratio.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

namespace tessera::scheduler {

NewTokenRatio::NewTokenRatio(const NewTokenRatioParams& params) {
    init_ = std::min(params.init_base * params.schedule_conservativeness, 1.0);
    min_ = std::min(init_ * params.min_factor, 1.0);
    decay_ = (init_ - min_) / std::max(params.decay_steps, 1);
    value_ = init_;
}

double ratio_after_retraction(std::int64_t total_decoded, std::int64_t total_max_new_tokens,
                              std::int64_t n_remaining, int retract_decode_steps) {
    const double num = static_cast<double>(total_decoded) +
                       static_cast<double>(retract_decode_steps) * static_cast<double>(n_remaining);
    return std::min(1.0, num / static_cast<double>(total_max_new_tokens + 1));
}

std::vector<std::size_t> retraction_order(std::span<const RetractCandidate> running,
                                          std::optional<PriorityOrder> by_priority) {
    std::vector<std::size_t> order(running.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    const std::int64_t worse = by_priority ? -by_priority->sign() : 0;
    const auto key = [&](std::size_t i) {
        return std::tuple<std::int64_t, std::int64_t, std::int64_t>(running[i].priority * worse, running[i].output_len,
                                                                    -running[i].input_len);
    };
    // Descending, stable (the batch that SGLang keeps), then popped from the back.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
    std::reverse(order.begin(), order.end());
    return order;
}

}  // namespace tessera::scheduler
