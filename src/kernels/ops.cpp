#include "kernels/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/simd_exp.h"

namespace tessera::kernels {

namespace {
void rms_norm_rows(const float* x, const float* weight, float* y, std::int64_t begin,
                   std::int64_t end, std::int64_t dim, float eps) {
    for (std::int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * dim;
        float* yr = y + r * dim;
        const float inv = rms_inverse(xr, dim, eps);
        for (std::int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * inv * weight[j];
    }
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace

// silu(g) · u over a row, 8 lanes at a time. exp(-g) is clamped at e^88 (finite), where
// g / (1 + e^88) is already -0 in f32.
void silu_and_mul_row(const float* g, const float* u, float* o, std::int64_t dim) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 max_arg = _mm256_set1_ps(88.0f);
    std::int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp_avx2(
            _mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), max_arg));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < dim; ++i) o[i] = silu(g[i]) * u[i];
}

float rms_inverse(const float* x, std::int64_t dim, float eps) {
    // Eight partial sums let the compiler vectorise without reassociating one chain.
    float partial[8] = {};
    std::int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; ++l) partial[l] += x[i + l] * x[i + l];
    float sum = 0.0f;
    for (float p : partial) sum += p;
    for (; i < dim; ++i) sum += x[i] * x[i];
    return 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
}

void l2_normalize(float* x, std::int64_t dim) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) sum += static_cast<double>(x[i]) * x[i];
    const double scale = 1.0 / std::max(std::sqrt(sum), 1e-12);
    for (std::int64_t i = 0; i < dim; ++i) x[i] = static_cast<float>(x[i] * scale);
}

void rms_norm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
              float eps, ThreadPool* pool) {
    if (pool == nullptr || rows < 8) {
        rms_norm_rows(x, weight, y, 0, rows, dim, eps);
        return;
    }
    pool->parallel_for(rows, [&](std::int64_t b, std::int64_t e) {
        rms_norm_rows(x, weight, y, b, e, dim, eps);
    });
}

void store_kv_row(const float* src, void* base, std::int64_t offset, std::int64_t n, DType type, float fp8_scale) {
    switch (type) {
        case DType::kBF16: {
            auto* dst = static_cast<std::uint16_t*>(base) + offset;
            for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
            return;
        }
        case DType::kF8E4M3:
        case DType::kF8E5M2: {
            auto* dst = static_cast<std::uint8_t*>(base) + offset;
            if (fp8_scale == 1.0f) {
                for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp8(src[i], type);
            } else {
                const float inverse = 1.0f / fp8_scale;
                for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp8(src[i] * inverse, type);
            }
            return;
        }
        case DType::kF16: {
            auto* dst = static_cast<std::uint16_t*>(base) + offset;
            for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
            return;
        }
        case DType::kF32:
            std::memcpy(static_cast<float*>(base) + offset, src, static_cast<std::size_t>(n) * sizeof(float));
            return;
    }
}

// Elements below which add_inplace stays on the calling thread: a decode batch's residual
// (16 rows of 1024) costs less than waking the workers.
constexpr std::int64_t kParallelAddElements = std::int64_t{1} << 16;

void add_inplace(float* x, const float* residual, std::int64_t n, ThreadPool* pool) {
    const auto add = [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) x[i] += residual[i];
    };
    if (pool == nullptr || n < kParallelAddElements) {
        add(0, n);
        return;
    }
    pool->parallel_for(n, add);
}

void add_rms_norm(float* x, const float* residual, const float* weight, float* y, std::int64_t rows,
                  std::int64_t dim, float eps, ThreadPool* pool) {
    const auto rows_of = [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
            float* xr = x + r * dim;
            const float* rr = residual + r * dim;
            for (std::int64_t i = 0; i < dim; ++i) xr[i] += rr[i];
            rms_norm_rows(x, weight, y, r, r + 1, dim, eps);
        }
    };
    if (pool == nullptr || rows < 8) {
        rows_of(0, rows);
        return;
    }
    pool->parallel_for(rows, rows_of);
}

void rope_angles(const std::int32_t* positions, std::int64_t n_tokens, const float* inv_freq, std::int64_t half,
                 float* cos, float* sin) {
    for (std::int64_t t = 0; t < n_tokens; ++t) {
        const float pos = static_cast<float>(positions[t]);
        for (std::int64_t i = 0; i < half; ++i) {
            // The angle is rounded to f32 first, as the reference implementations do.
            const float angle = pos * inv_freq[i];
            cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
            sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
        }
    }
}

void rope_rotate(float* x, std::int64_t n_heads, std::int64_t head_dim, const float* cos, const float* sin,
                 bool neox) {
    const std::int64_t half = head_dim / 2;
    for (std::int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (std::int64_t i = 0; i < half; ++i) {
            const std::int64_t a = neox ? i : 2 * i;
            const std::int64_t b = neox ? i + half : 2 * i + 1;
            const float x0 = v[a];
            const float x1 = v[b];
            v[a] = x0 * cos[i] - x1 * sin[i];
            v[b] = x1 * cos[i] + x0 * sin[i];
        }
    }
}

void rope(float* x, std::int64_t n_tokens, std::int64_t n_heads, std::int64_t head_dim,
          const std::int32_t* positions, const float* inv_freq, bool neox,
          std::int64_t token_stride) {
    const std::int64_t half = head_dim / 2;
    if (token_stride == 0) token_stride = n_heads * head_dim;
    TSR_CHECK_LE(half, 512) << "head_dim above 1024 is not supported by rope()";
    float cos_t[512];
    float sin_t[512];
    for (std::int64_t t = 0; t < n_tokens; ++t) {
        rope_angles(positions + t, 1, inv_freq, half, cos_t, sin_t);
        rope_rotate(x + t * token_stride, n_heads, head_dim, cos_t, sin_t, neox);
    }
}

void silu_and_mul(const float* gate_up, float* out, std::int64_t rows, std::int64_t dim,
                  ThreadPool* pool) {
    auto body = [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
            const float* g = gate_up + r * 2 * dim;
            const float* u = g + dim;
            float* o = out + r * dim;
            silu_and_mul_row(g, u, o, dim);
        }
    };
    if (pool == nullptr || rows < 8) {
        body(0, rows);
    } else {
        pool->parallel_for(rows, body);
    }
}

void embedding_lookup(const void* table, DType table_type, const std::int32_t* ids, std::int64_t n,
                      std::int64_t dim, float* out) {
    const auto* bytes = static_cast<const unsigned char*>(table);
    const std::size_t row_bytes = static_cast<std::size_t>(dim) * dtype_size(table_type);
    for (std::int64_t i = 0; i < n; ++i) {
        convert_to_f32(bytes + static_cast<std::size_t>(ids[i]) * row_bytes, table_type,
                       out + i * dim, static_cast<std::size_t>(dim));
    }
}

}  // namespace tessera::kernels
