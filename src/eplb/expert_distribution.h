#pragma once
// eplb/expert_distribution.h — the expert distribution recorder and the balancedness metric
// (SGLang's eplb/expert_distribution.py):
//   stat: per forward pass, tokens per logical expert and layer, in a circular buffer of
//     --expert-distribution-recorder-buffer-size passes (-1: unbounded); the dump is their
//     sum (`logical_count`) and the window's average balancedness;
//   per_pass: the same counts pass by pass, with each pass's id;
//   per_token: each token's chosen logical experts per layer, pass by pass.
// Counts are logical (folded from the physical copies when the pass ran), so a rebalance in
// the middle of a window does not mix placements. Balancedness of a layer in a pass is
// (mean + 1e-5) / (max + 1e-5) of the tokens each EP rank's copies served
// (`compute_utilization_rate`), averaged over the MoE layers: 1 is even, 1/ep all on one rank.
// Owned by one model (one thread).

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::eplb {

enum class RecorderMode { kOff, kStat, kPerPass, kPerToken };

// "stat_approx" counts as "stat" does (there is no approximate DeepEP path on CPU).
StatusOr<RecorderMode> parse_recorder_mode(const std::string& name);
const char* recorder_mode_name(RecorderMode mode);

// (mean + 1e-5) / (max + 1e-5) of rank_load [ep_size].
double balancedness(const std::vector<std::int64_t>& rank_load);

// One forward pass of one model stage, as the MoE layers saw it.
struct PassRecord {
    std::int64_t pass_id = 0;
    std::int64_t tokens = 0;
    std::vector<std::int32_t> logical_count;  // [num_layers, num_logical]
    std::optional<double> balancedness;       // mean over this stage's MoE layers; none without tokens
    std::vector<std::int32_t> token_experts;  // per_token: [moe layers of the stage, tokens, top_k]
    std::vector<std::int32_t> physical_count;  // per_pass: [num_layers, num_physical]
};

class ExpertDistributionRecorder {
 public:
    ExpertDistributionRecorder(RecorderMode mode, std::int64_t buffer_size, std::int64_t num_layers,
                               std::int64_t num_logical);

    RecorderMode mode() const { return mode_; }
    bool recording() const { return recording_; }
    void start();  // clears the buffer and starts recording
    void stop();
    void reset() { passes_.clear(); }

    void record(PassRecord pass);  // no-op unless recording

    // Σ logical_count over the buffered passes, f32 [num_layers, num_logical] (the balancer's input).
    std::vector<float> logical_count_sum() const;
    // Mean balancedness of the buffered passes that had tokens; none if there were none.
    std::optional<double> average_balancedness() const;
    std::int64_t buffered_passes() const { return static_cast<std::int64_t>(passes_.size()); }

    // The dump, as JSON text. `rank` names the writer (its global rank); `phy2log` [num_layers,
    // num_physical] is the placement in force, written as last_physical_to_logical_map.
    std::string dump_json(int rank, const std::vector<std::int32_t>& phy2log) const;

 private:
    const RecorderMode mode_;
    const std::int64_t buffer_size_;  // -1: unbounded
    const std::int64_t num_layers_, num_logical_;
    bool recording_ = false;
    std::deque<PassRecord> passes_;
};

}  // namespace tessera::eplb
