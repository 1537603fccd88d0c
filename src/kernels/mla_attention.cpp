#include "kernels/mla_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kernels/cpu/mla_attention_avx512.h"
#include "kernels/simd_exp.h"
#include "tensor/dtype.h"

namespace tessera::kernels {

namespace {

// Running softmax state of one head: max score, sum of exp, weighted value sum.
struct Online {
    float max = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
};

// Keys per split of one query's context in the absorbed form: enough work per task that
// merging stays cheap.
constexpr std::int64_t kMinKeysPerSplit = 256;
// Splits per thread for one long context, so that the threads finish together.
constexpr std::int64_t kSplitsPerThread = 4;
// Keys scored together: their f32 rows (32 x 576 floats = 72 KiB at DeepSeek's sizes) stay
// in L2 while every head reads them twice (scores, then the weighted latent sum).
constexpr std::int64_t kKeyBlock = 32;

inline float dot(const float* a, const float* b, std::int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_hadd_ps(h, h);
    h = _mm_hadd_ps(h, h);
    float total = _mm_cvtss_f32(h);
    for (; i < n; ++i) total += a[i] * b[i];
    return total;
}

// out[k] = a · rows[k] for the 4 rows `stride` floats apart: a's loads serve four rows.
inline void dot4(const float* a, const float* rows, std::int64_t stride, std::int64_t n, float* out) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(a + i);
        s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(rows + i), s0);
        s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(rows + stride + i), s1);
        s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(rows + 2 * stride + i), s2);
        s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(rows + 3 * stride + i), s3);
    }
    // Horizontal sums of the four accumulators at once.
    const __m256 s01 = _mm256_hadd_ps(s0, s1), s23 = _mm256_hadd_ps(s2, s3);
    const __m256 s0123 = _mm256_hadd_ps(s01, s23);
    const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(s0123), _mm256_extractf128_ps(s0123, 1));
    _mm_storeu_ps(out, sum);
    for (; i < n; ++i)
        for (int k = 0; k < 4; ++k) out[k] += a[i] * rows[k * stride + i];
}

// y[i] = y[i] * keep + Σ_b w[b] · rows[b][i] over nb rows `stride` floats apart: each chunk of
// y stays in a register across the rows.
inline void weighted_rows(float* y, float keep, const float* w, const float* rows, std::int64_t stride,
                          std::int64_t nb, std::int64_t n) {
    const __m256 k = _mm256_set1_ps(keep);
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_mul_ps(k, _mm256_loadu_ps(y + i)), v1 = _mm256_mul_ps(k, _mm256_loadu_ps(y + i + 8));
        for (std::int64_t b = 0; b < nb; ++b) {
            const __m256 wb = _mm256_set1_ps(w[b]);
            v0 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(rows + b * stride + i), v0);
            v1 = _mm256_fmadd_ps(wb, _mm256_loadu_ps(rows + b * stride + i + 8), v1);
        }
        _mm256_storeu_ps(y + i, v0);
        _mm256_storeu_ps(y + i + 8, v1);
    }
    for (; i < n; ++i) {
        float v = y[i] * keep;
        for (std::int64_t b = 0; b < nb; ++b) v += w[b] * rows[b * stride + i];
        y[i] = v;
    }
}

// Rows [n, width] of the cache, widened to f32.
void load_rows(const MlaAbsorbedArgs& a, std::int64_t first_pos, std::int64_t n, std::int64_t width, float* out) {
    for (std::int64_t b = 0; b < n; ++b) {
        const std::int64_t pos = first_pos + b;
        const std::int64_t slot = a.slots != nullptr ? a.slots[pos] : pos;
        float* dst = out + b * width;
        if (is_fp8(a.cache_dtype)) {
            convert_to_f32(static_cast<const std::uint8_t*>(a.cache) + slot * width, a.cache_dtype, dst,
                           static_cast<std::size_t>(width));
        } else if (a.cache_dtype == DType::kBF16) {
            const auto* src = static_cast<const std::uint16_t*>(a.cache) + slot * width;
            std::int64_t i = 0;
            for (; i + 8 <= width; i += 8) {
                const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
                _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
            }
            for (; i < width; ++i) dst[i] = bf16_to_f32(src[i]);
        } else {
            const float* src = static_cast<const float*>(a.cache) + slot * width;
            std::copy(src, src + width, dst);
        }
    }
}

struct Split {
    std::int64_t run, token, key_begin, key_end;
};

}  // namespace

