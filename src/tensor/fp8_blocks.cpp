#include "tensor/fp8_blocks.h"

#include <algorithm>
#include <cmath>

namespace tessera {

Fp8Blocks quantize_fp8_blocks(const float* w, std::int64_t rows, std::int64_t cols, DType type, std::int64_t block) {
    Fp8Blocks q;
    q.rows = rows;
    q.cols = cols;
    q.block = block;
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    const std::int64_t scale_rows = (rows + block - 1) / block;
    q.scales.assign(static_cast<std::size_t>(scale_rows * q.scale_cols()), 1.0f);
    for (std::int64_t br = 0; br < scale_rows; ++br) {
        for (std::int64_t bc = 0; bc < q.scale_cols(); ++bc) {
            const std::int64_t r_end = std::min(rows, (br + 1) * block);
            const std::int64_t c_end = std::min(cols, (bc + 1) * block);
            float amax = 0.0f;
            for (std::int64_t r = br * block; r < r_end; ++r)
                for (std::int64_t c = bc * block; c < c_end; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
            const float scale = amax > 0.0f ? amax / fp8_max(type) : 1.0f;
            q.scales[static_cast<std::size_t>(br * q.scale_cols() + bc)] = scale;
            for (std::int64_t r = br * block; r < r_end; ++r)
                for (std::int64_t c = bc * block; c < c_end; ++c)
                    q.codes[static_cast<std::size_t>(r * cols + c)] = f32_to_fp8(w[r * cols + c] / scale, type);
        }
    }
    return q;
}

}  // namespace tessera
