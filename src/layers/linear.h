#pragma once
// layers/linear.h — Linear: y = x·Wᵀ (+ b) with W f32/bf16 [out, in] packed for
// kernels::matmul. A Linear is built from one or more checkpoint tensors with the same
// input (q/k/v, gate/up), concatenated along the output rows, so one pass over x serves all
// of them; each part may keep only a range of its rows (column parallelism: this rank's
// output features) and the whole may keep only a range of input columns (row parallelism).
// The partition itself is decided by layers/tensor_parallel.h. Immutable after load;
// forward() is thread-safe.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"
#include "layers/layer_input.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::loader {
class WeightSource;
}

namespace tessera::layers {

struct LinearPart {
    std::string name;           // checkpoint tensor "<...>.weight", [out_features, in_features]
    std::int64_t out_features;  // rows of the checkpoint tensor
    std::int64_t row_begin = 0;
    std::int64_t row_count = -1;  // -1: all rows
};

struct LinearSpec {
    std::vector<LinearPart> parts;
    std::int64_t in_features = 0;  // columns of the checkpoint tensors
    std::int64_t col_begin = 0;
    std::int64_t col_count = -1;  // -1: all columns
    bool bias = false;            // load "<...>.bias" of each part, narrowed like its rows
    // kF32 / kBF16: the packed type of an unquantized checkpoint; kF8E4M3 / kF8E5M2: quantize
    // it at load (--quantization fp8). FP8 checkpoint tensors stay fp8 whatever this says.
    DType compute_dtype = DType::kF32;
};

// SGLang's Fp8LinearMethod.validate_block_quant_shapes for one dimension of a shard of a
// block-quantized weight: [begin, begin + count) of `total` must start and end on blocks of
// `block` (or at the end). `what` / `block_name` are SGLang's words for the dimension.
Status check_block_split(const std::string& name, const char* what, const char* block_name, std::int64_t begin,
                         std::int64_t count, std::int64_t total, std::int64_t block);

class Linear {
 public:
    Linear() = default;
    static StatusOr<Linear> load(const loader::WeightSource& source, const LinearSpec& spec);
    // From a weight already in memory, f32 [out, in] row-major (a derived matrix, e.g. a
    // transposed slice of a checkpoint tensor).
    static Linear from_f32(const float* weight, std::int64_t out_features, std::int64_t in_features,
                           DType compute_dtype);

    // y f32 [m, out] = x f32 [m, in] · Wᵀ + b, with out / in this rank's kept rows / columns.
    void forward(const float* x, std::int64_t m, float* y, ThreadPool* pool) const;
    // The same with rows of x `x_stride` and rows of y `y_stride` floats apart (0: dense).
    void forward(const float* x, std::int64_t m, float* y, ThreadPool* pool, std::int64_t x_stride,
                 std::int64_t y_stride) const;
    // y = input's rows · Wᵀ + b: x, or rms_norm(x) when the input carries a norm.
    void forward(const LayerInput& input, std::int64_t m, float* y, ThreadPool* pool) const;
    // y = silu_and_mul(input's rows · Wᵀ) · downᵀ, this being a gated MLP's gate_up projection
    // (kernels::matmul_gated_mlp; neither has a bias). gate_up_rows holds the projection's rows
    // where the kernels do not make the activation straight from it: gated_mlp_rows_floats for
    // up to m rows.
    void forward_gated_mlp(const LayerInput& input, std::int64_t m, const Linear& down, float* gate_up_rows, float* y,
                           ThreadPool* pool) const;
    std::int64_t gated_mlp_rows_floats(std::int64_t m, const Linear& down) const {
        return kernels::gated_mlp_rows_floats(m, weight_, down.weight_);
    }

    std::int64_t in_features() const { return weight_.k; }
    std::int64_t out_features() const { return weight_.n; }
    std::size_t weight_bytes() const { return weight_.bytes(); }
    // The packed weight as byte runs (the elements, then the fp8 scales: empty for other
    // types): EPLB moves experts between ranks this way (every rank packs a tensor of one
    // shape the same way).
    std::array<std::span<const std::byte>, 2> packed() const {
        return {std::span<const std::byte>(weight_.data.data(), weight_.data.size()),
                std::span<const std::byte>(weight_.scales.data(), weight_.scales.size())};
    }
    std::array<std::span<std::byte>, 2> packed() {
        return {std::span<std::byte>(weight_.data.data(), weight_.data.size()),
                std::span<std::byte>(weight_.scales.data(), weight_.scales.size())};
    }
    DType weight_dtype() const { return weight_.dtype; }

 private:
    Status load_bias(const loader::WeightSource& source, const LinearSpec& spec, std::int64_t total_rows);
    void add_bias(std::int64_t m, float* y, std::int64_t y_stride) const;

    kernels::PackedWeight weight_;
    std::vector<float> bias_;  // f32 [out] or empty
};

// A 1-D checkpoint tensor (a norm weight, a bias) widened to f32; fails naming it.
StatusOr<std::vector<float>> load_f32_vector(const loader::WeightSource& source, const std::string& name,
                                             std::int64_t n);

}  // namespace tessera::layers
