#pragma once
// layers/mlp.h — the SiLU-gated MLP, down(silu(gate(x)) · up(x)), on a slice of its
// intermediate features (gate/up column parallel, down row parallel: the result is this
// slice's partial sum). Dense layers slice it over the TP group and all-reduce
// (forward_reduced); experts slice it over moe_tp and leave the sum to the MoE layer.
// Immutable after load; forward() by one thread.

#include <cstdint>
#include <string>

#include "layers/forward_batch.h"
#include "layers/linear.h"
#include "layers/parallel.h"

namespace tessera::layers {

struct MlpSpec {
    std::string gate, up, down;  // checkpoint tensor names
    std::int64_t hidden = 0;
    std::int64_t intermediate = 0;  // full width in the checkpoint
    Range slice;                    // this rank's intermediate features
    DType compute_dtype = DType::kF32;
};

class GatedMlp {
 public:
    GatedMlp() = default;
    static StatusOr<GatedMlp> load(const loader::WeightSource& source, const MlpSpec& spec);
    // The TP slice of a dense MLP named <prefix>{gate,up,down}_proj.weight.
    static StatusOr<GatedMlp> load_dense(const loader::WeightSource& source, const std::string& prefix,
                                         std::int64_t hidden, std::int64_t intermediate, DType compute_dtype,
                                         const LayerParallel& par);

    // out f32 [m, hidden] = this slice's partial result for x f32 [m, hidden].
    void forward(const float* x, std::int64_t m, float* out, Scratch& scratch, ThreadPool* pool) const;
    // The same on the caller's buffers (several experts at once, one per thread).
    void forward(const float* x, std::int64_t m, float* out, MlpBuffers& buffers, ThreadPool* pool) const;
    // The same from a layer input (its norm fused into the gate / up projection).
    void forward(const LayerInput& input, std::int64_t m, float* out, MlpBuffers& buffers, ThreadPool* pool) const;
    // The same, summed over the TP group.
    Status forward_reduced(const LayerInput& input, std::int64_t m, float* out, Scratch& scratch, ThreadPool* pool,
                           const LayerParallel& par) const;

    std::int64_t slice_width() const { return down_.in_features(); }
    // MlpBuffers::gate_up floats that forward() needs for up to m rows.
    std::int64_t gate_up_rows_floats(std::int64_t m) const { return gate_up_.gated_mlp_rows_floats(m, down_); }
    std::size_t weight_bytes() const { return gate_up_.weight_bytes() + down_.weight_bytes(); }
    DType weight_dtype() const { return down_.weight_dtype(); }
    double flops_per_token() const;

    // EPLB: the packed weights as one byte run (gate/up, then down).
    std::size_t packed_bytes() const;
    void copy_packed_to(std::byte* dst) const;
    void copy_packed_from(const std::byte* src);
    void copy_weights_from(const GatedMlp& other);  // the same shape

 private:
    Linear gate_up_;  // [2·slice, hidden]: gate rows, then up rows
    Linear down_;     // [hidden, slice]
};

}  // namespace tessera::layers
