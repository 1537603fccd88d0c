#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera {
namespace {

TEST(DTypeTest, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 is exactly half-way between two bf16 values: ties go to even (1.0).
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    // 1 + 3·2^-8 is half-way too; the even neighbour is 1 + 2^-6.
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
    EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DTypeTest, F16RoundTripsAndHandlesSubnormals) {
    for (float v : {0.0f, 1.0f, -3.140625f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
        EXPECT_FLOAT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
    }
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(DTypeTest, ParsesSafetensorsAndTorchNames) {
    EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
    EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
    EXPECT_EQ(parse_dtype("F16"), DType::kF16);
    EXPECT_EQ(parse_dtype("float32"), DType::kF32);
    EXPECT_FALSE(parse_dtype("I8").has_value());
}

}  // namespace
}  // namespace tessera
