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

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "kernels/attention_simd.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/isa.h"

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

template <DType kKv>
inline void load16(const void* row, std::int64_t i, __m256& lo, __m256& hi) {
    if constexpr (kKv == DType::kF8E4M3 || kKv == DType::kF8E5M2) {
        __m256 a, b;
        fp8_to_f32x16<kKv>(static_cast<const std::uint8_t*>(row) + i, a, b);
        lo = _mm256_permute2f128_ps(a, b, 0x20);
        hi = _mm256_permute2f128_ps(a, b, 0x31);
    } else if constexpr (kKv == DType::kBF16) {
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

// Partial dot products of two query rows with one key (q rows in unpack order, already
// scaled): 8 lanes each, summed across lanes later for four keys at once (hsum4). Each
// widened key element serves both query rows.
template <DType kKv>
inline void partial_scores_2(const float* q0, const float* q1, const void* k, std::int64_t dim, float* out0,
                             float* out1) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    for (std::int64_t d = 0; d < dim; d += 16) {
        __m256 lo, hi;
        load16<kKv>(k, d, lo, hi);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), lo, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + 8), hi, a1);
        b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), lo, b0);
        b1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d + 8), hi, b1);
    }
    _mm256_store_ps(out0, _mm256_add_ps(a0, a1));
    _mm256_store_ps(out1, _mm256_add_ps(b0, b1));
}

// acc_w += p_w · v for two query rows and one value row, 16 columns at a time: each widened
// value element serves both query rows.
template <DType kKv>
inline void accumulate_2(float* acc0, float* acc1, float p0, float p1, const void* v, std::int64_t dim) {
    const __m256 w0 = _mm256_set1_ps(p0), w1 = _mm256_set1_ps(p1);
    for (std::int64_t d = 0; d < dim; d += 16) {
        __m256 lo, hi;
        load16<kKv>(v, d, lo, hi);
        _mm256_storeu_ps(acc0 + d, _mm256_fmadd_ps(w0, lo, _mm256_loadu_ps(acc0 + d)));
        _mm256_storeu_ps(acc0 + d + 8, _mm256_fmadd_ps(w0, hi, _mm256_loadu_ps(acc0 + d + 8)));
        _mm256_storeu_ps(acc1 + d, _mm256_fmadd_ps(w1, lo, _mm256_loadu_ps(acc1 + d)));
        _mm256_storeu_ps(acc1 + d + 8, _mm256_fmadd_ps(w1, hi, _mm256_loadu_ps(acc1 + d + 8)));
    }
}

