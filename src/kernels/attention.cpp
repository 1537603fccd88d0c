#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/attention_simd.h"
#include "kernels/batch_invariance.h"
#include "kernels/cpu/attention_avx512.h"
#include "kernels/isa.h"
#include "tensor/dtype.h"

namespace tessera::kernels {

namespace {

using namespace attention_detail;

constexpr std::int64_t kKeyBlock = 64;    // keys per online-softmax step
constexpr std::int64_t kQueryBlock = 64;  // query tokens sharing one transposed key block
constexpr std::int64_t kMaxHeadDim = 512;


// Scores of two query rows against a key block held transposed (kt f32 [dim][kKeyBlock]):
// s0[j] = q0 · k_j, s1[j] = q1 · k_j for j < kKeyBlock. Two rows share every load of kt;
// the block is swept in halves of 32 keys so the 8 accumulators, 2 broadcasts and the load
// fit the 16 AVX2 registers without spilling.
inline void scores_two_rows(const float* q0, const float* q1, const float* kt, std::int64_t dim,
                            float* s0, float* s1) {
    for (int half = 0; half < kKeyBlock; half += 32) {
        __m256 a0[4], a1[4];
        for (int v = 0; v < 4; ++v) a0[v] = a1[v] = _mm256_setzero_ps();
        for (std::int64_t d = 0; d < dim; ++d) {
            const __m256 b0 = _mm256_broadcast_ss(q0 + d);
            const __m256 b1 = _mm256_broadcast_ss(q1 + d);
            const float* row = kt + d * kKeyBlock + half;
            for (int v = 0; v < 4; ++v) {
                const __m256 k = _mm256_load_ps(row + 8 * v);
                a0[v] = _mm256_fmadd_ps(b0, k, a0[v]);
                a1[v] = _mm256_fmadd_ps(b1, k, a1[v]);
            }
        }
        for (int v = 0; v < 4; ++v) {
            _mm256_storeu_ps(s0 + half + 8 * v, a0[v]);
            _mm256_storeu_ps(s1 + half + 8 * v, a1[v]);
        }
    }
}

// Two rows at once: acc_w f32 [dim] = acc_w · correction_w + Σ_j p_w[j] · v_j for w = 0, 1,
// over a packed value block (vb f32 [n_keys][dim]); both rows share every load of v. Rows
// that see fewer keys have p = 0 past what they see.
inline void accumulate_two_rows(float* acc0, float* acc1, float c0, float c1, const float* p0,
                                const float* p1, const float* vb, std::int64_t n_keys, std::int64_t dim) {
    const __m256 vc0 = _mm256_set1_ps(c0);
    const __m256 vc1 = _mm256_set1_ps(c1);
    std::int64_t d0 = 0;
    for (; d0 + 32 <= dim; d0 += 32) {
        __m256 r0[4], r1[4];
        for (int u = 0; u < 4; ++u) {
            r0[u] = _mm256_mul_ps(_mm256_loadu_ps(acc0 + d0 + 8 * u), vc0);
            r1[u] = _mm256_mul_ps(_mm256_loadu_ps(acc1 + d0 + 8 * u), vc1);
        }
        for (std::int64_t j = 0; j < n_keys; ++j) {
            const __m256 w0 = _mm256_broadcast_ss(p0 + j);
            const __m256 w1 = _mm256_broadcast_ss(p1 + j);
            const float* vj = vb + j * dim + d0;
            for (int u = 0; u < 4; ++u) {
                const __m256 v = _mm256_loadu_ps(vj + 8 * u);
                r0[u] = _mm256_fmadd_ps(w0, v, r0[u]);
                r1[u] = _mm256_fmadd_ps(w1, v, r1[u]);
            }
        }
        for (int u = 0; u < 4; ++u) {
            _mm256_storeu_ps(acc0 + d0 + 8 * u, r0[u]);
            _mm256_storeu_ps(acc1 + d0 + 8 * u, r1[u]);
        }
    }
    for (std::int64_t d = d0; d < dim; ++d) {
        float x0 = acc0[d] * c0;
        float x1 = acc1[d] * c1;
        for (std::int64_t j = 0; j < n_keys; ++j) {
            x0 += p0[j] * vb[j * dim + d];
            x1 += p1[j] * vb[j * dim + d];
        }
        acc0[d] = x0;
        acc1[d] = x1;
    }
}

// 8 consecutive elements from f32, bf16 or fp8 storage, as f32.
template <DType kKv>
inline __m256 load8(const void* p, std::int64_t i) {
    if constexpr (kKv == DType::kBF16) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (kKv == DType::kF32) {
        return _mm256_loadu_ps(static_cast<const float*>(p) + i);
    } else {
        const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(p) + i)));
        if constexpr (kKv == DType::kF8E5M2) return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
        const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8),
                                       _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)), 7));
        return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));  // see fp8_to_f32x16
    }
}

