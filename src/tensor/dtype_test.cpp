#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Every code decodes as the format tables say, and encoding each finite value gives it back.
TEST(DTypeTest, Fp8CodesRoundTrip) {
    EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);
    EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
    EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is a normal number in e4m3fn
    EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
    EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
    EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
    for (int c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        const float v = fp8_e4m3_to_f32(code);
        if (!std::isnan(v) && c != 0x80) {
            EXPECT_EQ(f32_to_fp8_e4m3(v), code) << c;
        }
        const float w = fp8_e5m2_to_f32(code);
        if (std::isfinite(w) && c != 0x80) {
            EXPECT_EQ(f32_to_fp8_e5m2(w), code) << c;
        }
    }
}

// Nearest even between neighbours, clamping instead of NaN above the range (the quantizer's
// rule), and ties in the subnormal range.
TEST(DTypeTest, Fp8EncodesToNearestEvenAndSaturates) {
    EXPECT_EQ(f32_to_fp8_e4m3(1.0f + 1.0f / 16), 0x38);         // tie between 1 and 1.125 → even (1)
    EXPECT_EQ(f32_to_fp8_e4m3(1.0f + 3.0f / 16), 0x3a);         // tie between 1.125 and 1.25 → 1.25
    EXPECT_EQ(f32_to_fp8_e4m3(1.0f + 1.0f / 15), 0x39);         // above the tie
    EXPECT_EQ(f32_to_fp8_e4m3(470.0f), 0x7e);                   // PyTorch's cast gives NaN here
    EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
    EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);    // tie to even: 0
    EXPECT_EQ(f32_to_fp8_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);
    EXPECT_EQ(f32_to_fp8_e4m3(0.0155f), 0x08);                  // rounds up into the first normal
    EXPECT_EQ(f32_to_fp8_e5m2(1e9f), 0x7b);
    EXPECT_EQ(f32_to_fp8_e5m2(1.0f + 1.0f / 8), 0x3c);          // tie → even (1.0)
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(NAN))));
    // Brute force: the encoder picks a nearest code for random values.
    std::uint32_t state = 12345;
    for (int i = 0; i < 20000; ++i) {
        state = state * 1664525u + 1013904223u;
        const float v = std::ldexp(static_cast<float>(state >> 8) / 16777216.0f - 0.5f, static_cast<int>(state % 24) - 12);
        const float got = fp8_e4m3_to_f32(f32_to_fp8_e4m3(v));
        float best = 1e30f;
        for (int c = 0; c < 256; ++c) {
            const float d = fp8_e4m3_to_f32(static_cast<std::uint8_t>(c));
            if (!std::isnan(d)) best = std::min(best, std::fabs(d - v));
        }
        EXPECT_EQ(std::fabs(got - v), best) << v;
    }
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