template <DType kKv>
void decode_rows(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& r, const DecodePartial* part) {
    const std::int64_t head_begin = r.kv_head_begin, head_end = r.kv_head_end;
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    const std::int64_t n_heads = head_end - head_begin;
    const std::int64_t head_bytes = dim * static_cast<std::int64_t>(dtype_size(kKv));
    // Query heads are taken in pairs within a group; an odd group's last pair gets a
    // scratch partner whose results are dropped. Slot = (head - head_begin, pair, w).
    const std::int64_t pairs = (group + 1) / 2;
    const std::int64_t n_slots = n_heads * pairs * 2;
    constexpr std::int64_t kScoreStride = kKeys + 4;
    thread_local AlignedBuffer storage;
    const auto floats = static_cast<std::size_t>(n_slots * (2 * dim + 2 + kScoreStride + 8 * (kKeys + 4)));
    if (storage.size() < floats * sizeof(float)) storage = AlignedBuffer(floats * sizeof(float));
    float* partial = storage.as<float>();         // [slot][kKeys + 4][8] lane sums, 32-byte aligned
    float* q_rows = partial + n_slots * (kKeys + 4) * 8;  // [slot][dim], unpack order, scaled
    float* acc = q_rows + n_slots * dim;          // [slot][dim], unpack order
    float* row_max = acc + n_slots * dim;         // [slot]
    float* row_sum = row_max + n_slots;           // [slot]
    float* scores = row_sum + n_slots;            // [slot][kScoreStride]

    for (std::int64_t qi = r.q_begin; qi < r.q_end; ++qi) {
        for (std::int64_t slot = 0; slot < n_slots; ++slot) {
            const std::int64_t h = head_begin + slot / (pairs * 2);
            const std::int64_t g = std::min(slot % (pairs * 2), group - 1);  // the scratch slot copies its partner
            const float* q = a.q + qi * a.q_stride + (h * group + g) * dim;
            for (std::int64_t d = 0; d < dim; ++d) q_rows[slot * dim + d] = q[unpack_order(d)] * s.scale;
        }
        std::fill(acc, acc + n_slots * dim, 0.0f);
        std::fill(row_max, row_max + n_slots, -std::numeric_limits<float>::infinity());
        std::fill(row_sum, row_sum + n_slots, 0.0f);

        const std::int64_t key_end = std::min(r.key_end, a.start_pos + qi + 1);
        // Cache rows are consumed one at a time, front to back (this task's heads of a
        // position sit side by side): the hardware prefetcher streams such a walk at full
        // memory speed, and measured at half that when several rows are read in step.
        for (std::int64_t kb = r.key_begin; kb < key_end; kb += kKeys) {
            const std::int64_t n = std::min(kKeys, key_end - kb);
            for (std::int64_t j = 0; j < n; ++j) {
                const auto* k = static_cast<const char*>(
                    kv_row(a.k, key_row(a, kb + j), a.kv_stride, head_begin, dim, kKv));
                for (std::int64_t h = 0; h < n_heads; ++h) {
                    for (std::int64_t pair = 0; pair < pairs; ++pair) {
                        const std::int64_t slot = (h * pairs + pair) * 2;
                        partial_scores_2<kKv>(q_rows + slot * dim, q_rows + (slot + 1) * dim, k + h * head_bytes,
                                                dim, partial + (slot * (kKeys + 4) + j) * 8,
                                                partial + ((slot + 1) * (kKeys + 4) + j) * 8);
                    }
                }
            }
            for (std::int64_t slot = 0; slot < n_slots; ++slot) {
                const float* lanes = partial + slot * (kKeys + 4) * 8;
                float* p = scores + slot * kScoreStride;
                for (std::int64_t j = 0; j < n; j += 4)  // lanes past n hold stale sums: unused
                    _mm_storeu_ps(p + j, hsum4(_mm256_load_ps(lanes + j * 8), _mm256_load_ps(lanes + (j + 1) * 8),
                                               _mm256_load_ps(lanes + (j + 2) * 8),
                                               _mm256_load_ps(lanes + (j + 3) * 8)));
                const float c = softmax_step(p, n, row_max[slot], row_sum[slot]);
                const __m256 vc = _mm256_set1_ps(c);
                float* acc_row = acc + slot * dim;
                for (std::int64_t d = 0; d < dim; d += 8)
                    _mm256_storeu_ps(acc_row + d, _mm256_mul_ps(_mm256_loadu_ps(acc_row + d), vc));
            }
            for (std::int64_t j = 0; j < n; ++j) {
                const auto* v = static_cast<const char*>(
                    kv_row(a.v, key_row(a, kb + j), a.kv_stride, head_begin, dim, kKv));
                for (std::int64_t h = 0; h < n_heads; ++h) {
                    for (std::int64_t pair = 0; pair < pairs; ++pair) {
                        const std::int64_t slot = (h * pairs + pair) * 2;
                        accumulate_2<kKv>(acc + slot * dim, acc + (slot + 1) * dim, scores[slot * kScoreStride + j],
                                            scores[(slot + 1) * kScoreStride + j], v + h * head_bytes, dim);
                    }
                }
            }
        }
        for (std::int64_t slot = 0; slot < n_slots; ++slot) {
            const std::int64_t h = head_begin + slot / (pairs * 2);
            const std::int64_t g = slot % (pairs * 2);
            if (g >= group) continue;  // scratch partner
            const std::int64_t row = qi * s.n_heads + h * group + g;
            if (part == nullptr) {
                float* out = a.out + row * dim;
                const float inv = 1.0f / row_sum[slot];
                for (std::int64_t d = 0; d < dim; ++d) out[d] = acc[slot * dim + unpack_order(d)] * inv;
            } else {
                float* out = part->acc + row * dim;
                for (std::int64_t d = 0; d < dim; ++d) out[d] = acc[slot * dim + unpack_order(d)];
                part->max[row] = row_max[slot];
                part->sum[row] = row_sum[slot];
            }
        }
    }
}

}  // namespace

bool decode_rows_supported(const AttentionShape& s) { return s.head_dim % 16 == 0; }

void attend_decode_rows(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& range,
                        const DecodePartial* partial) {
    TSR_CHECK(decode_rows_supported(s)) << "head_dim " << s.head_dim;
    if (a.kv_dtype == DType::kBF16 && uses_avx512_bf16(active_isa()) && cpu::attend_decode_bf16_supported(s)) {
        thread_local AlignedBuffer scratch;
        const std::size_t bytes = cpu::attend_decode_bf16_scratch_bytes(s, range);
        if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
        cpu::attend_decode_bf16_avx512(a, s, range, partial, scratch.data());
        return;
    }
    with_kv_type(a.kv_dtype, [&](auto kv) { decode_rows<decltype(kv)::value>(a, s, range, partial); });
}

void fold_decode_row(const DecodePartial& running, const DecodePartial& part, std::int64_t row, std::int64_t dim) {
    if (part.sum[row] == 0.0f) return;
    float* acc = running.acc + row * dim;
    const float* add = part.acc + row * dim;
    if (running.sum[row] == 0.0f) {
        std::copy(add, add + dim, acc);
        running.max[row] = part.max[row];
        running.sum[row] = part.sum[row];
        return;
    }
    const float m = std::max(running.max[row], part.max[row]);
    const float keep = std::exp(running.max[row] - m);
    const float w = std::exp(part.max[row] - m);
    running.sum[row] = running.sum[row] * keep + part.sum[row] * w;
    running.max[row] = m;
    for (std::int64_t d = 0; d < dim; ++d) acc[d] = acc[d] * keep + add[d] * w;
}

void finish_decode_row(const DecodePartial& running, std::int64_t row, std::int64_t dim, float* out_row) {
    const float inv = 1.0f / running.sum[row];
    const float* acc = running.acc + row * dim;
    for (std::int64_t d = 0; d < dim; ++d) out_row[d] = acc[d] * inv;
}

void combine_decode_partials(std::span<const DecodePartial> parts, std::int64_t n_rows, std::int64_t dim,
                             float* out) {
    for (std::int64_t row = 0; row < n_rows; ++row) {
        for (std::size_t p = 1; p < parts.size(); ++p) fold_decode_row(parts[0], parts[p], row, dim);
        finish_decode_row(parts[0], row, dim, out + row * dim);
    }
}

}  // namespace tessera::kernels::attention_detail