// A head's row from the cache into f32 (the packing of the block path).
inline void widen_row(const void* src, float* dst, std::int64_t dim, DType type) {
    if (type == DType::kF32) {
        std::memcpy(dst, src, static_cast<std::size_t>(dim) * sizeof(float));
    } else {
        convert_to_f32(src, type, dst, static_cast<std::size_t>(dim));
    }
}

// Decode and other few-row work: with a handful of query rows, transposing every key block
// costs more than it saves, so each row reads the cache rows directly.
constexpr std::int64_t kDirectRowLimit = 4;

// Up to this many new tokens per sequence take the decode kernel (each token sweeps the cache).
constexpr std::int64_t kDecodeMaxTokens = 2;

template <DType kKv>
void attend_rows_direct(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head,
                        std::int64_t q_begin, std::int64_t q_end) {
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    alignas(32) float p[kKeyBlock];
    thread_local std::vector<float> acc;
    acc.assign(static_cast<std::size_t>(dim), 0.0f);
    for (std::int64_t qi = q_begin; qi < q_end; ++qi) {
        const std::int64_t n_keys_total = a.start_pos + qi + 1;
        for (std::int64_t g = 0; g < group; ++g) {
            const std::int64_t head = kv_head * group + g;
            const float* q = a.q + qi * a.q_stride + head * dim;
            std::fill(acc.begin(), acc.end(), 0.0f);
            float row_max = -std::numeric_limits<float>::infinity();
            float row_sum = 0.0f;
            for (std::int64_t kb = 0; kb < n_keys_total; kb += kKeyBlock) {
                const std::int64_t n = std::min(kKeyBlock, n_keys_total - kb);
                std::int64_t j = 0;
                // Four keys at a time share one horizontal reduction.
                for (; j + 4 <= n; j += 4) {
                    const void* k0 = kv_row(a.k, key_row(a, kb + j), a.kv_stride, kv_head, dim, kKv);
                    const void* k1 = kv_row(a.k, key_row(a, kb + j + 1), a.kv_stride, kv_head, dim, kKv);
                    const void* k2 = kv_row(a.k, key_row(a, kb + j + 2), a.kv_stride, kv_head, dim, kKv);
                    const void* k3 = kv_row(a.k, key_row(a, kb + j + 3), a.kv_stride, kv_head, dim, kKv);
                    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
                    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
                    std::int64_t d = 0;
                    for (; d + 8 <= dim; d += 8) {
                        const __m256 qv = _mm256_loadu_ps(q + d);
                        s0 = _mm256_fmadd_ps(qv, load8<kKv>(k0, d), s0);
                        s1 = _mm256_fmadd_ps(qv, load8<kKv>(k1, d), s1);
                        s2 = _mm256_fmadd_ps(qv, load8<kKv>(k2, d), s2);
                        s3 = _mm256_fmadd_ps(qv, load8<kKv>(k3, d), s3);
                    }
                    // hadd pairs: [s0 s1 s0 s1 | ...] then [s0 s1 s2 s3] per 128-bit lane.
                    const __m256 h01 = _mm256_hadd_ps(s0, s1);
                    const __m256 h23 = _mm256_hadd_ps(s2, s3);
                    const __m256 h = _mm256_hadd_ps(h01, h23);
                    const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
                    alignas(16) float four[4];
                    _mm_store_ps(four, sum4);
                    for (int u = 0; u < 4; ++u) {
                        float v = four[u];
                        const void* kr = u == 0 ? k0 : u == 1 ? k1 : u == 2 ? k2 : k3;
                        for (std::int64_t dd = d; dd < dim; ++dd) v += q[dd] * kv_value(kr, dd, kKv);
                        p[j + u] = v * s.scale;
                    }
                }
                for (; j < n; ++j) {
                    const void* kr = kv_row(a.k, key_row(a, kb + j), a.kv_stride, kv_head, dim, kKv);
                    float v = 0.0f;
                    for (std::int64_t d = 0; d < dim; ++d) v += q[d] * kv_value(kr, d, kKv);
                    p[j] = v * s.scale;
                }
                const float correction = softmax_step(p, n, row_max, row_sum);
                // acc = acc · correction + Σ p_j v_j, 64 columns at a time in registers.
                const __m256 c = _mm256_set1_ps(correction);
                std::int64_t d0 = 0;
                for (; d0 + 64 <= dim; d0 += 64) {
                    __m256 r[8];
                    for (int u = 0; u < 8; ++u) r[u] = _mm256_mul_ps(_mm256_loadu_ps(acc.data() + d0 + 8 * u), c);
                    for (std::int64_t jj = 0; jj < n; ++jj) {
                        const void* v = kv_row(a.v, key_row(a, kb + jj), a.kv_stride, kv_head, dim, kKv);
                        const __m256 pj = _mm256_set1_ps(p[jj]);
                        for (int u = 0; u < 8; ++u) r[u] = _mm256_fmadd_ps(pj, load8<kKv>(v, d0 + 8 * u), r[u]);
                    }
                    for (int u = 0; u < 8; ++u) _mm256_storeu_ps(acc.data() + d0 + 8 * u, r[u]);
                }
                for (std::int64_t d = d0; d < dim; ++d) {
                    float x = acc[d] * correction;
                    for (std::int64_t jj = 0; jj < n; ++jj)
                        x += p[jj] * kv_value(kv_row(a.v, key_row(a, kb + jj), a.kv_stride, kv_head, dim, kKv), d, kKv);
                    acc[d] = x;
                }
            }
            float* out = a.out + (qi * s.n_heads + head) * dim;
            const float inv = 1.0f / row_sum;
            for (std::int64_t d = 0; d < dim; ++d) out[d] = acc[d] * inv;
        }
    }
}

