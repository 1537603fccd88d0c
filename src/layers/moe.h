#pragma once
// layers/moe.h — the sparse MoE block: router → top-k (layers/moe_router.h) → dispatcher →
// this rank's experts (layers/experts.h) → combine, plus the shared expert where the model
// has one (Qwen2-MoE: behind a sigmoid gate; DeepSeek: ungated). The result is complete on
// every rank of the TP group, as a dense MLP's would be.
//
// Placement (dist::ParallelLayout's MoE view, tp = moe_ep × moe_tp): EP rank r holds the
// physical expert slots [r·P/ep, (r+1)·P/ep), each on its moe_tp slice of the intermediate
// features; which logical expert a slot holds, and which copy serves a token, come from the
// EPLB placement (eplb/expert_dispatch.h; without one, slot = expert). Every path from the
// router to the experts goes through that one map. The shared expert is split over the whole
// TP group like a dense MLP under `none`, and whole on every rank under `all_to_all`.
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
//     every rank. The shared expert is whole on every rank (MoeParallel::
//     shared_experts_replicated); the owner adds it to its rows before the gather.
// Immutable after load except the traffic counters; forward() by one thread.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <memory>

#include "layers/experts.h"
#include "layers/moe_router.h"

namespace tessera::eplb {
class ExpertDispatch;
}

namespace tessera::layers {

struct MoeSpec {
    std::string prefix;                 // "model.layers.{i}.mlp." (Mixtral: "...block_sparse_moe.")
    std::int64_t layer = 0;             // the decoder layer (its row of the EPLB placement)
    std::string router = "gate";        // <prefix><router>.weight [E, hidden]
    ExpertsSpec experts;                // prefix filled from `prefix` when empty
    RouterConfig routing;
    bool correction_bias = false;       // <prefix><router>.e_score_correction_bias [E]
    std::int64_t shared_intermediate = 0;  // 0: no shared expert
    std::string shared = "shared_expert";  // <prefix><shared>.{gate,up,down}_proj.weight
    bool shared_gate = false;           // <prefix>shared_expert_gate.weight [1, hidden]
    DType compute_dtype = DType::kF32;
};

// What the router did in the last forward, for the expert distribution recorder: tokens this
// rank routed (all of them under masked EP, its own under all_to_all).
struct MoePassCounts {
    std::int64_t tokens = 0;
    std::vector<std::int32_t> logical;   // [num_experts]: top-k choices per logical expert
    std::vector<std::int32_t> physical;  // [num_physical]: ... per physical slot that served them
    std::vector<std::int32_t> topk;      // [tokens, top_k] logical ids (kept when asked)
};

class MoeLayer {
 public:
    // `dispatch`: the placement and dispatch algorithm (nullptr: slot = expert, no copies).
    static StatusOr<MoeLayer> load(const loader::WeightSource& source, const MoeSpec& spec, const LayerParallel& par,
                                   std::shared_ptr<const eplb::ExpertDispatch> dispatch = nullptr);

    // out f32 [n, hidden], complete on every rank, from h f32 [n, hidden]. `padding` (empty,
    // or [n]): rows that only pad a DP-attention buffer; they reach no expert and are not
    // counted (SGLang's SGLANG_OPT_MASK_DP_PAD_MOE), so their output is the shared expert's
    // of a zero row: zero.
    Status forward(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                   const LayerParallel& par, std::span<const std::uint8_t> padding = {});

    // DP-attention under the all_to_all dispatcher (SGLang's a2a backends keep a MoE layer's
    // tokens scattered, communicator.py LayerScatterModes): this rank's own token rows h f32
    // [n, hidden], rows [row0, row0 + n) of a pass of `rows`, go straight to their experts'
    // ranks and come back summed into out f32 [n, hidden]; nothing is gathered. Every rank of
    // the EP group calls it in the same pass, with 0 rows if it has none.
    Status forward_scattered(const float* h, std::int64_t n, std::int64_t row0, std::int64_t rows, float* out,
                             Scratch& scratch, ThreadPool* pool, const LayerParallel& par);

