// kernels/attention_decode.cpp — decode attention: one or two new tokens of a sequence
// against its whole cache. This is a memory-bound sweep (the cache of a 16-sequence batch is
// far larger than the caches), so it is organised around reading each cache row once: a task
// covers a range of KV heads, walks the positions in blocks, and every K/V element it widens
// serves all query heads of its group. Rows sit side by side for all KV heads of a position,
// so consecutive heads of a block read consecutive memory.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/check.h"
#include "kernels/attention_simd.h"

namespace tessera::kernels::attention_detail {
namespace {

constexpr std::int64_t kKeys = 32;     // positions per online-softmax step

// load16 delivers 16 consecutive elements as two vectors, lo = elements 0-3 and 8-11,
// hi = 4-7 and 12-15: the order unpacking bf16 against zero gives in each 128-bit lane, one
// shuffle per 8 elements. Dot products do not care as long as both sides share the order;
// query rows are stored in it and accumulators are put back in order at the end. The map
// swaps the middle two quads of every 16, so it is its own inverse.
inline std::int64_t unpack_order(std::int64_t i) {
    const std::int64_t quad = (i >> 2) & 3;
    const std::int64_t swapped = quad == 1 ? 2 : quad == 2 ? 1 : quad;
    return (i & ~std::int64_t{15}) | (swapped << 2) | (i & 3);
}

template <bool kBf16>
inline void load16(const void* row, std::int64_t i, __m256& lo, __m256& hi) {
    if constexpr (kBf16) {
        const __m256i x =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(row) + i));
        lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), x));
        hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), x));
    } else {
        const float* f = static_cast<const float*>(row) + i;
        const __m256 a = _mm256_loadu_ps(f);
        const __m256 b = _mm256_loadu_ps(f + 8);
        lo = _mm256_permute2f128_ps(a, b, 0x20);
        hi = _mm256_permute2f128_ps(a, b, 0x31);
    }
}

// s0[u] = q0 · k_u and s1[u] = q1 · k_u for four keys: each widened key element serves both
// query rows (q rows in unpack order, already scaled).
template <bool kBf16>
inline void scores_4x2(const float* q0, const float* q1, const void* const* k, std::int64_t dim, float* s0,
                       float* s1) {
    __m256 a0[4], a1[4];
    for (int u = 0; u < 4; ++u) a0[u] = a1[u] = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < dim; d += 16) {
        const __m256 q0lo = _mm256_loadu_ps(q0 + d), q0hi = _mm256_loadu_ps(q0 + d + 8);
        const __m256 q1lo = _mm256_loadu_ps(q1 + d), q1hi = _mm256_loadu_ps(q1 + d + 8);
        for (int u = 0; u < 4; ++u) {
            __m256 lo, hi;
            load16<kBf16>(k[u], d, lo, hi);
            a0[u] = _mm256_fmadd_ps(q0lo, lo, a0[u]);
            a1[u] = _mm256_fmadd_ps(q1lo, lo, a1[u]);
            a0[u] = _mm256_fmadd_ps(q0hi, hi, a0[u]);
            a1[u] = _mm256_fmadd_ps(q1hi, hi, a1[u]);
        }
    }
    _mm_storeu_ps(s0, hsum4(a0[0], a0[1], a0[2], a0[3]));
    _mm_storeu_ps(s1, hsum4(a1[0], a1[1], a1[2], a1[3]));
}

