#pragma once
// tensor/dtype.h — element types and the scalar bf16 / f16 / fp8 <-> f32 conversions.
// Plain functions; thread-safe.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tessera {

// kF8E4M3 is torch.float8_e4m3fn (finite: no infinities, NaN only at 0x7F / 0xFF) and
// kF8E5M2 torch.float8_e5m2, the element types of FP8 checkpoints and the FP8 KV cache.
enum class DType { kF32, kBF16, kF16, kF8E4M3, kF8E5M2 };

inline std::size_t dtype_size(DType t) {
    switch (t) {
        case DType::kF32: return 4;
        case DType::kBF16:
        case DType::kF16: return 2;
        case DType::kF8E4M3:
        case DType::kF8E5M2: return 1;
    }
    return 0;
}

inline bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

inline std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "f32";
        case DType::kBF16: return "bf16";
        case DType::kF16: return "f16";
        case DType::kF8E4M3: return "fp8_e4m3";
        case DType::kF8E5M2: return "fp8_e5m2";
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

float fp8_e4m3_to_f32(std::uint8_t v);
float fp8_e5m2_to_f32(std::uint8_t v);
float fp8_to_f32(std::uint8_t v, DType type);
// Round to nearest even after clamping |f| to the largest finite value (448 / 57344): the
// quantizer's rule (Hugging Face's Fp8Quantize clamps first; a raw PyTorch cast would give
// NaN above the range). NaN stays NaN.
std::uint8_t f32_to_fp8_e4m3(float f);
std::uint8_t f32_to_fp8_e5m2(float f);
std::uint8_t f32_to_fp8(float f, DType type);
// The largest finite value of an fp8 type: what a quantizer maps a block's amax to.
float fp8_max(DType type);

// Converts n elements of `src` (of type `src_type`) to f32.
void convert_to_f32(const void* src, DType src_type, float* dst, std::size_t n);

}  // namespace tessera
