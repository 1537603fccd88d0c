#pragma once
// kernels/cpu/mla_attention_avx512.h — MLA's absorbed attention over a bf16 or fp8 latent
// cache with AVX-512 BF16 (cpu/mla_attention_avx512.cpp, compiled with the AVX-512 flags; call
// only after kernels::isa_supported(kAvx512Bf16)). No intrinsics here.

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace tessera::kernels::cpu {

// Cached rows are copied into a block buffer of this many bf16 per row, so that the score loop
// addresses every key of a block from one register with constant offsets.
inline constexpr std::int64_t kMlaMaxWidth = 576;  // DeepSeek-V2/V3: latent 512 + rope 64

// Caches and widths the kernel takes: bf16, e4m3 or e5m2 rows; latent and latent + rope
// multiples of 32, the row at most kMlaMaxWidth.
inline bool mla_avx512_supported(DType cache_dtype, std::int64_t width, std::int64_t latent) {
    const bool type = cache_dtype == DType::kBF16 || cache_dtype == DType::kF8E4M3 || cache_dtype == DType::kF8E5M2;
    return type && width % 32 == 0 && latent % 32 == 0 && width <= kMlaMaxWidth;
}

struct MlaSplitBf16 {
    const float* q = nullptr;             // f32 [n_heads][latent + rope]: this head group's queries
    int n_heads = 0;                      // 1..16
    const void* cache = nullptr;          // rows of latent + rope values of cache_dtype
    DType cache_dtype = DType::kBF16;     // bf16, or fp8 (scale 1), widened exactly to bf16
    const std::int32_t* slots = nullptr;  // cache row of every position (nullptr: position p is row p)
    std::int64_t key_begin = 0, key_end = 0;
    // Online-softmax state per head h at state + h · state_stride: max score, sum of
    // exp(score - max), then the latent sum weighted by those exps.
    float* state = nullptr;
    std::int64_t state_stride = 0;
};

// Scratch bytes for mla_split_bf16 (64-byte aligned, per thread).
std::size_t mla_split_bf16_scratch_bytes(std::int64_t latent);

// Keys [key_begin, key_end) of one query token for up to 16 heads, in blocks of 32 keys. The
// heads ride the 16 lanes: scores come from _mm512_dpbf16_ps of the query pairs (rounded to
// bf16, as the GEMV rounds activations) against each key's pairs broadcast from the row, and
// the softmax runs across heads at once; the weighted latent sum is a bf16 GEMM tile of
// 8 heads × 48 latent dims over key pairs.
void mla_split_bf16(const MlaSplitBf16& s, std::int64_t latent, std::int64_t rope, float scale, void* scratch);

}  // namespace tessera::kernels::cpu