// One (kv head, block of query tokens): every query head of the group, every token of the
// block, swept once over the keys in blocks of kKeyBlock. Each key block is transposed once
// and then serves all rows of the group.
void attend_block(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head,
                  std::int64_t q_begin, std::int64_t q_end) {
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    const std::int64_t n_rows = (q_end - q_begin) * group;
    const std::int64_t last_key = a.start_pos + q_end - 1;  // inclusive, for the last query

    // Rows are token-major: row = (token - q_begin) · group + g; one extra row pads odd counts.
    std::vector<float> row_max(static_cast<std::size_t>(n_rows + 1), -std::numeric_limits<float>::infinity());
    std::vector<float> row_sum(static_cast<std::size_t>(n_rows + 1), 0.0f);
    std::vector<float> accum(static_cast<std::size_t>(n_rows * dim), 0.0f);
    std::vector<float> pad_accum(static_cast<std::size_t>(dim), 0.0f);
    std::vector<const float*> q_rows(static_cast<std::size_t>(n_rows + 1));
    std::vector<std::int64_t> q_pos(static_cast<std::size_t>(n_rows + 1));
    for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t qi = q_begin + r / group;
        q_rows[r] = a.q + qi * a.q_stride + (kv_head * group + r % group) * dim;
        q_pos[r] = a.start_pos + qi;
    }
    q_rows[n_rows] = q_rows[0];
    q_pos[n_rows] = -1;
    // The key block transposed, f32 [dim][kKeyBlock], and the value block packed, f32
    // [kKeyBlock][dim]: cache rows sit kv_heads·head_dim floats apart (4 KB for 8 × 128),
    // which would make every row of a block hit the same L1 sets.
    thread_local AlignedBuffer block_storage;
    const auto block_bytes = static_cast<std::size_t>(2 * dim * kKeyBlock) * sizeof(float);
    if (block_storage.size() < block_bytes) block_storage = AlignedBuffer(block_bytes);
    float* kt = block_storage.as<float>();
    float* vb = kt + dim * kKeyBlock;
    alignas(32) float scores[2][kKeyBlock];

    alignas(32) float k_row[kMaxHeadDim];
    for (std::int64_t kb = 0; kb <= last_key; kb += kKeyBlock) {
        const std::int64_t n_keys = std::min(kKeyBlock, last_key + 1 - kb);
        for (std::int64_t j = 0; j < n_keys; ++j) {
            widen_row(kv_row(a.k, key_row(a, kb + j), a.kv_stride, kv_head, dim, a.kv_dtype), k_row, dim, a.kv_dtype);
            for (std::int64_t d = 0; d < dim; ++d) kt[d * kKeyBlock + j] = k_row[d];
        }
        for (std::int64_t j = n_keys; j < kKeyBlock; ++j)
            for (std::int64_t d = 0; d < dim; ++d) kt[d * kKeyBlock + j] = 0.0f;
        for (std::int64_t j = 0; j < n_keys; ++j)
            widen_row(kv_row(a.v, key_row(a, kb + j), a.kv_stride, kv_head, dim, a.kv_dtype), vb + j * dim, dim,
                      a.kv_dtype);
        for (std::int64_t r = 0; r < n_rows; r += 2) {
            if (q_pos[r] < kb && q_pos[r + 1] < kb) continue;  // both rows see none of this block
            scores_two_rows(q_rows[r], q_rows[r + 1], kt, dim, scores[0], scores[1]);
            float correction[2] = {1.0f, 1.0f};
            std::int64_t most_visible = 0;
            for (std::int64_t w = 0; w < 2; ++w) {
                const std::int64_t row = r + w;
                float* p = scores[w];
                // Causal: this row sees keys kb .. q_pos (none when q_pos < kb; the pad row sees none).
                const std::int64_t visible = std::clamp<std::int64_t>(q_pos[row] + 1 - kb, 0, n_keys);
                most_visible = std::max(most_visible, visible);
                std::fill(p + visible, p + kKeyBlock, 0.0f);
                if (visible == 0) continue;
                for (std::int64_t j = 0; j < visible; ++j) p[j] *= s.scale;
                correction[w] = softmax_step(p, visible, row_max[row], row_sum[row]);
            }
            // The pad row (odd row counts) accumulates into scratch that is never read.
            float* acc1 = r + 1 < n_rows ? accum.data() + (r + 1) * dim : pad_accum.data();
            accumulate_two_rows(accum.data() + r * dim, acc1, correction[0], correction[1], scores[0], scores[1],
                                vb, most_visible, dim);
        }
    }
    for (std::int64_t r = 0; r < n_rows; ++r) {
        const std::int64_t qi = q_begin + r / group;
        const std::int64_t head = kv_head * group + r % group;
        float* out = a.out + (qi * s.n_heads + head) * dim;
        const float inv = 1.0f / row_sum[r];
        for (std::int64_t d = 0; d < dim; ++d) out[d] = accum[r * dim + d] * inv;
    }
}