// acc_w += p_w[0] · v_0 + p_w[1] · v_1 for two query rows (w) and two value rows, 16
// columns at a time: each widened value element serves both query rows, and each
// accumulator is loaded and stored once per two keys.
template <bool kBf16>
inline void accumulate_2x2(float* acc0, float* acc1, const float* p0, const float* p1, const void* v0,
                           const void* v1, std::int64_t dim) {
    const __m256 w00 = _mm256_broadcast_ss(p0), w01 = _mm256_broadcast_ss(p0 + 1);
    const __m256 w10 = _mm256_broadcast_ss(p1), w11 = _mm256_broadcast_ss(p1 + 1);
    for (std::int64_t d = 0; d < dim; d += 16) {
        __m256 lo0, hi0, lo1, hi1;
        load16<kBf16>(v0, d, lo0, hi0);
        load16<kBf16>(v1, d, lo1, hi1);
        __m256 a = _mm256_loadu_ps(acc0 + d), b = _mm256_loadu_ps(acc0 + d + 8);
        a = _mm256_fmadd_ps(w01, lo1, _mm256_fmadd_ps(w00, lo0, a));
        b = _mm256_fmadd_ps(w01, hi1, _mm256_fmadd_ps(w00, hi0, b));
        _mm256_storeu_ps(acc0 + d, a);
        _mm256_storeu_ps(acc0 + d + 8, b);
        a = _mm256_loadu_ps(acc1 + d);
        b = _mm256_loadu_ps(acc1 + d + 8);
        a = _mm256_fmadd_ps(w11, lo1, _mm256_fmadd_ps(w10, lo0, a));
        b = _mm256_fmadd_ps(w11, hi1, _mm256_fmadd_ps(w10, hi0, b));
        _mm256_storeu_ps(acc1 + d, a);
        _mm256_storeu_ps(acc1 + d + 8, b);
    }
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

template <bool kBf16>
void decode_rows(const AttentionArgs& a, const AttentionShape& s, std::int64_t head_begin, std::int64_t head_end,
                 std::int64_t q_begin, std::int64_t q_end) {
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    const std::int64_t n_heads = head_end - head_begin;
    // Query heads are taken in pairs within a group; an odd group's last pair gets a
    // scratch partner whose results are dropped. Slot = (head - head_begin, pair, w).
    const std::int64_t pairs = (group + 1) / 2;
    const std::int64_t n_slots = n_heads * pairs * 2;
    constexpr std::int64_t kScoreStride = kKeys + 4;
    thread_local std::vector<float> storage;
    storage.resize(static_cast<std::size_t>(n_slots * (2 * dim + 2 + kScoreStride)));
    float* q_rows = storage.data();                // [slot][dim], unpack order, scaled
    float* acc = q_rows + n_slots * dim;           // [slot][dim], unpack order
    float* row_max = acc + n_slots * dim;          // [slot]
    float* row_sum = row_max + n_slots;            // [slot]
    float* scores = row_sum + n_slots;             // [slot][kScoreStride]
    const void* k_rows[kKeys + 3];                 // this task's first head in each key's row
    const void* v_rows[kKeys + 1];

    for (std::int64_t qi = q_begin; qi < q_end; ++qi) {
        for (std::int64_t slot = 0; slot < n_slots; ++slot) {
            const std::int64_t h = head_begin + slot / (pairs * 2);
            const std::int64_t g = std::min(slot % (pairs * 2), group - 1);  // the scratch slot copies its partner
            const float* q = a.q + qi * a.q_stride + (h * group + g) * dim;
            for (std::int64_t d = 0; d < dim; ++d) q_rows[slot * dim + d] = q[unpack_order(d)] * s.scale;
        }
        std::fill(acc, acc + n_slots * dim, 0.0f);
        std::fill(row_max, row_max + n_slots, -std::numeric_limits<float>::infinity());
        std::fill(row_sum, row_sum + n_slots, 0.0f);

        const std::int64_t n_keys = a.start_pos + qi + 1;
        const auto row_of = [&](const void* base, std::int64_t key) {
            return kv_row(base, key_row(a, key), a.kv_stride, head_begin, dim, kBf16);
        };
        for (std::int64_t kb = 0; kb < n_keys; kb += kKeys) {
            const std::int64_t n = std::min(kKeys, n_keys - kb);
            for (std::int64_t j = 0; j < n; ++j) {
                k_rows[j] = row_of(a.k, kb + j);
                v_rows[j] = row_of(a.v, kb + j);
            }
            for (std::int64_t j = n; j < kKeys + 3; ++j) k_rows[j] = k_rows[n - 1];  // scores past n unused
            v_rows[n] = v_rows[n - 1];  // an odd count's partner row, weighted 0

            // Scores: four keys at a time, every head of the task, so the four rows are each
            // read front to back (heads are side by side in a row).
            for (std::int64_t j = 0; j < n; j += 4) {
                for (std::int64_t h = 0; h < n_heads; ++h) {
                    const std::int64_t offset = h * dim * (kBf16 ? 2 : 4);
                    const void* k4[4];
                    for (int u = 0; u < 4; ++u) k4[u] = static_cast<const char*>(k_rows[j + u]) + offset;
                    for (std::int64_t pair = 0; pair < pairs; ++pair) {
                        const std::int64_t slot = (h * pairs + pair) * 2;
                        scores_4x2<kBf16>(q_rows + slot * dim, q_rows + (slot + 1) * dim, k4, dim,
                                          scores + slot * kScoreStride + j, scores + (slot + 1) * kScoreStride + j);
                    }
                }
            }
            for (std::int64_t slot = 0; slot < n_slots; ++slot) {
                float* p = scores + slot * kScoreStride;
                const float c = softmax_step(p, n, row_max[slot], row_sum[slot]);
                p[n] = 0.0f;  // weight of the partner row of an odd count
                const __m256 vc = _mm256_set1_ps(c);
                float* acc_row = acc + slot * dim;
                for (std::int64_t d = 0; d < dim; d += 8)
                    _mm256_storeu_ps(acc_row + d, _mm256_mul_ps(_mm256_loadu_ps(acc_row + d), vc));
            }
            // Values: two keys at a time, rows again read front to back.
            for (std::int64_t j = 0; j < n; j += 2) {
                for (std::int64_t h = 0; h < n_heads; ++h) {
                    const std::int64_t offset = h * dim * (kBf16 ? 2 : 4);
                    const void* v0 = static_cast<const char*>(v_rows[j]) + offset;
                    const void* v1 = static_cast<const char*>(v_rows[j + 1]) + offset;
                    for (std::int64_t pair = 0; pair < pairs; ++pair) {
                        const std::int64_t slot = (h * pairs + pair) * 2;
                        accumulate_2x2<kBf16>(acc + slot * dim, acc + (slot + 1) * dim,
                                              scores + slot * kScoreStride + j,
                                              scores + (slot + 1) * kScoreStride + j, v0, v1, dim);
                    }
                }
            }
        }
        for (std::int64_t slot = 0; slot < n_slots; ++slot) {
            const std::int64_t h = head_begin + slot / (pairs * 2);
            const std::int64_t g = slot % (pairs * 2);
            if (g >= group) continue;  // scratch partner
            float* out = a.out + (qi * s.n_heads + h * group + g) * dim;
            const float inv = 1.0f / row_sum[slot];
            for (std::int64_t d = 0; d < dim; ++d) out[d] = acc[slot * dim + unpack_order(d)] * inv;
        }
    }
}

}  // namespace

bool decode_rows_supported(const AttentionShape& s) { return s.head_dim % 16 == 0; }

void attend_decode_rows(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head_begin,
                        std::int64_t kv_head_end, std::int64_t q_begin, std::int64_t q_end) {
    TSR_CHECK(decode_rows_supported(s)) << "head_dim " << s.head_dim;
    if (a.kv_bf16) {
        decode_rows<true>(a, s, kv_head_begin, kv_head_end, q_begin, q_end);
    } else {
        decode_rows<false>(a, s, kv_head_begin, kv_head_end, q_begin, q_end);
    }
}

}  // namespace tessera::kernels::attention_detail
