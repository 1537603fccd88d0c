#include "layers/linear.h"

#include <cstring>

#include "loader/weight_source.h"

namespace tessera::layers {

StatusOr<Linear> Linear::load(const loader::WeightSource& source,
                              const std::vector<std::string>& names,
                              const std::vector<std::int64_t>& out_features, std::int64_t in_features,
                              bool with_bias, DType compute_dtype) {
    std::int64_t total_out = 0;
    for (auto o : out_features) total_out += o;
    std::vector<const loader::TensorView*> parts;
    for (std::size_t i = 0; i < names.size(); ++i) {
        TSR_ASSIGN_OR_RETURN(auto t, source.get(names[i], {out_features[i], in_features}));
        parts.push_back(t);
    }
    Linear linear;
    if (parts.size() == 1) {
        linear.weight_ = kernels::pack_weight(parts[0]->data, parts[0]->dtype, total_out,
                                              in_features, compute_dtype);
    } else {
        // Concatenate in f32 first: the parts may differ in storage dtype.
        std::vector<float> joined(static_cast<std::size_t>(total_out * in_features));
        std::int64_t row = 0;
        for (const auto* t : parts) {
            convert_to_f32(t->data, t->dtype, joined.data() + row * in_features,
                           static_cast<std::size_t>(t->numel()));
            row += t->shape[0];
        }
        linear.weight_ = kernels::pack_weight(joined.data(), DType::kF32, total_out, in_features,
                                              compute_dtype);
    }
    if (with_bias) {
        linear.bias_.resize(static_cast<std::size_t>(total_out));
        std::int64_t row = 0;
        for (std::size_t i = 0; i < names.size(); ++i) {
            std::string bias_name = names[i];
            bias_name.replace(bias_name.rfind(".weight"), 7, ".bias");
            TSR_ASSIGN_OR_RETURN(auto b, source.get(bias_name, {out_features[i]}));
            convert_to_f32(b->data, b->dtype, linear.bias_.data() + row,
                           static_cast<std::size_t>(out_features[i]));
            row += out_features[i];
        }
    }
    return linear;
}

void Linear::forward(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
    kernels::matmul(x, m, weight_, y, pool);
    if (bias_.empty()) return;
    const std::int64_t n = weight_.n;
    for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t i = 0; i < n; ++i) y[r * n + i] += bias_[i];
}

}  // namespace tessera::layers