// Keys per part of the batch-invariant kernels: every row's keys fold in parts that start at
// multiples of this, whichever task computes them.
constexpr std::int64_t kInvariantPartKeys = 256;
// A prompt's tokens per batch-invariant task: their query rows (16 tokens x a GQA group of 2 x
// 128 floats: 16 KB) stay in L1 while every key row widened serves them all. A 2048-token
// prefill of the small preset ran at 356-402 tokens/s with 16, 266-277 with 64, 308-371 with 8.
constexpr std::int64_t kInvariantQueryBlock = 16;

// Query rows [range.q_begin, range.q_end) of KV heads [range.kv_head_begin, kv_head_end)
// over their keys in parts of kInvariantPartKeys, one after another, folded in key order:
// what a key-split decode computes, with two parts' worth of scratch.
void attend_in_parts(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& range) {
    AttentionArgs rows = a;  // the range's rows alone: row qi of `rows` is row q_begin + qi of `a`
    rows.q = a.q + range.q_begin * a.q_stride;
    rows.out = a.out + range.q_begin * s.n_heads * s.head_dim;
    rows.start_pos = a.start_pos + range.q_begin;
    rows.n_q = range.q_end - range.q_begin;
    const std::int64_t dim = s.head_dim, n_rows = rows.n_q * s.n_heads;
    thread_local AlignedBuffer storage;
    const auto bytes = static_cast<std::size_t>(2 * n_rows * (dim + 2)) * sizeof(float);
    if (storage.size() < bytes) storage = AlignedBuffer(bytes);
    const auto partial_at = [&](float* base) {
        return DecodePartial{base, base + n_rows * dim, base + n_rows * (dim + 1)};
    };
    const DecodePartial running = partial_at(storage.as<float>());
    const DecodePartial part = partial_at(storage.as<float>() + n_rows * (dim + 2));
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t head_begin = range.kv_head_begin * group, head_end = range.kv_head_end * group;
    const auto for_rows = [&](auto&& fn) {
        for (std::int64_t qi = 0; qi < rows.n_q; ++qi)
            for (std::int64_t head = head_begin; head < head_end; ++head) fn(qi * s.n_heads + head);
    };
    for_rows([&](std::int64_t row) { running.sum[row] = 0.0f; });
    for (std::int64_t k = 0; k < rows.start_pos + rows.n_q; k += kInvariantPartKeys) {
        attend_decode_rows(rows, s, {range.kv_head_begin, range.kv_head_end, 0, rows.n_q, k, k + kInvariantPartKeys},
                           &part);
        for_rows([&](std::int64_t row) { fold_decode_row(running, part, row, dim); });
    }
    for_rows([&](std::int64_t row) { finish_decode_row(running, row, dim, rows.out + row * dim); });
}

