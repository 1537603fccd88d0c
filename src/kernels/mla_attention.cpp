#include "kernels/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace tessera::kernels {

namespace {

// Running softmax state of one head: max score, sum of exp, weighted value sum.
struct Online {
    float max = -std::numeric_limits<float>::infinity();
    float sum = 0.0f;
};

// Adds value `v` [dim] with score `s` to (state, acc).
inline void online_add(Online& o, float* acc, const float* v, std::int64_t dim, float s) {
    if (s > o.max) {
        const float rescale = std::exp(o.max - s);  // 0 on the first key
        for (std::int64_t i = 0; i < dim; ++i) acc[i] = acc[i] * rescale + v[i];
        o.sum = o.sum * rescale + 1.0f;
        o.max = s;
    } else {
        const float w = std::exp(s - o.max);
        for (std::int64_t i = 0; i < dim; ++i) acc[i] += w * v[i];
        o.sum += w;
    }
}

// Keys per split of one query's context in the absorbed form: enough work per task that
// merging stays cheap.
constexpr std::int64_t kMinKeysPerSplit = 256;

struct Split {
    std::int64_t run, token, key_begin, key_end;
};

}  // namespace

void mla_attention_absorbed(std::span<const MlaAbsorbedArgs> runs, const MlaShape& s, ThreadPool* pool) {
    const std::int64_t width = s.latent + s.rope;
    const int threads = pool != nullptr ? pool->size() : 1;
    std::vector<Split> splits;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        for (std::int64_t t = 0; t < runs[r].n_q; ++t) {
            const std::int64_t keys = runs[r].start_pos + t + 1;
            const std::int64_t parts = std::clamp<std::int64_t>(keys / kMinKeysPerSplit, 1, threads);
            for (std::int64_t p = 0; p < parts; ++p)
                splits.push_back({static_cast<std::int64_t>(r), t, keys * p / parts, keys * (p + 1) / parts});
        }
    }
    // Per split and head: max, sum, then the latent accumulator.
    const std::int64_t state = 2 + s.latent;
    std::vector<float> partial(splits.size() * static_cast<std::size_t>(s.n_heads * state));
    const auto work = [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> row(static_cast<std::size_t>(width));
        std::vector<Online> online(static_cast<std::size_t>(s.n_heads));
        std::vector<float> acc(static_cast<std::size_t>(s.n_heads * s.latent));
        for (std::int64_t i = begin; i < end; ++i) {
            const Split& sp = splits[i];
            const MlaAbsorbedArgs& a = runs[sp.run];
            const float* q = a.q + sp.token * s.n_heads * width;
            std::fill(online.begin(), online.end(), Online{});
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (std::int64_t pos = sp.key_begin; pos < sp.key_end; ++pos) {
                const std::int64_t slot = a.slots != nullptr ? a.slots[pos] : pos;
                if (a.cache_bf16) {
                    const auto* src = static_cast<const std::uint16_t*>(a.cache) + slot * width;
                    for (std::int64_t j = 0; j < width; ++j) row[j] = bf16_to_f32(src[j]);
                } else {
                    const float* src = static_cast<const float*>(a.cache) + slot * width;
                    std::copy(src, src + width, row.begin());
                }
                for (std::int64_t h = 0; h < s.n_heads; ++h) {
                    const float* qh = q + h * width;
                    float dot = 0.0f;
                    for (std::int64_t j = 0; j < width; ++j) dot += qh[j] * row[j];
                    online_add(online[h], acc.data() + h * s.latent, row.data(), s.latent, dot * s.scale);
                }
            }
            float* dst = partial.data() + i * s.n_heads * state;
            for (std::int64_t h = 0; h < s.n_heads; ++h) {
                dst[h * state] = online[h].max;
                dst[h * state + 1] = online[h].sum;
                std::copy(acc.begin() + h * s.latent, acc.begin() + (h + 1) * s.latent, dst + h * state + 2);
            }
        }
    };
    const auto n_splits = static_cast<std::int64_t>(splits.size());
    if (pool != nullptr && n_splits > 1) {
        pool->parallel_for(n_splits, work);
    } else {
        work(0, n_splits);
    }
    // Merge the splits of each query token (in order) and normalise.
    for (std::size_t i = 0; i < splits.size();) {
        const Split& first = splits[i];
        std::size_t j = i;
        while (j < splits.size() && splits[j].run == first.run && splits[j].token == first.token) ++j;
        const MlaAbsorbedArgs& a = runs[first.run];
        for (std::int64_t h = 0; h < s.n_heads; ++h) {
            float max = -std::numeric_limits<float>::infinity();
            for (std::size_t k = i; k < j; ++k) max = std::max(max, partial[(k * s.n_heads + h) * state]);
            float* out = a.out + (first.token * s.n_heads + h) * s.latent;
            std::fill(out, out + s.latent, 0.0f);
            float sum = 0.0f;
            for (std::size_t k = i; k < j; ++k) {
                const float* p = partial.data() + (k * s.n_heads + h) * state;
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
}

void mla_attention_naive(const MlaNaiveArgs& a, const MlaNaiveShape& s, ThreadPool* pool) {
    const std::int64_t q_width = s.nope + s.rope;
    const std::int64_t kv_width = s.nope + s.v_dim;
    const auto work = [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> acc(static_cast<std::size_t>(s.v_dim));
        for (std::int64_t task = begin; task < end; ++task) {
            const std::int64_t t = task / s.n_heads, h = task % s.n_heads;
            const float* q = a.q + (t * s.n_heads + h) * q_width;
            Online online;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (std::int64_t pos = 0; pos <= a.start_pos + t; ++pos) {
                const float* kv = a.kv + (pos * s.n_heads + h) * kv_width;
                const float* k_pe = a.k_pe + pos * s.rope;
                float dot = 0.0f;
                for (std::int64_t j = 0; j < s.nope; ++j) dot += q[j] * kv[j];
                for (std::int64_t j = 0; j < s.rope; ++j) dot += q[s.nope + j] * k_pe[j];
                online_add(online, acc.data(), kv + s.nope, s.v_dim, dot * s.scale);
            }
            float* out = a.out + (t * s.n_heads + h) * s.v_dim;
            for (std::int64_t d = 0; d < s.v_dim; ++d) out[d] = acc[d] / online.sum;
        }
    };
    const std::int64_t tasks = a.n_q * s.n_heads;
    if (pool != nullptr && tasks > 1) {
        pool->parallel_for(tasks, work);
    } else {
        work(0, tasks);
    }
}

}  // namespace tessera::kernels
