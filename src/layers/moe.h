#pragma once
// layers/moe.h — the sparse MoE block: router → top-k (layers/moe_router.h) → dispatcher →
// this rank's experts (layers/experts.h) → combine, plus the shared expert where the model
// has one (Qwen2-MoE: behind a sigmoid gate; DeepSeek: ungated). The result is complete on
// every rank of the TP group, as a dense MLP's would be.
//
// Placement (dist::ParallelLayout's MoE view, tp = moe_ep × moe_tp): EP rank r holds experts
// [r·E/ep, (r+1)·E/ep), each on its moe_tp slice of the intermediate features; the shared
// expert is split over the whole TP group like a dense MLP.
//
// Dispatchers (--moe-a2a-backend):
//   none: SGLang's token_dispatcher/standard.py — every rank runs its experts on every token
//     (ids of other ranks' experts masked to -1), routed and shared partial sums go through
//     one TP all-reduce.
//   all_to_all: ep == tp. Rank r owns the tokens [r·⌈n/p⌉, (r+1)·⌈n/p⌉); for each owned token
//     it sends one record (the hidden row and the top-k ids / weights that rank holds) to each
//     EP rank holding one of its experts, all_to_all_v; the ranks run their experts on what
//     they received and send one result row per record back (combine); the owner sums them
//     and the owned rows are all-gathered, because attention under TP needs every row on
//     every rank. The shared expert's partial sums are all-reduced on their own.
// Immutable after load except the traffic counters; forward() by one thread.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layers/experts.h"
#include "layers/moe_router.h"

namespace tessera::layers {

struct MoeSpec {
    std::string prefix;                 // "model.layers.{i}.mlp." (Mixtral: "...block_sparse_moe.")
    std::string router = "gate";        // <prefix><router>.weight [E, hidden]
    ExpertsSpec experts;                // prefix filled from `prefix` when empty
    RouterConfig routing;
    bool correction_bias = false;       // <prefix><router>.e_score_correction_bias [E]
    std::int64_t shared_intermediate = 0;  // 0: no shared expert
    std::string shared = "shared_expert";  // <prefix><shared>.{gate,up,down}_proj.weight
    bool shared_gate = false;           // <prefix>shared_expert_gate.weight [1, hidden]
    DType compute_dtype = DType::kF32;
};

class MoeLayer {
 public:
    static StatusOr<MoeLayer> load(const loader::WeightSource& source, const MoeSpec& spec,
                                   const LayerParallel& par);

    // out f32 [n, hidden], complete on every rank, from h f32 [n, hidden].
    Status forward(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                   const LayerParallel& par);

    std::size_t weight_bytes() const;
    // What one token streams: router, top_k experts and the shared expert (this rank's slices).
    std::size_t weight_bytes_per_token() const;
    double flops_per_token() const;
    const MoeTraffic& traffic() const { return traffic_; }
    void reset_traffic() { traffic_ = {}; }

 private:
    Status dispatch_all_to_all(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                               const LayerParallel& par);

    std::int64_t hidden_ = 0;
    RouterConfig routing_;
    Linear router_;                          // f32 [E, hidden], on every rank
    std::vector<float> correction_bias_;     // f32 [E] or empty
    std::int64_t experts_per_rank_ = 0;
    LocalExperts experts_;
    std::optional<GatedMlp> shared_;
    std::vector<float> shared_gate_;         // f32 [hidden] or empty
    MoeTraffic traffic_;
};

}  // namespace tessera::layers