AttentionArgs with_default_strides(AttentionArgs a, const AttentionShape& s) {
    if (a.q_stride == 0) a.q_stride = s.n_heads * s.head_dim;
    if (a.kv_stride == 0) a.kv_stride = s.n_kv_heads * s.head_dim;
    return a;
}

void check_shape(const AttentionShape& s) {
    TSR_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0)
        << "n_heads " << s.n_heads << " n_kv_heads " << s.n_kv_heads;
    TSR_CHECK(s.n_heads / s.n_kv_heads <= 64) << "GQA group above 64";
    TSR_CHECK_LE(s.head_dim, kMaxHeadDim);
}

// Decode tasks cover a range of KV heads of one sequence: the whole row set when there are
// enough sequences to keep every worker busy (each task then streams its cache once, in
// address order), narrower ranges for small batches.
std::int64_t kv_heads_per_decode_task(std::int64_t n_decode_seqs, std::int64_t n_kv_heads, int n_workers) {
    const std::int64_t wanted_tasks = 4 * static_cast<std::int64_t>(n_workers);
    for (std::int64_t splits = 1; splits < n_kv_heads; ++splits)
        if (n_kv_heads % splits == 0 && n_decode_seqs * splits >= wanted_tasks) return n_kv_heads / splits;
    return 1;
}

}  // namespace

// A few sequences with long caches split their keys between tasks instead (flash decoding):
// a task then still reads whole cache rows in address order, where a head range would read a
// slice of every row (measured at a quarter of the memory speed). Parts shorter than this
// cost more in the combine than they save.
constexpr std::int64_t kMinKeysPerDecodePart = 128;

