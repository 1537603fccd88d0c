#pragma once
// kernels/attention_simd.h — AVX2 pieces shared by the attention kernels (prefill blocks and
// decode rows): the softmax exponential, horizontal sums and cache-row addressing. Internal
// to kernels/; include only from files compiled with x86-64-v3 or later.

#include <immintrin.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/simd_exp.h"
#include "tensor/dtype.h"

namespace tessera::kernels::attention_detail {

inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

// Four dot-product accumulators reduced to [Σa, Σb, Σc, Σd].
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

inline std::int64_t key_row(const AttentionArgs& a, std::int64_t position) {
    return a.kv_slots == nullptr ? position : a.kv_slots[position];
}

// Element i of a K/V row as f32.
inline float kv_value(const void* row, std::int64_t i, bool bf16) {
    return bf16 ? bf16_to_f32(static_cast<const std::uint16_t*>(row)[i]) : static_cast<const float*>(row)[i];
}

// Address of head `kv_head` in cache row `row`.
inline const void* kv_row(const void* base, std::int64_t row, std::int64_t stride, std::int64_t kv_head,
                          std::int64_t dim, bool bf16) {
    const std::int64_t offset = row * stride + kv_head * dim;
    return bf16 ? static_cast<const void*>(static_cast<const std::uint16_t*>(base) + offset)
                : static_cast<const void*>(static_cast<const float*>(base) + offset);
}

// Decode: the query tokens of one sequence against its cache for the KV heads
// [kv_head_begin, kv_head_end), every query head of their groups at once, so that each K/V
// row of the cache is read from memory once per token. Needs head_dim % 16 == 0
// (decode_rows_supported).
bool decode_rows_supported(const AttentionShape& s);
void attend_decode_rows(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head_begin,
                        std::int64_t kv_head_end, std::int64_t q_begin, std::int64_t q_end);

}  // namespace tessera::kernels::attention_detail
