#pragma once
// kernels/attention_simd.h — AVX2 pieces shared by the attention kernels (prefill blocks and
// decode rows): the softmax exponential, horizontal sums and cache-row addressing. Internal
// to kernels/; include only from files compiled with x86-64-v3 or later.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/attention_decode.h"
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
inline float kv_value(const void* row, std::int64_t i, DType type) {
    switch (type) {
        case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(row)[i]);
        case DType::kF8E4M3:
        case DType::kF8E5M2: return fp8_to_f32(static_cast<const std::uint8_t*>(row)[i], type);
        default: return static_cast<const float*>(row)[i];
    }
}

// Address of head `kv_head` in cache row `row`.
inline const void* kv_row(const void* base, std::int64_t row, std::int64_t stride, std::int64_t kv_head,
                          std::int64_t dim, DType type) {
    const std::int64_t offset = row * stride + kv_head * dim;
    return static_cast<const char*>(base) + offset * static_cast<std::int64_t>(dtype_size(type));
}

// 16 fp8 codes as f32 in element order (a: 0-7, b: 8-15), exactly: an e4m3 code shifted into
// binary16 is its value times 2^-8 (subnormals included), an e5m2 code is binary16's top byte.
template <DType kType>
inline void fp8_to_f32x16(const void* p, __m256& a, __m256& b) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    __m256i h;
    if constexpr (kType == DType::kF8E5M2) {
        h = _mm256_slli_epi16(w, 8);
    } else {
        h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8),
                            _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7));
    }
    a = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    b = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if constexpr (kType != DType::kF8E5M2) {
        a = _mm256_mul_ps(a, _mm256_set1_ps(256.0f));
        b = _mm256_mul_ps(b, _mm256_set1_ps(256.0f));
    }
}

// Calls f(std::integral_constant<DType, t>{}) for the K/V element type t: one instantiation
// of a kernel per storage type.
template <typename F>
inline void with_kv_type(DType t, F&& f) {
    switch (t) {
        case DType::kBF16: f(std::integral_constant<DType, DType::kBF16>{}); return;
        case DType::kF8E4M3: f(std::integral_constant<DType, DType::kF8E4M3>{}); return;
        case DType::kF8E5M2: f(std::integral_constant<DType, DType::kF8E5M2>{}); return;
        default: f(std::integral_constant<DType, DType::kF32>{}); return;
    }
}

// Decode: the query tokens of one sequence against its cache for one DecodeRange, every query
// head of a KV group at once, so that each K/V row of the cache is read from memory once per
// token. Writes normalised rows to a.out, or the unnormalised part when `partial` is given.
// Needs head_dim % 16 == 0 (decode_rows_supported).
bool decode_rows_supported(const AttentionShape& s);
void attend_decode_rows(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& range,
                        const DecodePartial* partial);

// Flash decoding's combine, one part at a time in key order: folds `part`'s row into
// `running`'s (a running row with sum 0 takes the part's as it is; a part with sum 0 saw none
// of the row's keys). Parts computed by separate tasks (a decoding sequence's key ranges) and
// parts computed one after another by one task (a prompt's rows under batch-invariant
// kernels) merge through the same operations.
void fold_decode_row(const DecodePartial& running, const DecodePartial& part, std::int64_t row, std::int64_t dim);
// out_row = running's row normalised by its sum.
void finish_decode_row(const DecodePartial& running, std::int64_t row, std::int64_t dim, float* out_row);

// out[row] = the softmax-weighted value rows over every part's keys, rows [0, n_rows): the
// parts folded into the first, in order. Overwrites the first part.
void combine_decode_partials(std::span<const DecodePartial> parts, std::int64_t n_rows, std::int64_t dim,
                             float* out);

}  // namespace tessera::kernels::attention_detail
