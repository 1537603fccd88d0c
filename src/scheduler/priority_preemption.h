#pragma once
// scheduler/priority_preemption.h — --enable-priority-scheduling: the order of priorities and
// which running requests a waiting one may preempt when the running batch is full (SGLang's
// schedule_policy.py PrefillAdder.preempt_to_schedule). Pure functions; the scheduler frees
// the victims' KV and queues them again.
//
// "Better" means a higher value, or a lower one under --schedule-low-priority-values-first.
// A request without a priority gets --default-priority-value, else the worst priority there
// is (SGLang's scheduler.py _set_or_validate_priority: sys.maxsize or -sys.maxsize - 1).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tessera::scheduler {

struct PriorityOrder {
    bool low_values_first = false;  // --schedule-low-priority-values-first

    // SGLang's priority_sign: keys sort ascending, so sign · priority puts the better first.
    std::int64_t sign() const { return low_values_first ? 1 : -1; }
    // Below every value a request can carry, and safe to multiply by sign().
    std::int64_t worst() const { return low_values_first ? kExtreme : -kExtreme; }

    static constexpr std::int64_t kExtreme = std::numeric_limits<std::int64_t>::max();
};

struct PreemptionCandidate {
    std::int64_t priority = 0;
    std::uint64_t queue_entry = 0;      // when it last joined the waiting queue
    std::int64_t remaining_tokens = 0;  // min(max_new_tokens − output_len, clip)
};

struct PreemptionRequest {
    std::int64_t priority = 0;
    // extend_input_len + min(max_new_tokens, clip) − the adder's rem_total_tokens: what the
    // victims' reservations must free for it to be admitted.
    double tokens_needed = 0.0;
};

// Indices into `running` of the requests to preempt, worst first; empty when preemption does
// not make room (then nothing is preempted). Candidates are tried worst priority first, the
// latest to have joined the queue first among equals; each must be worse than the request by
// more than `threshold` (--priority-scheduling-preemption-threshold), and each frees its
// remaining tokens times `new_token_ratio`, until the request's need is met.
std::vector<std::size_t> choose_preemption(const PreemptionRequest& request,
                                           std::span<const PreemptionCandidate> running, const PriorityOrder& order,
                                           std::int64_t threshold, double new_token_ratio);

}  // namespace tessera::scheduler
