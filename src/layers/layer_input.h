#pragma once
// layers/layer_input.h — the rows a layer reads: x itself, or rms_norm(x) with `norm_weight`
// when it is set. The norm then runs inside the first projection's operand preparation
// (kernels::matmul_rms_norm) instead of into a buffer of normed rows.

namespace tessera::layers {

struct LayerInput {
    const float* x = nullptr;
    const float* norm_weight = nullptr;
    float eps = 0.0f;
};

}  // namespace tessera::layers
