#pragma once
// scheduler/new_token_ratio.h — how many of its remaining max_new_tokens a running request is
// expected to still decode (SGLang's new_token_ratio), and the retraction choice when the
// decode batch runs out of KV. The ratio starts conservative, decays linearly while decoding
// goes well, is reset when the scheduler idles and is raised after a retraction.
// Pure values and functions; NewTokenRatio is owned by the scheduler thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "scheduler/priority_preemption.h"

namespace tessera::scheduler {

struct NewTokenRatioParams {
    double schedule_conservativeness = 1.0;  // --schedule-conservativeness (>= 0)
    double init_base = 0.7;    // env: SGLANG_INIT_NEW_TOKEN_RATIO
    double min_factor = 0.14;  // env: SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
    int decay_steps = 600;     // env: SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
};

constexpr int kRetractDecodeSteps = 20;  // env: SGLANG_RETRACT_DECODE_STEPS

class NewTokenRatio {
 public:
    // init = min(init_base · conservativeness, 1); min = min(init · min_factor, 1);
    // decay = (init − min) / decay_steps.
    explicit NewTokenRatio(const NewTokenRatioParams& params);

    double value() const { return value_; }
    double init() const { return init_; }
    double min() const { return min_; }
    double decay() const { return decay_; }

    void on_decode_step() { value_ = value_ - decay_ > min_ ? value_ - decay_ : min_; }
    void on_idle() { value_ = init_; }
    void set_after_retraction(double ratio) { value_ = ratio; }

 private:
    double init_;
    double min_;
    double decay_;
    double value_;
};

// Ratio after a retraction, from the requests that stay:
// min(1, (Σ decoded + steps · n_remaining) / (Σ max_new_tokens + 1)).
double ratio_after_retraction(std::int64_t total_decoded, std::int64_t total_max_new_tokens,
                              std::int64_t n_remaining, int retract_decode_steps = kRetractDecodeSteps);

struct RetractCandidate {
    std::int64_t output_len = 0;
    std::int64_t input_len = 0;  // the original prompt length
    std::int64_t priority = 0;   // read under --retraction-policy priority only
};

// The order in which running requests are retracted. --retraction-policy length (no
// `by_priority`): fewest output tokens first, then longest input first; among exact ties the
// later request in the batch goes first (SGLang sorts descending, stable, and pops from the
// end). priority: the worst priority first, then as length (SGLang's schedule_batch.py
// retract_decode with the key (priority · −sign, length key)).
std::vector<std::size_t> retraction_order(std::span<const RetractCandidate> running,
                                          std::optional<PriorityOrder> by_priority = std::nullopt);

}  // namespace tessera::scheduler