std::int64_t attention_detail::decode_key_parts(std::int64_t n_decode_seqs, std::int64_t n_keys, int n_workers) {
    const std::int64_t wanted_tasks = 4 * static_cast<std::int64_t>(n_workers);
    if (n_decode_seqs == 0 || n_decode_seqs >= wanted_tasks) return 1;
    const std::int64_t parts = (wanted_tasks + n_decode_seqs - 1) / n_decode_seqs;
    return std::max<std::int64_t>(1, std::min(parts, n_keys / kMinKeysPerDecodePart));
}

std::int64_t attention_detail::bf16_prefill_query_tokens(std::int64_t n_q, std::int64_t n_kv_heads, int n_workers) {
    // Each of a task's key and value blocks is packed for the AMX / dot-product layout once per
    // task, so larger tasks pack a long prompt's cache fewer times (512 tokens: 1024 rows at GQA
    // group 2, ~1.2 MB of scratch, within L2). Four tasks per worker let the causal blocks'
    // unequal costs even out.
    constexpr std::int64_t kMaxTokens = 512;
    constexpr std::int64_t kTasksPerWorker = 4;
    const std::int64_t even_share = n_q * n_kv_heads / (kTasksPerWorker * static_cast<std::int64_t>(n_workers));
    return std::clamp((even_share + kQueryBlock - 1) / kQueryBlock * kQueryBlock, kQueryBlock, kMaxTokens);
}

