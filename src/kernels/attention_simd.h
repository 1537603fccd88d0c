#pragma once
// kernels/attention_simd.h — AVX2 pieces shared by the attention kernels (prefill blocks and
// decode rows): the softmax exponential, horizontal sums and cache-row addressing. Internal
// to kernels/; include only from files compiled with x86-64-v3 or later.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

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

// Online-softmax step of one row over the scores of a block: p becomes exp(score - new max);
// returns the factor the row's earlier accumulator must be scaled by.
inline float softmax_step(float* p, std::int64_t n, float& row_max, float& row_sum) {
    __m256 vmax8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    std::int64_t j = 0;
    for (; j + 8 <= n; j += 8) vmax8 = _mm256_max_ps(vmax8, _mm256_loadu_ps(p + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax8), _mm256_extractf128_ps(vmax8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float block_max = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_shuffle_ps(m4, m4, 1)));
    for (; j < n; ++j) block_max = std::max(block_max, p[j]);
    const float new_max = std::max(row_max, block_max);
    const __m256 vmax = _mm256_set1_ps(new_max);
    __m256 vsum = _mm256_setzero_ps();
    j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(p + j), vmax));
        _mm256_storeu_ps(p + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float block_sum = hsum(vsum);
    for (; j < n; ++j) {
        p[j] = std::exp(p[j] - new_max);
        block_sum += p[j];
    }
    const float correction = std::exp(row_max - new_max);  // 0 on the first block
    row_sum = row_sum * correction + block_sum;
    row_max = new_max;
    return correction;
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
