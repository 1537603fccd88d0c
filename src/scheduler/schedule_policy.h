#pragma once
// scheduler/schedule_policy.h — in which order the waiting queue is offered to the prefill
// adder (SGLang's SchedulePolicy.calc_priority, --schedule-policy). Pure functions over a
// view of the queue: no cache access, no I/O; the caller supplies prefix-match lengths.
// Thread-safe (no state; the random policy uses the caller's Rng).

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::scheduler {

enum class SchedulePolicy {
    kFcfs,      // queue order (arrival; retracted requests rejoin at the back)
    kLpm,       // longest cached prefix first (cache-aware)
    kLof,       // longest output (max_new_tokens) first
    kRandom,    // seeded shuffle
    kPriority,  // by priority value, then arrival
};

// Accepts SGLang's names; "dfs-weight" and "routing-key" are recognised but Unimplemented
// (the flag layer rejects them at start-up with this message).
StatusOr<SchedulePolicy> parse_schedule_policy(std::string_view name);
std::string_view schedule_policy_name(SchedulePolicy policy);

// lpm costs a prefix match per waiting request; past this queue length it acts as fcfs.
constexpr std::size_t kLpmMaxQueueLen = 128;

// The policy actually applied this round: cache-aware policies fall back to fcfs when the
// radix cache is disabled or the queue is longer than kLpmMaxQueueLen.
SchedulePolicy effective_policy(SchedulePolicy policy, std::size_t queue_len,
                                bool radix_cache_enabled);

struct WaitingReqView {
    std::uint64_t queue_entry = 0;  // when it (last) joined the queue
    std::int64_t prefix_len = 0;    // cached-prefix match length (lpm only)
    std::int64_t max_new_tokens = 0;
    std::int64_t priority = 0;
};

struct PolicyOptions {
    bool radix_cache_enabled = true;
    bool low_priority_values_first = false;  // --schedule-low-priority-values-first
    // --enable-priority-scheduling: fcfs and lof order by priority first (SGLang's
    // SchedulePolicy._sort_by_priority_and_fcfs, _sort_by_longest_output).
    bool priority_scheduling = false;
};

using PolicyRng = std::mt19937_64;

// A permutation of [0, queue.size()): the order in which to try the requests. Sorts are
// stable, so ties keep queue order (as Python's list.sort in SGLang).
std::vector<std::size_t> order_waiting_queue(SchedulePolicy policy,
                                             std::span<const WaitingReqView> queue,
                                             const PolicyOptions& options, PolicyRng& rng);

}  // namespace tessera::scheduler