    // EPLB's probe batch: forward() on a pass of its own, leaving the layer's pass stream and
    // traffic as they were, so that the same rows route the same way on every call (under the
    // fake router too) and serving passes route as if no probe had run.
    Status probe(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                 const LayerParallel& par);

    // SGLang's return_routed_experts: the logical experts the router picks for rows h f32
    // [n, hidden] into ids I32 [n, top_k] (the real router, without --ep-dispatch-algorithm
    // fake's noise); touches neither the layer's counts nor its pass stream.
    void logical_topk(const float* h, std::int64_t n, std::int32_t* ids, Scratch& scratch, ThreadPool* pool) const;
    std::int64_t top_k() const { return routing_.top_k; }

    std::size_t weight_bytes() const;
    // What one token streams: router, top_k experts and the shared expert (this rank's slices).
    std::size_t weight_bytes_per_token() const;
    double flops_per_token() const;
    const MoeTraffic& traffic() const { return traffic_; }
    void reset_traffic() { traffic_ = {}; }

    // EPLB.
    std::int64_t layer() const { return layer_; }
    std::int64_t hidden_size() const { return hidden_; }
    const MoePassCounts& pass_counts() const { return counts_; }
    void keep_topk(bool keep) { keep_topk_ = keep; }
    const eplb::ExpertDispatch* dispatch() const { return dispatch_.get(); }
    const LocalExperts& experts() const { return experts_; }
    std::shared_ptr<const eplb::ExpertDispatch> shared_dispatch() const { return dispatch_; }
    // A new placement, in place: the packed weights of local slots are overwritten (with an
    // expert's bytes, or another local slot's weights), then the dispatch switches to the map
    // that names them. Between the writes and the switch the layer must not run.
    void write_slot(std::int64_t local_slot, const std::byte* packed) { experts_.write_slot(local_slot, packed); }
    void copy_slot(std::int64_t to, std::int64_t from) { experts_.copy_slot(to, from); }
    void set_dispatch(std::shared_ptr<const eplb::ExpertDispatch> dispatch) { dispatch_ = std::move(dispatch); }

 private:
    Status dispatch_all_to_all(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                               const LayerParallel& par, std::span<const std::uint8_t> padding);
    // The all_to_all exchange of `owned` rows h (rows [row0, row0 + owned) of a pass of
    // `rows`): routed, sent to their experts' ranks, run there, combined back and, with the
    // shared experts, written to out f32 [owned, hidden].
    Status exchange(const float* h, std::int64_t owned, std::int64_t row0, std::int64_t rows, float* out,
                    Scratch& scratch, ThreadPool* pool, const LayerParallel& par,
                    std::span<const std::uint8_t> padding, int owner);
    // Router → top-k logical ids → physical ids (scratch.topk_ids) for token rows
    // [row0, row0 + n) of a pass of `rows` tokens, counted in counts_; padding rows (indexed
    // by pass row) get ids -1. `owner`: the EP rank sending them (-1: the TP path's split).
    void route(const float* h, std::int64_t n, std::int64_t row0, std::int64_t rows, Scratch& scratch,
               ThreadPool* pool, std::span<const std::uint8_t> padding, int owner = -1);

    std::int64_t hidden_ = 0;
    RouterConfig routing_;
    Linear router_;                          // f32 [E, hidden], on every rank
    std::vector<float> correction_bias_;     // f32 [E] or empty
    std::int64_t layer_ = 0;
    std::int64_t experts_per_rank_ = 0;      // physical slots per EP rank
    std::shared_ptr<const eplb::ExpertDispatch> dispatch_;
    LocalExperts experts_;
    std::int64_t passes_ = 0;                // forwards so far (the fake router's noise stream)
    MoePassCounts counts_;
    bool keep_topk_ = false;
    std::optional<GatedMlp> shared_;
    std::vector<float> shared_gate_;         // f32 [hidden] or empty
    MoeTraffic traffic_;
};

}  // namespace tessera::layers
