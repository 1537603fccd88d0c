#pragma once
// layers/experts.h — the routed experts this rank holds (its EP range, each on its moe_tp
// slice of the intermediate features), run the CPU way: the tokens routed to one expert are
// gathered into one matrix and go through that expert's GEMMs together (decode batches and
// prefill alike, on the packed bf16 / f32 layout of layers::Linear); each token's output is
// the sum of its result rows scaled by its routing weights (the top-k weighted sum fused into
// the combine). SGLang's layers/moe/fused_moe_triton (moe_align_block_size groups tokens by
// expert the same way). With several active experts per thread the threads take whole
// experts (a 64-row expert's GEMMs are too small to split well); with fewer they split each
// expert's GEMMs. Immutable after load; forward() by one thread.

#include <cstdint>
#include <string>
#include <vector>

#include "layers/mlp.h"

namespace tessera::layers {

struct ExpertsSpec {
    std::string prefix;  // "model.layers.{i}.mlp.experts."
    std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // Mixtral: w1, w3, w2
    std::int64_t num_experts = 0;
    std::int64_t hidden = 0;
    std::int64_t intermediate = 0;  // per expert
    DType compute_dtype = DType::kF32;
};

class LocalExperts {
 public:
    // Loads the physical slots [first, first + logical.size()), slot first + i holding logical
    // expert logical[i] (a redundant copy loads the same checkpoint tensors again), on the
    // moe_tp slice of their intermediate features.
    static StatusOr<LocalExperts> load(const loader::WeightSource& source, const ExpertsSpec& spec,
                                       std::int64_t first, const std::vector<std::int32_t>& logical, Range slice);

    // out f32 [m, hidden] = Σ_j weights[t, j] · slot(local_ids[t, j])(x[t]) over the entries
    // with local_ids >= 0 (slots relative to `first`; -1: another rank's). Rows with no
    // local entry are zero.
    void forward(const float* x, std::int64_t m, const std::int32_t* local_ids, const float* weights,
                 std::int64_t top_k, float* out, Scratch& scratch, ThreadPool* pool) const;

    // One pass over the experts holds the result rows of its tokens (top_k x hidden floats a
    // token; a DeepSeek-V3 token's are 229 KB): longer batches go in passes of tokens within
    // this many bytes. Tests lower it to reach several passes.
    void set_pass_bytes(std::int64_t bytes) { pass_bytes_ = bytes; }

    std::int64_t first() const { return first_; }
    std::int64_t count() const { return static_cast<std::int64_t>(experts_.size()); }
    // EPLB moves experts by overwriting slots in place (layers/moe.h MoeLayer::write_slot).
    const GatedMlp& slot(std::int64_t i) const { return experts_[i]; }
    void write_slot(std::int64_t i, const std::byte* packed) { experts_[i].copy_packed_from(packed); }
    void copy_slot(std::int64_t to, std::int64_t from) { experts_[to].copy_weights_from(experts_[from]); }
    std::size_t weight_bytes() const;
    // Bytes streamed by one token: top_k experts' slices (the average expert's size).
    std::size_t expert_bytes() const { return experts_.empty() ? 0 : experts_[0].weight_bytes(); }
    double expert_flops() const { return experts_.empty() ? 0.0 : experts_[0].flops_per_token(); }

 private:
    void forward_pass(const float* x, std::int64_t m, const std::int32_t* local_ids, const float* weights,
                      std::int64_t top_k, float* out, Scratch& scratch, ThreadPool* pool) const;

    std::int64_t hidden_ = 0;
    std::int64_t first_ = 0;
    std::int64_t pass_bytes_ = std::int64_t{256} << 20;
    std::vector<GatedMlp> experts_;
};

}  // namespace tessera::layers
