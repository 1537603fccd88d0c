#include "scheduler/prefill_delayer.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace tessera::scheduler {

namespace {

using Intent = executor::BatchRunner::PrefillIntent;

std::vector<double> sorted_unique(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

std::string optional_name(const std::optional<double>& v) { return v ? fmt::format("{}", *v) : "None"; }

}  // namespace

std::vector<double> prefill_delayer_passes_buckets(const PrefillDelayerConfig& c) {
    const std::vector<double> given =
        c.forward_passes_buckets.empty() ? std::vector<double>{5, 20, 50, 100, 200} : c.forward_passes_buckets;
    std::vector<double> out{0.0, static_cast<double>(c.max_delay_passes - 1)};
    for (double x : given)
        if (x < c.max_delay_passes) out.push_back(x);
    return sorted_unique(std::move(out));
}

std::vector<double> prefill_delayer_seconds_buckets(const PrefillDelayerConfig& c) {
    std::vector<double> out = c.wait_seconds_buckets;
    if (out.empty()) out = {1, 2, 5, 10, 20, 50, 100, 200, 500};
    out.push_back(0.0);
    return sorted_unique(std::move(out));
}

const char* prefill_estimation_name(PrefillEstimation e) {
    switch (e) {
        case PrefillEstimation::kAll: return "all";
        case PrefillEstimation::kNone: return "none";
        case PrefillEstimation::kMixed: return "mixed";
    }
    return "?";
}

const char* prefill_delay_reason_name(PrefillDelayReason r) {
    switch (r) {
        case PrefillDelayReason::kNone: return "";
        case PrefillDelayReason::kNoWait: return "no_wait";
        case PrefillDelayReason::kWaitSuccess: return "wait_success";
        case PrefillDelayReason::kDelay: return "delay";
        case PrefillDelayReason::kTokenWatermark: return "token_watermark";
        case PrefillDelayReason::kWaitTimeout: return "wait_timeout";
    }
    return "?";
}

std::string PrefillDelayerStats::prometheus(const std::string& labels) const {
    std::string out;
    const std::string sep = labels.empty() ? "" : ",";
    out += "# HELP sglang:prefill_delayer_outcomes_total Prefill passes by what the groups could admit, whether this "
           "one was allowed to, why, and whether it then ran a prefill.\n"
           "# TYPE sglang:prefill_delayer_outcomes_total counter\n";
    for (int e = 0; e < 3; ++e)
        for (int allow = 0; allow < 2; ++allow)
            for (int r = 0; r < 6; ++r)
                for (int actual = 0; actual < 2; ++actual) {
                    const std::int64_t n = outcomes[e][allow][r][actual];
                    if (n == 0) continue;
                    out += fmt::format(
                        "sglang:prefill_delayer_outcomes_total{{{}{}input_estimation=\"{}\",output_allow=\"{}\","
                        "output_reason=\"{}\",actual_execution=\"{}\"}} {}\n",
                        labels, sep, prefill_estimation_name(static_cast<PrefillEstimation>(e)),
                        allow ? "true" : "false", prefill_delay_reason_name(static_cast<PrefillDelayReason>(r)),
                        actual ? "true" : "false", prometheus_number(static_cast<double>(n)));
                }
    out += "# HELP sglang:prefill_delayer_wait_forward_passes Passes a prefill was delayed before it ran.\n"
           "# TYPE sglang:prefill_delayer_wait_forward_passes histogram\n";
    wait_forward_passes.render(out, "sglang:prefill_delayer_wait_forward_passes", labels);
    out += "# HELP sglang:prefill_delayer_wait_seconds Seconds a prefill was delayed before it ran.\n"
           "# TYPE sglang:prefill_delayer_wait_seconds histogram\n";
    wait_seconds.render(out, "sglang:prefill_delayer_wait_seconds", labels);
    return out;
}

PrefillDelayer::PrefillDelayer(PrefillDelayerConfig config) : config_(std::move(config)) {
    stats_.wait_forward_passes = Histogram(prefill_delayer_passes_buckets(config_));
    stats_.wait_seconds = Histogram(prefill_delayer_seconds_buckets(config_));
}

std::string PrefillDelayer::describe() const {
    return fmt::format("PrefillDelayer initialized with max_delay_passes={} token_usage_low_watermark={} "
                       "queue_min_ratio={} max_delay_ms={} queue_trigger_enabled={}",
                       config_.max_delay_passes, optional_name(config_.token_usage_low_watermark),
                       optional_name(config_.queue_min_ratio), config_.max_delay_ms,
                       config_.queue_min_ratio ? "True" : "False");
}

Intent PrefillDelayer::intent(bool prefillable, double token_usage, std::int64_t running,
                              std::int64_t max_prefill_batch, std::int64_t waiting) const {
    const std::optional<double>& watermark = config_.token_usage_low_watermark;
    const bool below = prefillable && watermark && token_usage < *watermark;
    return {.prefillable = prefillable ? 1 : 0,
            .below_watermark = below ? 1 : 0,
            .running = running,
            .max_prefill_batch = max_prefill_batch,
            .waiting = waiting};
}

PrefillDecision PrefillDelayer::delay(PrefillEstimation e, const std::optional<Streak>& prev, double now) {
    Streak s = prev.value_or(Streak{.delayed = 0, .start = now});
    ++s.delayed;
    streak_ = s;
    return {.allow = false, .estimation = e, .reason = PrefillDelayReason::kDelay};
}

PrefillDecision PrefillDelayer::allow(PrefillEstimation e, PrefillDelayReason r, const std::optional<Streak>& prev,
                                      double now) {
    streak_.reset();
    return {.allow = true,
            .estimation = e,
            .reason = r,
            .wait_passes = prev ? prev->delayed : 0,
            .wait_seconds = prev ? now - prev->start : 0.0};
}

PrefillDecision PrefillDelayer::decide(std::span<const Intent> groups, std::int64_t max_running_requests, double now) {
    const std::optional<Streak> prev = streak_;
    const bool all = std::all_of(groups.begin(), groups.end(), [](const Intent& g) { return g.prefillable > 0; });
    const bool none = std::none_of(groups.begin(), groups.end(), [](const Intent& g) { return g.prefillable > 0; });
    const bool any_below =
        std::any_of(groups.begin(), groups.end(), [](const Intent& g) { return g.below_watermark > 0; });
    if (none) return allow(PrefillEstimation::kNone, PrefillDelayReason::kNone, prev, now);
    if (!all) {
        if (any_below) return allow(PrefillEstimation::kMixed, PrefillDelayReason::kTokenWatermark, prev, now);
        const std::int64_t delayed = prev ? prev->delayed : 0;
        if (delayed < config_.max_delay_passes - 1) return delay(PrefillEstimation::kMixed, prev, now);
        return allow(PrefillEstimation::kMixed, PrefillDelayReason::kWaitTimeout, prev, now);
    }
    if (any_below) return allow(PrefillEstimation::kAll, PrefillDelayReason::kTokenWatermark, prev, now);
    // Without DP attention the delayer divides the running cap among the replicas.
    std::int64_t mrr = max_running_requests;
    if (!config_.dp_attention) mrr = (mrr + config_.dp_size - 1) / std::max(config_.dp_size, 1);
    std::int64_t running = 0, max_batch = 0, waiting = 0;
    for (const Intent& g : groups) {
        running = std::max(running, g.running);
        max_batch = std::max(max_batch, g.max_prefill_batch);
        waiting = std::max(waiting, g.waiting);
    }
    bool queue_short = false;
    if (config_.queue_min_ratio && running > 0) {
        const auto min_queue =
            std::min(static_cast<std::int64_t>(static_cast<double>(running) * *config_.queue_min_ratio), max_batch);
        queue_short = min_queue > 0 && waiting < min_queue;
        if (queue_short && prev && (now - prev->start) * 1000.0 >= config_.max_delay_ms) queue_short = false;
    }
    const bool few_slots = mrr - running < max_batch;
    if (few_slots || queue_short) {
        if (!skip_first_delay_) return delay(PrefillEstimation::kAll, prev, now);
        skip_first_delay_ = false;
    }
    return allow(PrefillEstimation::kAll, prev ? PrefillDelayReason::kWaitSuccess : PrefillDelayReason::kNoWait, prev,
                 now);
}

void PrefillDelayer::record(const PrefillDecision& d, bool ran_prefill) {
    ++stats_.outcomes[static_cast<int>(d.estimation)][d.allow ? 1 : 0][static_cast<int>(d.reason)][ran_prefill ? 1 : 0];
    if (d.allow && ran_prefill) {
        stats_.wait_forward_passes.observe(static_cast<double>(d.wait_passes));
        stats_.wait_seconds.observe(d.wait_seconds);
    }
}

}  // namespace tessera::scheduler
