#include "layers/linear.h"

#include <cstring>

#include "loader/weight_source.h"

namespace tessera::layers {

namespace {
std::int64_t rows_of(const LinearPart& p) { return p.row_count < 0 ? p.out_features - p.row_begin : p.row_count; }

Status check_range(const std::string& what, std::int64_t begin, std::int64_t count, std::int64_t total) {
    if (begin < 0 || count < 0 || begin + count > total) {
        return Status::InvalidArgument(what + ": shard [" + std::to_string(begin) + ", " +
                                       std::to_string(begin + count) + ") is outside [0, " +
                                       std::to_string(total) + ")");
    }
    return Status::Ok();
}
}  // namespace

StatusOr<Linear> Linear::load(const loader::WeightSource& source, const LinearSpec& spec) {
    const std::int64_t cols = spec.col_count < 0 ? spec.in_features - spec.col_begin : spec.col_count;
    TSR_RETURN_IF_ERROR(check_range("columns of " + spec.parts.at(0).name, spec.col_begin, cols, spec.in_features));
    std::int64_t total_rows = 0;
    for (const auto& p : spec.parts) total_rows += rows_of(p);

    // Only this rank's rows and columns are read from the mapping, then packed once. They
    // are gathered in the checkpoint's own dtype (f32 only when the parts disagree), and a
    // single whole-width part is packed straight from the mapping: a temporary f32 copy of
    // a vocab-sized head would double the start-up peak.
    std::vector<const loader::TensorView*> tensors;
    for (const auto& p : spec.parts) {
        TSR_ASSIGN_OR_RETURN(auto t, source.get(p.name, {p.out_features, spec.in_features}));
        TSR_RETURN_IF_ERROR(check_range("rows of " + p.name, p.row_begin, rows_of(p), p.out_features));
        tensors.push_back(t);
    }
    DType gather_type = tensors.front()->dtype;
    for (const auto* t : tensors)
        if (t->dtype != gather_type) gather_type = DType::kF32;
    const std::size_t elem = dtype_size(gather_type);
    Linear linear;
    if (tensors.size() == 1 && cols == spec.in_features) {
        const auto* base = reinterpret_cast<const unsigned char*>(tensors.front()->data);
        linear.weight_ = kernels::pack_weight(base + static_cast<std::size_t>(spec.parts.front().row_begin) * cols * elem,
                                              gather_type, total_rows, cols, spec.compute_dtype);
    } else {
        std::vector<unsigned char> kept(static_cast<std::size_t>(total_rows * cols) * elem);
        std::int64_t out_row = 0;
        for (std::size_t i = 0; i < spec.parts.size(); ++i) {
            const LinearPart& p = spec.parts[i];
            const loader::TensorView* t = tensors[i];
            const auto* base = reinterpret_cast<const unsigned char*>(t->data);
            const std::size_t src_elem = dtype_size(t->dtype);
            for (std::int64_t r = 0; r < rows_of(p); ++r) {
                const auto offset = (static_cast<std::size_t>(p.row_begin + r) * spec.in_features + spec.col_begin);
                unsigned char* dst = kept.data() + static_cast<std::size_t>(out_row + r) * cols * elem;
                if (t->dtype == gather_type) {
                    std::memcpy(dst, base + offset * src_elem, static_cast<std::size_t>(cols) * elem);
                } else {
                    convert_to_f32(base + offset * src_elem, t->dtype, reinterpret_cast<float*>(dst),
                                   static_cast<std::size_t>(cols));
                }
            }
            out_row += rows_of(p);
        }
        linear.weight_ = kernels::pack_weight(kept.data(), gather_type, total_rows, cols, spec.compute_dtype);
    }
    if (spec.bias) {
        linear.bias_.resize(static_cast<std::size_t>(total_rows));
        std::int64_t row = 0;
        for (const auto& p : spec.parts) {
            std::string bias_name = p.name;
            bias_name.replace(bias_name.rfind(".weight"), 7, ".bias");
            TSR_ASSIGN_OR_RETURN(auto b, source.get(bias_name, {p.out_features}));
            const auto* base = reinterpret_cast<const unsigned char*>(b->data);
            convert_to_f32(base + static_cast<std::size_t>(p.row_begin) * dtype_size(b->dtype), b->dtype,
                           linear.bias_.data() + row, static_cast<std::size_t>(rows_of(p)));
            row += rows_of(p);
        }
    }
    return linear;
}

Linear Linear::from_f32(const float* weight, std::int64_t out_features, std::int64_t in_features,
                        DType compute_dtype) {
    Linear linear;
    linear.weight_ = kernels::pack_weight(weight, DType::kF32, out_features, in_features, compute_dtype);
    return linear;
}

StatusOr<std::vector<float>> load_f32_vector(const loader::WeightSource& source, const std::string& name,
                                             std::int64_t n) {
    TSR_ASSIGN_OR_RETURN(auto t, source.get(name, {n}));
    std::vector<float> v(static_cast<std::size_t>(n));
    convert_to_f32(t->data, t->dtype, v.data(), v.size());
    return v;
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
    forward(x, m, y, pool, 0, 0);
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool* pool, std::int64_t x_stride,
                     std::int64_t y_stride) const {
    kernels::matmul(x, m, weight_, y, pool, kernels::active_isa(), x_stride, y_stride);
    if (bias_.empty()) return;
    const std::int64_t n = weight_.n;
    const std::int64_t stride = y_stride > 0 ? y_stride : n;
    for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t i = 0; i < n; ++i) y[r * stride + i] += bias_[i];
}

}  // namespace tessera::layers
