// kernels/cpu/attention_avx512.cpp — prefill attention with _mm512_dpbf16_ps: per block of
// 32 keys, S = Q·Kᵀ and O += P·V run on the matmul micro-kernel (gemm_bf16_panels_avx512),
// with the key block packed as two 16-key panels of k pairs and the value block as
// head_dim/16 panels of key pairs. Compiled with TSR_AVX512_FLAGS.
//
// Keep this file free of header-inline helpers that a baseline file could also
// instantiate: the linker may pick this file's AVX-512 copy (see cpu/matmul_avx512.cpp).

#include "kernels/cpu/attention_avx512.h"

#include <immintrin.h>

// GCC 12 reports its own AVX-512 reduction and scalef intrinsics (their undefined pass-through
// operands) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/exp_poly.h"

namespace tessera::kernels::cpu {

namespace {

constexpr std::int64_t kKeys = 32;  // keys per block: two 16-key panels
constexpr std::int64_t kAlign = 64;

std::int64_t round_up(std::int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct Layout {
    std::int64_t rows, dim;
    std::int64_t q16, kt, vp, scores, p16, out, row_max, row_sum, total;  // byte offsets
};

Layout layout_for(const AttentionShape& s, std::int64_t n_tokens) {
    Layout l{};
    l.rows = n_tokens * (s.n_heads / s.n_kv_heads);
    l.dim = s.head_dim;
    std::int64_t at = 0;
    const auto take = [&](std::int64_t bytes) {
        const std::int64_t offset = at;
        at += round_up(bytes);
        return offset;
    };
    l.q16 = take(l.rows * l.dim * 2);                   // bf16 [rows][dim]
    l.kt = take(2 * (l.dim / 2) * 64);                 // 2 panels of [dim/2][16 keys][2]
    l.vp = take((l.dim / 16) * (kKeys / 2) * 64);      // dim/16 panels of [16 key pairs][16][2]
    l.scores = take(l.rows * kKeys * 4);                // f32 [rows][32]
    l.p16 = take(l.rows * kKeys * 2);                   // bf16 [rows][32]
    l.out = take(l.rows * l.dim * 4);                   // f32 [rows][dim]
    l.row_max = take(l.rows * 4);
    l.row_sum = take(l.rows * 4);
    l.total = at;
    return l;
}

// exp(x) for x <= 0, 16 lanes, with the polynomial of kernels/exp_poly.h.
inline __m512 exp_nonpositive512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(exp_poly::kMinArgument));
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(exp_poly::kLog2e));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(exp_poly::kCoefficients[0]);
    for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp_poly::kCoefficients[i]));
    return _mm512_scalef_ps(p, n);
}

inline const std::uint16_t* cache_row(const AttentionArgs& a, std::int64_t position, std::int64_t kv_head,
                                      std::int64_t dim, const void* base) {
    const std::int64_t row = a.kv_slots == nullptr ? position : a.kv_slots[position];
    return static_cast<const std::uint16_t*>(base) + row * a.kv_stride + kv_head * dim;
}

// Key block → two panels of [dim/2][16 keys] 32-bit k pairs (a pair of adjacent head
// dimensions is already one 32-bit element of a cache row). Keys past n are zero.
void pack_keys(const AttentionArgs& a, std::int64_t first_key, std::int64_t n, std::int64_t kv_head,
               std::int64_t dim, std::uint32_t* kt) {
    const std::int64_t pairs = dim / 2;
    for (std::int64_t j = 0; j < kKeys; ++j) {
        std::uint32_t* dst = kt + (j / 16) * pairs * 16 + (j % 16);
        if (j >= n) {
            for (std::int64_t i = 0; i < pairs; ++i) dst[i * 16] = 0;
            continue;
        }
        std::uint32_t row[256];  // dim <= 512
        std::memcpy(row, cache_row(a, first_key + j, kv_head, dim, a.k), static_cast<std::size_t>(dim) * 2);
        for (std::int64_t i = 0; i < pairs; ++i) dst[i * 16] = row[i];
    }
}

// Value block → dim/16 panels of [16 key pairs][16 dims][2 keys]: keys 2m and 2m+1
// interleaved element by element. Keys past n are zero.
void pack_values(const AttentionArgs& a, std::int64_t first_key, std::int64_t n, std::int64_t kv_head,
                 std::int64_t dim, std::uint16_t* vp) {
    alignas(64) static const std::uint16_t kLo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static const std::uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i lo_index = _mm512_load_si512(kLo);
    const __m512i hi_index = _mm512_load_si512(kHi);
    for (std::int64_t m = 0; m < kKeys / 2; ++m) {
        const std::uint16_t* v0 = 2 * m < n ? cache_row(a, first_key + 2 * m, kv_head, dim, a.v) : nullptr;
        const std::uint16_t* v1 = 2 * m + 1 < n ? cache_row(a, first_key + 2 * m + 1, kv_head, dim, a.v) : nullptr;
        for (std::int64_t d = 0; d < dim; d += 32) {
            const __m512i x0 = v0 ? _mm512_loadu_si512(v0 + d) : _mm512_setzero_si512();
            const __m512i x1 = v1 ? _mm512_loadu_si512(v1 + d) : _mm512_setzero_si512();
            _mm512_store_si512(vp + ((d / 16) * (kKeys / 2) + m) * 32, _mm512_permutex2var_epi16(x0, lo_index, x1));
            _mm512_store_si512(vp + ((d / 16 + 1) * (kKeys / 2) + m) * 32, _mm512_permutex2var_epi16(x0, hi_index, x1));
        }
    }
}

}  // namespace

