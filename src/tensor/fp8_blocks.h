#pragma once
// tensor/fp8_blocks.h — block-wise FP8 quantization as FP8 checkpoints store it: codes
// [rows, cols] and one f32 multiplier per block × block tile (the `weight_scale_inv` of
// DeepSeek-V3 and Qwen3-FP8 folders), partial tiles at the right and bottom edges.
// Plain functions; thread-safe.

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace tessera {

struct Fp8Blocks {
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    std::int64_t block = 0;
    std::vector<std::uint8_t> codes;  // [rows, cols]
    std::vector<float> scales;        // [ceil(rows / block), ceil(cols / block)]

    std::int64_t scale_cols() const { return (cols + block - 1) / block; }
    float scale(std::int64_t row, std::int64_t col) const { return scales[(row / block) * scale_cols() + col / block]; }
};

// Each tile's multiplier is amax / fp8_max (Hugging Face's Fp8Quantize): the largest value
// maps to the largest finite code; an all-zero tile gets 1.
Fp8Blocks quantize_fp8_blocks(const float* w, std::int64_t rows, std::int64_t cols, DType type,
                              std::int64_t block = 128);

}  // namespace tessera
