#include "tensor/dtype.h"

#include <cmath>
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
    }
}

}  // namespace tessera
