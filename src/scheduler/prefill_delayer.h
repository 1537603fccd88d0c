#pragma once
// scheduler/prefill_delayer.h — SGLang's prefill delayer (managers/prefill_delayer.py
// PrefillDelayer.negotiate): under DP attention every group's MLP runs each step together, so
// a group that prefills while the others decode makes them wait for its long step. Before a
// new request is admitted, the groups' schedulers say whether they have one to admit
// (executor::BatchRunner::agree_prefill), and a group holds its prefill back:
// - while only some groups have one ("mixed"), for up to max_delay_passes - 1 passes, so
//   that the others' arrive and all prefill in the same step;
// - while all have one but the fullest group's free running slots are fewer than the most
//   requests a prefill admitted ("all", slot trigger), so admissions come in whole batches;
//   with --prefill-delayer-queue-min-ratio also while every queue is shorter than that
//   ratio of the running requests (queue trigger, capped at --prefill-delayer-max-delay-ms);
// unless some group's KV use is under --prefill-delayer-token-usage-low-watermark. The first
// delay the "all" triggers would impose is skipped (SGLang: the first merge reaches the
// largest decode batch). Pure logic; the scheduler asks once per prefill pass.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/histogram.h"
#include "executor/forward_batch.h"

namespace tessera::scheduler {

struct PrefillDelayerConfig {
    int max_delay_passes = 30;                        // --prefill-delayer-max-delay-passes
    std::optional<double> token_usage_low_watermark;  // --prefill-delayer-token-usage-low-watermark
    std::optional<double> queue_min_ratio;            // --prefill-delayer-queue-min-ratio: the queue trigger
    double max_delay_ms = 5000.0;                     // --prefill-delayer-max-delay-ms (SGLang's default)
    bool dp_attention = false;
    int dp_size = 1;
    // --prefill-delayer-forward-passes-buckets / -wait-seconds-buckets as given (empty: SGLang's).
    std::vector<double> forward_passes_buckets;
    std::vector<double> wait_seconds_buckets;
};

// What the histograms' bounds resolve to (SGLang's metrics_collector.py): the given or default
// pass bounds below max_delay_passes, plus 0 and max_delay_passes - 1; the given or default
// second bounds plus 0. Sorted, without repeats.
std::vector<double> prefill_delayer_passes_buckets(const PrefillDelayerConfig& c);
std::vector<double> prefill_delayer_seconds_buckets(const PrefillDelayerConfig& c);

enum class PrefillEstimation { kAll, kNone, kMixed };
// The decision's reason, as SGLang's metric label output_reason reads it.
enum class PrefillDelayReason { kNone, kNoWait, kWaitSuccess, kDelay, kTokenWatermark, kWaitTimeout };
const char* prefill_estimation_name(PrefillEstimation e);
const char* prefill_delay_reason_name(PrefillDelayReason r);

struct PrefillDecision {
    bool allow = true;
    PrefillEstimation estimation = PrefillEstimation::kNone;
    PrefillDelayReason reason = PrefillDelayReason::kNone;
    // On an allow after delays: how many passes and seconds the prefill waited (else 0).
    std::int64_t wait_passes = 0;
    double wait_seconds = 0.0;
};

// Counters for /metrics: sglang:prefill_delayer_outcomes_total by its four labels, and the
// two wait histograms (observed when a prefill allowed after waiting ran).
struct PrefillDelayerStats {
    // [estimation][allow][reason][actual execution]
    std::array<std::array<std::array<std::array<std::int64_t, 2>, 6>, 2>, 3> outcomes{};
    Histogram wait_forward_passes;
    Histogram wait_seconds;
    // Prometheus text of the three series; `labels` without braces.
    std::string prometheus(const std::string& labels) const;
};

class PrefillDelayer {
 public:
    explicit PrefillDelayer(PrefillDelayerConfig config);

    // This group's statement for a pass; `token_usage` is the fraction of the KV pool in use.
    executor::BatchRunner::PrefillIntent intent(bool prefillable, double token_usage, std::int64_t running,
                                                std::int64_t max_prefill_batch, std::int64_t waiting) const;
    // Every group's statements, in group order; `max_running_requests` is this rank's; `now`
    // in seconds, monotonic. Advances the delay streak.
    PrefillDecision decide(std::span<const executor::BatchRunner::PrefillIntent> groups,
                           std::int64_t max_running_requests, double now);
    // A pass ended: `ran_prefill` is whether it admitted anything.
    void record(const PrefillDecision& d, bool ran_prefill);

    const PrefillDelayerConfig& config() const { return config_; }
    const PrefillDelayerStats& stats() const { return stats_; }
    // SGLang's start-up line.
    std::string describe() const;

 private:
    struct Streak {
        std::int64_t delayed = 0;
        double start = 0.0;
    };
    PrefillDecision delay(PrefillEstimation e, const std::optional<Streak>& prev, double now);
    PrefillDecision allow(PrefillEstimation e, PrefillDelayReason r, const std::optional<Streak>& prev, double now);

    PrefillDelayerConfig config_;
    std::optional<Streak> streak_;
    bool skip_first_delay_ = true;
    PrefillDelayerStats stats_;
};

}  // namespace tessera::scheduler
