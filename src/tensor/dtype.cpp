#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace tessera {

std::optional<DType> parse_dtype(std::string_view name) {
    std::string s(name);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "f32" || s == "float32" || s == "float") return DType::kF32;
    if (s == "bf16" || s == "bfloat16") return DType::kBF16;
    if (s == "f16" || s == "float16" || s == "half") return DType::kF16;
    return std::nullopt;
}

float f16_to_f32(std::uint16_t h) {
    const std::uint32_t sign = (h >> 15) & 1u;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t mant = h & 0x3ffu;
    float value;
    if (exp == 0) {
        value = std::ldexp(static_cast<float>(mant), -24);
    } else if (exp == 31) {
        value = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    } else {
        value = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
    }
    return sign ? -value : value;
}

std::uint16_t f32_to_f16(float f) {
    std::uint32_t x;
    std::memcpy(&x, &f, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const int exp = static_cast<int>((x >> 23) & 0xffu) - 127 + 15;
    std::uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return static_cast<std::uint16_t>(sign);
        mant |= 0x800000u;
        const int shift = 14 - exp;
        std::uint32_t half = mant >> shift;
        const std::uint32_t rem = mant & ((1u << shift) - 1);
        const std::uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return static_cast<std::uint16_t>(sign | half);
    }
    std::uint32_t half = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
    const std::uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(half);
}

float fp8_e4m3_to_f32(std::uint8_t v) {
    const int exp = (v >> 3) & 0xf;
    const int mant = v & 0x7;
    float value;
    if (exp == 0xf && mant == 0x7) {
        value = std::numeric_limits<float>::quiet_NaN();
    } else if (exp == 0) {
        value = std::ldexp(static_cast<float>(mant), -9);
    } else {
        value = std::ldexp(static_cast<float>(8 + mant), exp - 10);
    }
    return (v & 0x80) ? -value : value;
}

// e5m2 is the high byte of an IEEE binary16 value.
float fp8_e5m2_to_f32(std::uint8_t v) { return f16_to_f32(static_cast<std::uint16_t>(v << 8)); }

float fp8_to_f32(std::uint8_t v, DType type) {
    return type == DType::kF8E5M2 ? fp8_e5m2_to_f32(v) : fp8_e4m3_to_f32(v);
}

float fp8_max(DType type) { return type == DType::kF8E5M2 ? 57344.0f : 448.0f; }

namespace {

// |f| clamped to `max_finite`, rounded to nearest even on a grid of `mant_bits` mantissa
// bits with exponent `bias`; subnormals below 2^(1 - bias).
// min_normal = 2^(1 - bias), passed as a constant: this runs for every value an fp8 KV cache
// stores, and only the subnormal range below it needs the slower exact scaling.
std::uint8_t f32_to_small_float(float f, int mant_bits, int bias, float max_finite, float min_normal,
                                std::uint8_t nan_code) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
    if (std::isnan(f)) return static_cast<std::uint8_t>(sign | nan_code);
    const float a = std::min(std::fabs(f), max_finite);
    if (a < min_normal) {
        // Exact scaling, then the FPU's round-half-even; the count may reach the first normal.
        const auto n = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(a, bias - 1 + mant_bits)));
        return static_cast<std::uint8_t>(sign | n);
    }
    std::uint32_t abits;
    std::memcpy(&abits, &a, 4);
    const int exp = static_cast<int>((abits >> 23) & 0xffu) - 127;
    const std::uint32_t mant = abits & 0x7fffffu;
    const int drop = 23 - mant_bits;
    std::uint32_t keep = mant >> drop;
    const std::uint32_t rem = mant & ((1u << drop) - 1u);
    const std::uint32_t half = 1u << (drop - 1);
    if (rem > half || (rem == half && (keep & 1u))) ++keep;
    // A mantissa carry moves into the exponent; clamping kept the result finite.
    const std::uint32_t code = (static_cast<std::uint32_t>(exp + bias) << mant_bits) + keep;
    return static_cast<std::uint8_t>(sign | code);
}

}  // namespace

std::uint8_t f32_to_fp8_e4m3(float f) { return f32_to_small_float(f, 3, 7, 448.0f, 0x1p-6f, 0x7f); }
std::uint8_t f32_to_fp8_e5m2(float f) { return f32_to_small_float(f, 2, 15, 57344.0f, 0x1p-14f, 0x7f); }

std::uint8_t f32_to_fp8(float f, DType type) {
    return type == DType::kF8E5M2 ? f32_to_fp8_e5m2(f) : f32_to_fp8_e4m3(f);
}

void convert_to_f32(const void* src, DType src_type, float* dst, std::size_t n) {
    switch (src_type) {
        case DType::kF32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::kBF16: {
            const auto* s = static_cast<const std::uint16_t*>(src);
            for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
            return;
        }
        case DType::kF16: {
            const auto* s = static_cast<const std::uint16_t*>(src);
            for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
            return;
        }
        case DType::kF8E4M3:
        case DType::kF8E5M2: {
            const auto* s = static_cast<const std::uint8_t*>(src);
            for (std::size_t i = 0; i < n; ++i) dst[i] = fp8_to_f32(s[i], src_type);
            return;
        }
    }
}

}  // namespace tessera