void attention_batch(std::span<const AttentionArgs> batch, const AttentionShape& shape, ThreadPool* pool) {
    check_shape(shape);
    enum class Kind { kDecode, kDirect, kBlock, kInParts };
    struct Task {
        std::size_t seq;
        Kind kind;
        attention_detail::DecodeRange range;
        std::int64_t part = -1;  // index into `parts` when the sequence's keys are split
    };
    const std::int64_t group = shape.n_heads / shape.n_kv_heads;
    const bool decode_supported = decode_rows_supported(shape);
    // Batch-invariant: every row takes the decode kernel's per-row sweep over its keys, in
    // parts of kInvariantPartKeys from position 0 folded in order (attend_in_parts), so a
    // row's result does not depend on how many rows its sequence brought, on the other
    // sequences or on the number of workers. A few decoding sequences still spread their
    // parts over the workers; those parts fold in the same order.
    const bool invariant = batch_invariant() && decode_supported;
    const auto is_decode = [&](const AttentionArgs& a) { return decode_supported && a.n_q <= kDecodeMaxTokens; };
    // Per calling thread and kept between calls, so that a decode step allocates nothing.
    // Used through references: in the workers' lambdas a thread_local name would be the
    // worker's own.
    thread_local std::vector<AttentionArgs> tls_args;
    std::vector<AttentionArgs>& args = tls_args;
    args.clear();
    std::int64_t n_decode = 0;
    for (const AttentionArgs& a : batch) {
        args.push_back(with_default_strides(a, shape));
        n_decode += is_decode(a) ? 1 : 0;
    }
    // Prefill blocks over a bf16 cache take the BF16 dot-product kernel where the CPU has it.
    const bool bf16_blocks =
        uses_avx512_bf16(active_isa()) && cpu::attend_block_bf16_supported(shape);
    const int n_workers = pool == nullptr ? 1 : pool->size();
    const std::int64_t decode_heads = kv_heads_per_decode_task(n_decode, shape.n_kv_heads, n_workers);
    thread_local std::vector<Task> tls_tasks;
    std::vector<Task>& tasks = tls_tasks;
    tasks.clear();
    // Key-split sequences: which parts each combines (first part, count).
    struct SplitSeq {
        std::size_t seq;
        std::size_t first_part, n_parts;
    };
    thread_local std::vector<SplitSeq> tls_split_seqs;
    thread_local std::vector<DecodePartial> tls_parts;
    std::vector<SplitSeq>& split_seqs = tls_split_seqs;
    std::vector<DecodePartial>& parts = tls_parts;
    split_seqs.clear();
    parts.clear();
    std::int64_t part_floats = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const AttentionArgs& a = args[i];
        const std::int64_t n_keys = a.start_pos + a.n_q;
        if (invariant && (!is_decode(a) || n_decode >= 4 * n_workers || n_keys <= kInvariantPartKeys)) {
            // Prompts, and decode batches that keep every worker busy on their own.
            const std::int64_t q_step = is_decode(a) ? a.n_q : kInvariantQueryBlock;
            const std::int64_t heads = is_decode(a) ? decode_heads : 1;
            for (std::int64_t q_begin = 0; q_begin < a.n_q; q_begin += q_step)
                for (std::int64_t h = 0; h < shape.n_kv_heads; h += heads)
                    tasks.push_back({i, Kind::kInParts, {h, h + heads, q_begin, std::min(a.n_q, q_begin + q_step)}});
            continue;
        }
        if (is_decode(a)) {
            const std::int64_t n_parts = invariant         ? (n_keys + kInvariantPartKeys - 1) / kInvariantPartKeys
                                         : pool == nullptr ? 1
                                                           : decode_key_parts(n_decode, n_keys, n_workers);
            if (n_parts > 1) {
                const std::int64_t per_part = (n_keys + n_parts - 1) / n_parts;
                // Whole online-softmax blocks; the fixed parts of the batch-invariant kernels.
                const std::int64_t step = invariant ? kInvariantPartKeys : (per_part + 31) / 32 * 32;
                split_seqs.push_back({i, parts.size(), 0});
                for (std::int64_t k = 0; k < n_keys; k += step) {
                    tasks.push_back({i, Kind::kDecode, {0, shape.n_kv_heads, 0, a.n_q, k, k + step},
                                     static_cast<std::int64_t>(parts.size())});
                    parts.push_back({});
                    part_floats += a.n_q * shape.n_heads * (shape.head_dim + 2);
                    ++split_seqs.back().n_parts;
                }
                continue;
            }
            for (std::int64_t h = 0; h < shape.n_kv_heads; h += decode_heads)
                tasks.push_back({i, Kind::kDecode, {h, h + decode_heads, 0, a.n_q}});
            continue;
        }
        // Query blocks interleaved over KV heads so that early (cheap) and late (expensive)
        // blocks under the causal mask mix.
        const std::int64_t q_block = a.kv_dtype == DType::kBF16 && bf16_blocks
                                         ? bf16_prefill_query_tokens(a.n_q, shape.n_kv_heads, n_workers)
                                         : kQueryBlock;
        for (std::int64_t q_begin = 0; q_begin < a.n_q; q_begin += q_block) {
            const std::int64_t q_end = std::min(a.n_q, q_begin + q_block);
            // Without the decode kernel, batch-invariant rows take the direct per-row sweep.
            const bool direct = batch_invariant() || (q_end - q_begin) * group <= kDirectRowLimit;
            const Kind kind = direct ? Kind::kDirect : Kind::kBlock;
            for (std::int64_t h = 0; h < shape.n_kv_heads; ++h) tasks.push_back({i, kind, {h, h + 1, q_begin, q_end}});
        }
    }
    thread_local AlignedBuffer part_storage;
    if (part_storage.size() < static_cast<std::size_t>(part_floats) * sizeof(float))
        part_storage = AlignedBuffer(static_cast<std::size_t>(part_floats) * sizeof(float));
    {
        float* next_floats = part_storage.as<float>();
        for (const Task& t : tasks) {
            if (t.part < 0) continue;
            const std::int64_t rows = args[t.seq].n_q * shape.n_heads;
            DecodePartial& p = parts[static_cast<std::size_t>(t.part)];
            p.acc = next_floats;
            p.max = p.acc + rows * shape.head_dim;
            p.sum = p.max + rows;
            next_floats = p.sum + rows;
        }
    }
    auto run_task = [&](const Task& t) {
        const AttentionArgs& a = args[t.seq];
        switch (t.kind) {
            case Kind::kDecode:
                attend_decode_rows(a, shape, t.range, t.part < 0 ? nullptr : &parts[static_cast<std::size_t>(t.part)]);
                break;
            case Kind::kInParts: attend_in_parts(a, shape, t.range); break;
            case Kind::kDirect:
                with_kv_type(a.kv_dtype, [&](auto kv) {
                    attend_rows_direct<decltype(kv)::value>(a, shape, t.range.kv_head_begin, t.range.q_begin,
                                                             t.range.q_end);
                });
                break;
            case Kind::kBlock:
                if (a.kv_dtype == DType::kBF16 && bf16_blocks) {
                    thread_local AlignedBuffer scratch;
                    const std::size_t bytes =
                        cpu::attend_block_bf16_scratch_bytes(shape, t.range.q_end - t.range.q_begin);
                    if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
                    cpu::attend_block_bf16_avx512(a, shape, t.range.kv_head_begin, t.range.q_begin, t.range.q_end,
                                                  scratch.data());
                } else {
                    attend_block(a, shape, t.range.kv_head_begin, t.range.q_begin, t.range.q_end);
                }
                break;
        }
    };
    if (pool == nullptr || tasks.size() == 1) {
        for (const Task& t : tasks) run_task(t);
    } else {
        // Tasks differ in cost (sequence lengths, causal blocks): workers take the next one as
        // they finish. Every task writes its own outputs, so results do not depend on who ran it.
        std::atomic<std::size_t> next{0};
        pool->run([&](int, int) {
            for (std::size_t t = next.fetch_add(1); t < tasks.size(); t = next.fetch_add(1)) run_task(tasks[t]);
        });
    }
    for (const SplitSeq& s : split_seqs) {
        const AttentionArgs& a = args[s.seq];
        combine_decode_partials(std::span<const DecodePartial>(parts).subspan(s.first_part, s.n_parts),
                                a.n_q * shape.n_heads, shape.head_dim, a.out);
    }
}

