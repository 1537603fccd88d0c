#include "scheduler/schedule_policy.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "scheduler/priority_preemption.h"

namespace tessera::scheduler {

StatusOr<SchedulePolicy> parse_schedule_policy(std::string_view name) {
    if (name == "fcfs") return SchedulePolicy::kFcfs;
    if (name == "lpm") return SchedulePolicy::kLpm;
    if (name == "lof") return SchedulePolicy::kLof;
    if (name == "random") return SchedulePolicy::kRandom;
    if (name == "priority") return SchedulePolicy::kPriority;
    if (name == "dfs-weight" || name == "routing-key") {
        return Status::Unimplemented("--schedule-policy " + std::string(name) +
                                     " is not supported by tessera yet; use one of: fcfs, lpm, "
                                     "lof, random, priority");
    }
    return Status::InvalidArgument("unknown --schedule-policy '" + std::string(name) +
                                   "'; valid: fcfs, lpm, lof, random, priority");
}

std::string_view schedule_policy_name(SchedulePolicy policy) {
    switch (policy) {
        case SchedulePolicy::kFcfs: return "fcfs";
        case SchedulePolicy::kLpm: return "lpm";
        case SchedulePolicy::kLof: return "lof";
        case SchedulePolicy::kRandom: return "random";
        case SchedulePolicy::kPriority: return "priority";
    }
    return "";
}

SchedulePolicy effective_policy(SchedulePolicy policy, std::size_t queue_len,
                                bool radix_cache_enabled) {
    if (policy == SchedulePolicy::kLpm && (!radix_cache_enabled || queue_len > kLpmMaxQueueLen))
        return SchedulePolicy::kFcfs;
    return policy;
}

std::vector<std::size_t> order_waiting_queue(SchedulePolicy policy,
                                             std::span<const WaitingReqView> queue,
                                             const PolicyOptions& options, PolicyRng& rng) {
    std::vector<std::size_t> order(queue.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    const auto by = [&](auto key) {
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return key(queue[a]) < key(queue[b]); });
    };
    // Better priorities first: higher values unless --schedule-low-priority-values-first.
    const PriorityOrder priorities{options.low_priority_values_first};
    const std::int64_t sign = priorities.sign();
    switch (effective_policy(policy, queue.size(), options.radix_cache_enabled)) {
        case SchedulePolicy::kFcfs:
            if (options.priority_scheduling) {
                by([sign](const WaitingReqView& r) {
                    return std::pair<std::int64_t, std::uint64_t>(sign * r.priority, r.queue_entry);
                });
            }
            break;
        case SchedulePolicy::kLpm:
            by([](const WaitingReqView& r) { return -r.prefix_len; });
            break;
        case SchedulePolicy::kLof:
            if (options.priority_scheduling) {
                by([sign](const WaitingReqView& r) {
                    return std::pair<std::int64_t, std::int64_t>(sign * r.priority, -r.max_new_tokens);
                });
            } else {
                by([](const WaitingReqView& r) { return -r.max_new_tokens; });
            }
            break;
        case SchedulePolicy::kRandom:
            std::shuffle(order.begin(), order.end(), rng);
            break;
        case SchedulePolicy::kPriority:
            by([sign](const WaitingReqView& r) {
                return std::pair<std::int64_t, std::uint64_t>(sign * r.priority, r.queue_entry);
            });
            break;
    }
    return order;
}

}  // namespace tessera::scheduler
