#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"

namespace tessera::kernels {

namespace {

constexpr std::int64_t kKeyBlock = 64;    // keys per online-softmax step
constexpr std::int64_t kQueryBlock = 8;   // query tokens sharing one pass over a key block
constexpr std::int64_t kMaxHeadDim = 512;

// exp(x) for x <= 0 (softmax arguments after subtracting the max), 8 lanes at a time:
// 2^(x·log2 e) split into an integer power and a degree-6 polynomial on [-0.5, 0.5];
// relative error ~2e-7. Very negative inputs flush to 0.
inline __m256 exp_nonpositive(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 t = _mm256_mul_ps(x, log2e);
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);  // in [-0.5, 0.5]
    // 2^f = e^(f·ln2), Taylor coefficients of e^y with y = f·ln2 folded in.
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

inline float dot(const float* a, const float* b, std::int64_t n) {
    __m256 s0 = _mm256_setzero_ps();
    __m256 s1 = _mm256_setzero_ps();
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// acc[d] = acc[d] * scale + sum_j p[j] · v_j[d]
inline void scale_and_accumulate(float* acc, float scale, const float* p, const float* v,
                                 std::int64_t n_keys, std::int64_t kv_stride, std::int64_t dim) {
    for (std::int64_t d = 0; d < dim; ++d) acc[d] *= scale;
    for (std::int64_t j = 0; j < n_keys; ++j) {
        const float pj = p[j];
        if (pj == 0.0f) continue;
        const float* vj = v + j * kv_stride;
        for (std::int64_t d = 0; d < dim; ++d) acc[d] += pj * vj[d];
    }
}

// One (kv head, block of query tokens): every query head of the group, every token of the
// block, swept once over the keys in blocks of kKeyBlock.
void attend_block(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head,
                  std::int64_t q_begin, std::int64_t q_end) {
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    const std::int64_t n_rows = (q_end - q_begin) * group;
    const std::int64_t last_key = a.start_pos + q_end - 1;  // inclusive, for the last query

    float row_max[kQueryBlock * 64];
    float row_sum[kQueryBlock * 64];
    std::vector<float> accum(static_cast<std::size_t>(n_rows * dim), 0.0f);
    alignas(32) float p[kKeyBlock];
    std::fill(row_max, row_max + n_rows, -std::numeric_limits<float>::infinity());
    std::fill(row_sum, row_sum + n_rows, 0.0f);

    const float* k_head = a.k + kv_head * dim;
    const float* v_head = a.v + kv_head * dim;
    for (std::int64_t kb = 0; kb <= last_key; kb += kKeyBlock) {
        for (std::int64_t qi = q_begin; qi < q_end; ++qi) {
            const std::int64_t q_pos = a.start_pos + qi;
            if (kb > q_pos) continue;  // the whole key block is in this query's future
            const std::int64_t n_keys = std::min(kKeyBlock, q_pos + 1 - kb);
            for (std::int64_t g = 0; g < group; ++g) {
                const std::int64_t head = kv_head * group + g;
                const std::int64_t row = (qi - q_begin) * group + g;
                const float* q = a.q + qi * a.q_stride + head * dim;
                float block_max = -std::numeric_limits<float>::infinity();
                for (std::int64_t j = 0; j < n_keys; ++j) {
                    p[j] = dot(q, k_head + (kb + j) * a.kv_stride, dim) * s.scale;
                    block_max = std::max(block_max, p[j]);
                }
                const float new_max = std::max(row_max[row], block_max);
                const __m256 vmax = _mm256_set1_ps(new_max);
                std::int64_t j = 0;
                __m256 vsum = _mm256_setzero_ps();
                for (; j + 8 <= n_keys; j += 8) {
                    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(p + j), vmax));
                    _mm256_storeu_ps(p + j, e);
                    vsum = _mm256_add_ps(vsum, e);
                }
                float block_sum = hsum(vsum);
                for (; j < n_keys; ++j) {
                    p[j] = std::exp(p[j] - new_max);
                    block_sum += p[j];
                }
                const float correction = std::exp(row_max[row] - new_max);  // 0 on the first block
                row_sum[row] = row_sum[row] * correction + block_sum;
                row_max[row] = new_max;
                scale_and_accumulate(accum.data() + row * dim, correction, p,
                                     v_head + kb * a.kv_stride, n_keys, a.kv_stride, dim);
            }
        }
    }
    for (std::int64_t qi = q_begin; qi < q_end; ++qi) {
        for (std::int64_t g = 0; g < group; ++g) {
            const std::int64_t head = kv_head * group + g;
            const std::int64_t row = (qi - q_begin) * group + g;
            float* out = a.out + (qi * s.n_heads + head) * dim;
            const float inv = 1.0f / row_sum[row];
            for (std::int64_t d = 0; d < dim; ++d) out[d] = accum[row * dim + d] * inv;
        }
    }
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

}  // namespace

void attention(const AttentionArgs& args, const AttentionShape& shape, ThreadPool* pool) {
    check_shape(shape);
    const AttentionArgs a = with_default_strides(args, shape);
    const std::int64_t n_qblocks = (a.n_q + kQueryBlock - 1) / kQueryBlock;
    const std::int64_t n_tasks = shape.n_kv_heads * n_qblocks;
    auto run_tasks = [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = begin; t < end; ++t) {
            // Interleave query blocks so that each worker gets early (cheap) and late
            // (expensive) blocks under the causal mask.
            const std::int64_t kv_head = t % shape.n_kv_heads;
            const std::int64_t qb = t / shape.n_kv_heads;
            const std::int64_t q_begin = qb * kQueryBlock;
            attend_block(a, shape, kv_head, q_begin, std::min(a.n_q, q_begin + kQueryBlock));
        }
    };
    if (pool == nullptr || n_tasks == 1) {
        run_tasks(0, n_tasks);
        return;
    }
    pool->run([&](int worker, int n_workers) {
        for (std::int64_t t = worker; t < n_tasks; t += n_workers) run_tasks(t, t + 1);
    });
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
                const float* k = a.k + j * a.kv_stride + kvh * dim;
                double sdot = 0.0;
                for (std::int64_t d = 0; d < dim; ++d) sdot += static_cast<double>(q[d]) * k[d];
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
                for (std::int64_t j = 0; j < n_keys; ++j)
                    o += scores[j] * a.v[j * a.kv_stride + kvh * dim + d];
                out[d] = static_cast<float>(o / total);
            }
        }
    }
}

}  // namespace tessera::kernels