void attention(const AttentionArgs& args, const AttentionShape& shape, ThreadPool* pool) {
    attention_batch(std::span<const AttentionArgs>(&args, 1), shape, pool);
}

void attention_reference(const AttentionArgs& args, const AttentionShape& shape) {
    check_shape(shape);
    const AttentionArgs a = with_default_strides(args, shape);
    const std::int64_t group = shape.n_heads / shape.n_kv_heads;
    const std::int64_t dim = shape.head_dim;
    std::vector<double> scores;
    for (std::int64_t qi = 0; qi < a.n_q; ++qi) {
        const std::int64_t n_keys = a.start_pos + qi + 1;
        scores.assign(static_cast<std::size_t>(n_keys), 0.0);
        for (std::int64_t h = 0; h < shape.n_heads; ++h) {
            const std::int64_t kvh = h / group;
            const float* q = a.q + qi * a.q_stride + h * dim;
            double max_score = -std::numeric_limits<double>::infinity();
            for (std::int64_t j = 0; j < n_keys; ++j) {
                const std::int64_t row = a.kv_slots == nullptr ? j : a.kv_slots[j];
                const void* k = kv_row(a.k, row, a.kv_stride, kvh, dim, a.kv_dtype);
                double sdot = 0.0;
                for (std::int64_t d = 0; d < dim; ++d) sdot += static_cast<double>(q[d]) * kv_value(k, d, a.kv_dtype);
                scores[j] = sdot * shape.scale;
                max_score = std::max(max_score, scores[j]);
            }
            double total = 0.0;
            for (auto& sc : scores) {
                sc = std::exp(sc - max_score);
                total += sc;
            }
            float* out = a.out + (qi * shape.n_heads + h) * dim;
            for (std::int64_t d = 0; d < dim; ++d) {
                double o = 0.0;
                for (std::int64_t j = 0; j < n_keys; ++j) {
                    const std::int64_t row = a.kv_slots == nullptr ? j : a.kv_slots[j];
                    o += scores[j] * kv_value(kv_row(a.v, row, a.kv_stride, kvh, dim, a.kv_dtype), d, a.kv_dtype);
                }
                out[d] = static_cast<float>(o / total);
            }
        }
    }
}

}  // namespace tessera::kernels