void mla_attention_absorbed(std::span<const MlaAbsorbedArgs> runs, const MlaShape& s, ThreadPool* pool, Isa isa) {
    const std::int64_t width = s.latent + s.rope;
    bool avx512 = uses_avx512_bf16(isa) && !runs.empty();
    for (const auto& r : runs) avx512 = avx512 && cpu::mla_avx512_supported(r.cache_dtype, width, s.latent);
    const int threads = pool != nullptr ? pool->size() : 1;
    // Kept between calls (per calling thread) so that a decode step allocates nothing; used
    // through references, since in the workers' lambda a thread_local name is the worker's.
    thread_local std::vector<Split> tls_splits;
    thread_local std::vector<float> tls_partial;
    std::vector<Split>& splits = tls_splits;
    std::vector<float>& partial = tls_partial;
    splits.clear();
    for (std::size_t r = 0; r < runs.size(); ++r) {
        for (std::int64_t t = 0; t < runs[r].n_q; ++t) {
            const std::int64_t keys = runs[r].start_pos + t + 1;
            const std::int64_t parts = std::clamp<std::int64_t>(keys / kMinKeysPerSplit, 1, kSplitsPerThread * threads);
            for (std::int64_t p = 0; p < parts; ++p)
                splits.push_back({static_cast<std::int64_t>(r), t, keys * p / parts, keys * (p + 1) / parts});
        }
    }
    // Per split and head: max, sum, then the latent accumulator. A prompt in this form (the
    // batch-invariant kernels take it for prompts too) or a large decode batch would hold
    // hundreds of megabytes of that at once, so the splits go through in windows of whole tokens, each
    // merged before the next; a token's result does not depend on its window.
    const std::int64_t state = 2 + s.latent;
    const auto window_splits =
        static_cast<std::size_t>(std::max<std::int64_t>(1, s.max_state_floats / (s.n_heads * state)));
    partial.resize(std::min(splits.size(), window_splits) * static_cast<std::size_t>(s.n_heads * state));
    std::size_t window_begin = 0;  // the first split of the window `partial` holds
    // The generic path's buffers, one set per worker, sized here on the calling thread: a
    // worker that first takes a split in some later step then allocates nothing either.
    struct GenericScratch {
        std::vector<float> rows, probs, keeps, acc;
        std::vector<Online> online;
    };
    thread_local std::vector<GenericScratch> tls_generic;
    std::vector<GenericScratch>& generic = tls_generic;
    if (!avx512) {
        if (generic.size() < static_cast<std::size_t>(threads)) generic.resize(static_cast<std::size_t>(threads));
        for (GenericScratch& g : generic) {
            g.rows.resize(static_cast<std::size_t>(kKeyBlock * width));
            g.probs.resize(static_cast<std::size_t>(s.n_heads * kKeyBlock));
            g.keeps.resize(static_cast<std::size_t>(s.n_heads));
            g.online.resize(static_cast<std::size_t>(s.n_heads));
            g.acc.resize(static_cast<std::size_t>(s.n_heads * s.latent));
        }
    }
    const auto work = [&](std::int64_t begin, std::int64_t end, int worker) {
        const auto window = static_cast<std::int64_t>(window_begin);
        if (avx512) {
            thread_local AlignedBuffer scratch;  // kept: this runs once per layer and step
            if (const std::size_t bytes = cpu::mla_split_bf16_scratch_bytes(s.latent); scratch.size() < bytes)
                scratch = AlignedBuffer(bytes);
            for (std::int64_t i = begin; i < end; ++i) {
                const Split& sp = splits[i];
                const MlaAbsorbedArgs& a = runs[sp.run];
                for (std::int64_t h = 0; h < s.n_heads; h += 16) {
                    cpu::MlaSplitBf16 args;
                    args.q = a.q + (sp.token * s.n_heads + h) * width;
                    args.n_heads = static_cast<int>(std::min<std::int64_t>(16, s.n_heads - h));
                    args.cache = a.cache;
                    args.cache_dtype = a.cache_dtype;
                    args.slots = a.slots;
                    args.key_begin = sp.key_begin;
                    args.key_end = sp.key_end;
                    args.state = partial.data() + ((i - window) * s.n_heads + h) * state;
                    args.state_stride = state;
                    cpu::mla_split_bf16(args, s.latent, s.rope, s.scale, scratch.data());
                }
            }
            return;
        }
        GenericScratch& g = generic[static_cast<std::size_t>(worker)];
        std::vector<float>& rows = g.rows;
        std::vector<float>& probs = g.probs;
        std::vector<float>& keeps = g.keeps;
        std::vector<float>& acc = g.acc;
        std::vector<Online>& online = g.online;
        for (std::int64_t i = begin; i < end; ++i) {
            const Split& sp = splits[i];
            const MlaAbsorbedArgs& a = runs[sp.run];
            const float* q = a.q + sp.token * s.n_heads * width;
            std::fill(online.begin(), online.end(), Online{});
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (std::int64_t block = sp.key_begin; block < sp.key_end; block += kKeyBlock) {
                const std::int64_t nb = std::min(kKeyBlock, sp.key_end - block);
                load_rows(a, block, nb, width, rows.data());
                // Scores and softmax weights of every head for this block, then the weighted
                // latent sums.
                for (std::int64_t h = 0; h < s.n_heads; ++h) {
                    const float* qh = q + h * width;
                    float* p = probs.data() + h * kKeyBlock;
                    std::int64_t b = 0;
                    for (; b + 4 <= nb; b += 4) dot4(qh, rows.data() + b * width, width, width, p + b);
                    for (; b < nb; ++b) p[b] = dot(qh, rows.data() + b * width, width);
                    float block_max = -std::numeric_limits<float>::infinity();
                    for (b = 0; b < nb; ++b) block_max = std::max(block_max, p[b] *= s.scale);
                    Online& o = online[h];
                    const float new_max = std::max(o.max, block_max);
                    keeps[h] = std::exp(o.max - new_max);  // 0 before the first block
                    b = 0;
                    const __m256 m = _mm256_set1_ps(new_max);
                    for (; b + 8 <= nb; b += 8)
                        _mm256_storeu_ps(p + b, exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(p + b), m)));
                    for (; b < nb; ++b) p[b] = std::exp(p[b] - new_max);
                    float block_sum = 0.0f;
                    for (b = 0; b < nb; ++b) block_sum += p[b];
                    o.sum = o.sum * keeps[h] + block_sum;
                    o.max = new_max;
                }
                for (std::int64_t h = 0; h < s.n_heads; ++h)
                    weighted_rows(acc.data() + h * s.latent, keeps[h], probs.data() + h * kKeyBlock, rows.data(),
                                  width, nb, s.latent);
            }
            float* dst = partial.data() + (i - window) * s.n_heads * state;
            for (std::int64_t h = 0; h < s.n_heads; ++h) {
                dst[h * state] = online[h].max;
                dst[h * state + 1] = online[h].sum;
                std::copy(acc.begin() + h * s.latent, acc.begin() + (h + 1) * s.latent, dst + h * state + 2);
            }
        }
    };
    // Computes splits [window_begin, window_end) into `partial`, then merges each of their
    // tokens' splits (in order) and normalises.
    const auto run_window = [&](std::size_t window_end) {
        const auto first_split = static_cast<std::int64_t>(window_begin);
        const auto n_splits = static_cast<std::int64_t>(window_end) - first_split;
        if (pool != nullptr && n_splits > 1) {
            // Handed out one at a time: a worker that starts late or reads slower memory takes
            // fewer.
            std::atomic<std::int64_t> next{0};
            pool->run([&](int worker, int) {
                for (std::int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_splits;)
                    work(first_split + i, first_split + i + 1, worker);
            });
        } else {
            work(first_split, first_split + n_splits, 0);
        }
        for (std::size_t i = window_begin; i < window_end;) {
            const Split& first = splits[i];
            std::size_t j = i;
            while (j < window_end && splits[j].run == first.run && splits[j].token == first.token) ++j;
            const MlaAbsorbedArgs& a = runs[first.run];
            for (std::int64_t h = 0; h < s.n_heads; ++h) {
                const auto state_of = [&](std::size_t k) {
                    return partial.data() + ((k - window_begin) * s.n_heads + h) * state;
                };
                float max = -std::numeric_limits<float>::infinity();
                for (std::size_t k = i; k < j; ++k) max = std::max(max, state_of(k)[0]);
                float* out = a.out + (first.token * s.n_heads + h) * s.latent;
                std::fill(out, out + s.latent, 0.0f);
                float sum = 0.0f;
                for (std::size_t k = i; k < j; ++k) {
                    const float* p = state_of(k);
                    if (p[1] == 0.0f) continue;  // an empty split
                    const float w = std::exp(p[0] - max);
                    sum += w * p[1];
                    for (std::int64_t d = 0; d < s.latent; ++d) out[d] += w * p[2 + d];
                }
                const float inv = 1.0f / sum;
                for (std::int64_t d = 0; d < s.latent; ++d) out[d] *= inv;
            }
            i = j;
        }
    };
    while (window_begin < splits.size()) {
        // Whole tokens, at least one, up to window_splits splits.
        std::size_t window_end = window_begin;
        while (window_end < splits.size()) {
            std::size_t token_end = window_end;
            while (token_end < splits.size() && splits[token_end].run == splits[window_end].run &&
                   splits[token_end].token == splits[window_end].token)
                ++token_end;
            if (window_end > window_begin && token_end - window_begin > window_splits) break;
            window_end = token_end;
        }
        run_window(window_end);
        window_begin = window_end;
    }
}

}  // namespace tessera::kernels