bool attend_block_bf16_supported(const AttentionShape& s) { return s.head_dim % 32 == 0 && s.head_dim <= 512; }

std::size_t attend_block_bf16_scratch_bytes(const AttentionShape& s, std::int64_t n_tokens) {
    return static_cast<std::size_t>(layout_for(s, n_tokens).total);
}

void attend_block_bf16_avx512(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head,
                              std::int64_t q_begin, std::int64_t q_end, void* scratch) {
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t dim = s.head_dim;
    const Layout l = layout_for(s, q_end - q_begin);
    auto* base = static_cast<std::byte*>(scratch);
    auto* q16 = reinterpret_cast<std::uint16_t*>(base + l.q16);
    auto* kt = reinterpret_cast<std::uint32_t*>(base + l.kt);
    auto* vp = reinterpret_cast<std::uint16_t*>(base + l.vp);
    auto* scores = reinterpret_cast<float*>(base + l.scores);
    auto* p16 = reinterpret_cast<std::uint16_t*>(base + l.p16);
    auto* out = reinterpret_cast<float*>(base + l.out);
    auto* row_max = reinterpret_cast<float*>(base + l.row_max);
    auto* row_sum = reinterpret_cast<float*>(base + l.row_sum);

    // Rows are token-major: row = (token - q_begin) · group + g.
    const __m512 scale = _mm512_set1_ps(s.scale);
    for (std::int64_t r = 0; r < l.rows; ++r) {
        const std::int64_t qi = q_begin + r / group;
        const float* q = a.q + qi * a.q_stride + (kv_head * group + r % group) * dim;
        for (std::int64_t d = 0; d < dim; d += 32) {
            const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(q + d), scale);
            const __m512 hi = _mm512_mul_ps(_mm512_loadu_ps(q + d + 16), scale);
            _mm512_storeu_si512(q16 + r * dim + d, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
        row_max[r] = -__builtin_inff();
        row_sum[r] = 0.0f;
    }
    std::memset(out, 0, static_cast<std::size_t>(l.rows * dim) * sizeof(float));

    const std::int64_t first_pos = a.start_pos + q_begin;  // position of the block's first token
    const std::int64_t last_key = a.start_pos + q_end - 1;
    for (std::int64_t kb = 0; kb <= last_key; kb += kKeys) {
        const std::int64_t n = last_key + 1 - kb < kKeys ? last_key + 1 - kb : kKeys;
        // Rows of tokens before this block see none of it: they are a prefix of the rows.
        const std::int64_t first_row = kb > first_pos ? (kb - first_pos) * group : 0;
        const std::int64_t m = l.rows - first_row;
        pack_keys(a, kb, n, kv_head, dim, kt);
        gemm_bf16_panels_avx512(q16 + first_row * dim, dim, m, kt, (dim / 2) * 64, 2, dim / 2,
                                scores + first_row * kKeys, kKeys, kKeys, false);
        for (std::int64_t r = first_row; r < l.rows; ++r) {
            const std::int64_t pos = first_pos + r / group;
            const std::int64_t visible = pos + 1 - kb < n ? pos + 1 - kb : n;  // >= 1 here
            const __mmask16 m0 = visible >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << visible) - 1u);
            const __mmask16 m1 =
                visible >= 32 ? 0xFFFF : visible <= 16 ? 0 : static_cast<__mmask16>((1u << (visible - 16)) - 1u);
            const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
            const __m512 s0 = _mm512_mask_loadu_ps(ninf, m0, scores + r * kKeys);
            const __m512 s1 = _mm512_mask_loadu_ps(ninf, m1, scores + r * kKeys + 16);
            const float block_max = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
            const float new_max = row_max[r] > block_max ? row_max[r] : block_max;
            const __m512 vmax = _mm512_set1_ps(new_max);
            const __m512 e0 = _mm512_maskz_mov_ps(m0, exp_nonpositive512(_mm512_sub_ps(s0, vmax)));
            const __m512 e1 = _mm512_maskz_mov_ps(m1, exp_nonpositive512(_mm512_sub_ps(s1, vmax)));
            const float correction =
                _mm512_cvtss_f32(exp_nonpositive512(_mm512_set1_ps(row_max[r] - new_max)));  // 0 at first
            row_sum[r] = row_sum[r] * correction + _mm512_reduce_add_ps(_mm512_add_ps(e0, e1));
            row_max[r] = new_max;
            _mm512_storeu_si512(p16 + r * kKeys, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
            if (correction != 1.0f) {
                const __m512 c = _mm512_set1_ps(correction);
                float* o = out + r * dim;
                for (std::int64_t d = 0; d < dim; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), c));
            }
        }
        pack_values(a, kb, n, kv_head, dim, vp);
        gemm_bf16_panels_avx512(p16 + first_row * kKeys, kKeys, m, vp, (kKeys / 2) * 64, dim / 16, kKeys / 2,
                                out + first_row * dim, dim, dim, true);
    }
    for (std::int64_t r = 0; r < l.rows; ++r) {
        const std::int64_t qi = q_begin + r / group;
        float* dst = a.out + (qi * s.n_heads + kv_head * group + r % group) * dim;
        const __m512 inv = _mm512_set1_ps(1.0f / row_sum[r]);
        for (std::int64_t d = 0; d < dim; d += 16)
            _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_loadu_ps(out + r * dim + d), inv));
    }
}

}  // namespace tessera::kernels::cpu
