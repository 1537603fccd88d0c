#pragma once
// tensor/dtype.h — element types and the scalar bf16 / f16 <-> f32 conversions.
// Plain functions; thread-safe.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType { kF32, kBF16, kF16 };

inline std::size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

inline std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "f32";
        case DType::kBF16: return "bf16";
        case DType::kF16: return "f16";
    }
    return "?";
}

// Accepts our names and the safetensors / torch spellings ("F32", "bfloat16", ...).
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(std::uint16_t v) {
    const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even, as torch and the AVX-512 BF16 instructions do; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}

float f16_to_f32(std::uint16_t v);
std::uint16_t f32_to_f16(float f);

// Converts n elements of `src` (of type `src_type`) to f32.
void convert_to_f32(const void* src, DType src_type, float* dst, std::size_t n);

}  // namespace tessera
