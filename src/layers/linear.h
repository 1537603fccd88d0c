#pragma once
// layers/linear.h — Linear: y = x·Wᵀ (+ b) with W f32/bf16 [out, in] packed for
// kernels::matmul. Several checkpoint tensors with the same input (q/k/v, gate/up) can be
// fused into one Linear whose output rows are their concatenation, so one pass over x
// serves all of them. Unsharded here; the tensor-parallel variants state their partition
// in their own headers. Immutable after load; forward() is thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::loader {
class WeightSource;
}

namespace tessera::layers {

class Linear {
 public:
    Linear() = default;
    // Loads and concatenates the tensors `names` (each [out_i, in]) along the output rows,
    // with a bias per part when `with_bias` (tensor name with ".weight" → ".bias").
    static StatusOr<Linear> load(const loader::WeightSource& source,
                                 const std::vector<std::string>& names,
                                 const std::vector<std::int64_t>& out_features,
                                 std::int64_t in_features, bool with_bias, DType compute_dtype);

    // y f32 [m, out] = x f32 [m, in] · Wᵀ + b
    void forward(const float* x, std::int64_t m, float* y, ThreadPool* pool) const;

    std::int64_t in_features() const { return weight_.k; }
    std::int64_t out_features() const { return weight_.n; }
    std::size_t weight_bytes() const { return weight_.bytes(); }

 private:
    kernels::PackedWeight weight_;
    std::vector<float> bias_;  // f32 [out] or empty
};

}  // namespace tessera::layers
