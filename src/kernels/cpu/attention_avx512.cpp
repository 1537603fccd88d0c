// kernels/cpu/attention_avx512.cpp — attention over a bf16 cache with AVX-512. Compiled with
// TSR_AVX512_FLAGS.
// - Prefill with _mm512_dpbf16_ps: per block of 64 keys, S = Q·Kᵀ and O += P·V run on the
//   matmul micro-kernel (gemm_bf16_panels_avx512, or gemm_bf16_panels_amx on Isa::kAmx), with
//   the key block packed as four 16-key panels of k pairs and the value block as head_dim/16
//   panels of key pairs.
// - Decode: f32 dot products of widened cache rows, the value accumulators in registers.
//
// Keep this file free of header-inline helpers that a baseline file could also
// instantiate: the linker may pick this file's AVX-512 copy (see cpu/matmul_avx512.cpp).

#include "kernels/cpu/attention_avx512.h"

#include <immintrin.h>

// GCC 12 reports its own AVX-512 reduction and scalef intrinsics (their undefined pass-through
// operands) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>
#include <limits>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/exp_avx512.h"

namespace tessera::kernels::cpu {

namespace {

constexpr std::int64_t kKeys = 64;  // keys per block: four 16-key panels
constexpr int kKeyVectors = static_cast<int>(kKeys / 16);
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
    l.kt = take((kKeys / 16) * (l.dim / 2) * 64);      // kKeys/16 panels of [dim/2][16 keys][2]
    l.vp = take((l.dim / 16) * (kKeys / 2) * 64);      // dim/16 panels of [16 key pairs][16][2]
    l.scores = take(l.rows * kKeys * 4);                // f32 [rows][kKeys]
    l.p16 = take(l.rows * kKeys * 2);                   // bf16 [rows][kKeys]
    l.out = take(l.rows * l.dim * 4);                   // f32 [rows][dim]
    l.row_max = take(l.rows * 4);
    l.row_sum = take(l.rows * 4);
    l.total = at;
    return l;
}

inline const std::uint16_t* cache_row(const AttentionArgs& a, std::int64_t position, std::int64_t kv_head,
                                      std::int64_t dim, const void* base) {
    const std::int64_t row = a.kv_slots == nullptr ? position : a.kv_slots[position];
    return static_cast<const std::uint16_t*>(base) + row * a.kv_stride + kv_head * dim;
}

// Key block → kKeys/16 panels of [dim/2][16 keys] 32-bit k pairs (a pair of adjacent head
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
    const auto gemm = active_isa() == Isa::kAmx ? &gemm_bf16_panels_amx : &gemm_bf16_panels_avx512;
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
        gemm(q16 + first_row * dim, dim, m, kt, (dim / 2) * 64, kKeys / 16, dim / 2, scores + first_row * kKeys,
             kKeys, kKeys, false);
        for (std::int64_t r = first_row; r < l.rows; ++r) {
            const std::int64_t pos = first_pos + r / group;
            const std::int64_t visible = pos + 1 - kb < n ? pos + 1 - kb : n;  // >= 1 here
            const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
            __mmask16 mask[kKeyVectors];
            __m512 sv[kKeyVectors];
            __m512 vmax_block = ninf;
            for (int j = 0; j < kKeyVectors; ++j) {
                const std::int64_t lanes = visible - 16 * j;
                mask[j] = lanes >= 16 ? static_cast<__mmask16>(0xFFFF)
                                      : lanes <= 0 ? static_cast<__mmask16>(0)
                                                   : static_cast<__mmask16>((1u << lanes) - 1u);
                sv[j] = _mm512_mask_loadu_ps(ninf, mask[j], scores + r * kKeys + 16 * j);
                vmax_block = _mm512_max_ps(vmax_block, sv[j]);
            }
            const float block_max = _mm512_reduce_max_ps(vmax_block);
            const float new_max = row_max[r] > block_max ? row_max[r] : block_max;
            const __m512 vmax = _mm512_set1_ps(new_max);
            __m512 vsum = _mm512_setzero_ps();
            for (int j = 0; j < kKeyVectors; j += 2) {
                const __m512 e0 = _mm512_maskz_mov_ps(mask[j], exp_nonpositive512(_mm512_sub_ps(sv[j], vmax)));
                const __m512 e1 = _mm512_maskz_mov_ps(mask[j + 1], exp_nonpositive512(_mm512_sub_ps(sv[j + 1], vmax)));
                vsum = _mm512_add_ps(vsum, _mm512_add_ps(e0, e1));
                _mm512_storeu_si512(p16 + r * kKeys + 16 * j, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
            }
            const float correction =
                _mm512_cvtss_f32(exp_nonpositive512(_mm512_set1_ps(row_max[r] - new_max)));  // 0 at first
            row_sum[r] = row_sum[r] * correction + _mm512_reduce_add_ps(vsum);
            row_max[r] = new_max;
            if (correction != 1.0f) {
                const __m512 c = _mm512_set1_ps(correction);
                float* o = out + r * dim;
                for (std::int64_t d = 0; d < dim; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), c));
            }
        }
        pack_values(a, kb, n, kv_head, dim, vp);
        gemm(p16 + first_row * kKeys, kKeys, m, vp, (kKeys / 2) * 64, dim / 16, kKeys / 2, out + first_row * dim, dim,
             dim, true);
    }
    for (std::int64_t r = 0; r < l.rows; ++r) {
        const std::int64_t qi = q_begin + r / group;
        float* dst = a.out + (qi * s.n_heads + kv_head * group + r % group) * dim;
        const __m512 inv = _mm512_set1_ps(1.0f / row_sum[r]);
        for (std::int64_t d = 0; d < dim; d += 16)
            _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_loadu_ps(out + r * dim + d), inv));
    }
}

namespace {

using attention_detail::DecodePartial;
using attention_detail::DecodeRange;

inline __m512 widen_bf16x16(const std::uint16_t* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

// r[i] = the sum of v[i]'s lanes, i < 16: a transposing tree of 128-bit and lane shuffles,
// 3 operations per sum instead of a full reduction each.
inline __m512 sum_lanes16(const __m512* v) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i)  // chunks: v[i] 0+2, 1+3 | v[i+8] 0+2, 1+3
        a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
    for (int i = 0; i < 4; ++i)  // chunks: v[i], v[i+8], v[i+4], v[i+12], 4 lanes each
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 4], 0x88), _mm512_shuffle_f32x4(a[i], a[i + 4], 0xDD));
    for (int i = 0; i < 2; ++i)
        c[i] = _mm512_add_ps(_mm512_unpacklo_ps(b[i], b[i + 2]), _mm512_unpackhi_ps(b[i], b[i + 2]));
    const __m512 d = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
    return _mm512_shuffle_f32x4(d, d, 0xD8);  // chunks held v0-3, v8-11, v4-7, v12-15
}

constexpr std::int64_t kDecodeKeys = 32;  // keys per online-softmax step

// Value rows of one block into the accumulators of one or two query rows (kTwo) of a KV head:
// acc_w = acc_w · correction_w + Σ_j p_w[j] · v_j, in registers across the block.
template <int C, bool kTwo>
void accumulate_values(const std::uint16_t* const* v_rows, std::int64_t n, const float* p0, const float* p1,
                       float c0, float c1, float* acc0, float* acc1) {
    __m512 x[C], y[C];
    for (int c = 0; c < C; ++c) {
        x[c] = _mm512_mul_ps(_mm512_load_ps(acc0 + 16 * c), _mm512_set1_ps(c0));
        if constexpr (kTwo) y[c] = _mm512_mul_ps(_mm512_load_ps(acc1 + 16 * c), _mm512_set1_ps(c1));
    }
    for (std::int64_t j = 0; j < n; ++j) {
        const __m512 w0 = _mm512_set1_ps(p0[j]);
        const __m512 w1 = kTwo ? _mm512_set1_ps(p1[j]) : w0;
        for (int c = 0; c < C; ++c) {
            const __m512 v = widen_bf16x16(v_rows[j] + 16 * c);
            x[c] = _mm512_fmadd_ps(w0, v, x[c]);
            if constexpr (kTwo) y[c] = _mm512_fmadd_ps(w1, v, y[c]);
        }
    }
    for (int c = 0; c < C; ++c) {
        _mm512_store_ps(acc0 + 16 * c, x[c]);
        if constexpr (kTwo) _mm512_store_ps(acc1 + 16 * c, y[c]);
    }
}

inline std::int64_t smaller(std::int64_t x, std::int64_t y) { return x < y ? x : y; }
inline float larger(float x, float y) { return x > y ? x : y; }

// Scratch floats of one decode call: q rows, accumulators, lane sums, weights, max / sum /
// correction per slot.
std::int64_t decode_scratch_floats(std::int64_t n_slots, std::int64_t dim) {
    return n_slots * (2 * dim + 16 * 16 + kDecodeKeys + 3) + 16;
}

// C = head_dim / 16. Slot = (token · local KV heads + local KV head) · group + query head of
// the group: every token of the range at once, so that each key row widened serves all of
// them (a prompt's rows under batch-invariant kernels; one or two tokens when decoding). A
// token's slots stop at its own last key, and for the keys it sees each slot goes through the
// same operations as in a call for that token alone.
template <int C>
void decode_bf16(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& r, const DecodePartial* part,
                 void* scratch) {
    constexpr std::int64_t dim = 16 * C;
    const std::int64_t group = s.n_heads / s.n_kv_heads;
    const std::int64_t n_kv = r.kv_head_end - r.kv_head_begin;
    const std::int64_t per_token = n_kv * group;
    const std::int64_t n_tokens = r.q_end - r.q_begin;
    const std::int64_t n_slots = n_tokens * per_token;
    const std::int64_t row_bytes = n_kv * dim * static_cast<std::int64_t>(sizeof(std::uint16_t));
    float* q_rows = static_cast<float*>(scratch);  // [slot][dim], scaled
    float* acc = q_rows + n_slots * dim;           // [slot][dim]
    float* lanes = acc + n_slots * dim;            // [slot][16 keys][16 lanes] partial dot products
    float* probs = lanes + n_slots * 16 * 16;      // [slot][kDecodeKeys]
    float* row_max = probs + n_slots * kDecodeKeys;  // [slot]
    float* row_sum = row_max + n_slots;
    float* correction = row_sum + n_slots;
    const std::uint16_t* k_rows[kDecodeKeys];
    const std::uint16_t* v_rows[kDecodeKeys];
    // Token t sees keys up to key_end(t) (exclusive); later tokens see more.
    const auto key_end = [&](std::int64_t t) { return smaller(r.key_end, a.start_pos + r.q_begin + t + 1); };

    for (std::int64_t t = 0; t < n_tokens; ++t) {
        for (std::int64_t local = 0; local < per_token; ++local) {
            const float* q = a.q + (r.q_begin + t) * a.q_stride + (r.kv_head_begin * group + local) * dim;
            float* row = q_rows + (t * per_token + local) * dim;
            for (std::int64_t d = 0; d < dim; ++d) row[d] = q[d] * s.scale;
        }
    }
    for (std::int64_t i = 0; i < n_slots * dim; ++i) acc[i] = 0.0f;
    for (std::int64_t slot = 0; slot < n_slots; ++slot) {
        row_max[slot] = -std::numeric_limits<float>::infinity();
        row_sum[slot] = 0.0f;
    }
    const std::int64_t last_end = key_end(n_tokens - 1);
    std::int64_t first = 0;  // the first token that sees keys of the current block
    for (std::int64_t kb = r.key_begin; kb < last_end; kb += kDecodeKeys) {
        while (key_end(first) <= kb) ++first;
        const std::int64_t n = smaller(kDecodeKeys, last_end - kb);
        const std::int64_t first_slot = first * per_token;
        for (std::int64_t j = 0; j < n; ++j) {
            k_rows[j] = cache_row(a, kb + j, r.kv_head_begin, dim, a.k);
            v_rows[j] = cache_row(a, kb + j, r.kv_head_begin, dim, a.v);
        }
        // Scores, position by position so the cache is read in address order. The value rows
        // of the block are requested meanwhile (into L2: into L1 the requests queue behind
        // each other and stall the key loads), since the value pass reads them head by head.
        for (std::int64_t half = 0; half < n; half += 16) {
            const std::int64_t nh = smaller(16, n - half);
            for (std::int64_t j = 0; j < nh; ++j) {
                const auto* v_bytes = reinterpret_cast<const char*>(v_rows[half + j]);
                for (std::int64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(v_bytes + off, _MM_HINT_T2);
                for (std::int64_t h = 0; h < n_kv; ++h) {
                    __m512 k[C];
                    for (int c = 0; c < C; ++c) k[c] = widen_bf16x16(k_rows[half + j] + h * dim + 16 * c);
                    for (std::int64_t t = first; t < n_tokens; ++t) {
                        for (std::int64_t g = 0; g < group; ++g) {
                            const std::int64_t slot = t * per_token + h * group + g;
                            const float* q = q_rows + slot * dim;
                            __m512 s0 = _mm512_mul_ps(_mm512_load_ps(q), k[0]);
                            __m512 s1 = _mm512_setzero_ps();
                            for (int c = 1; c < C; ++c) {
                                if (c % 2 == 1) s1 = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * c), k[c], s1);
                                else s0 = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * c), k[c], s0);
                            }
                            _mm512_store_ps(lanes + (slot * 16 + j) * 16, _mm512_add_ps(s0, s1));
                        }
                    }
                }
            }
            for (std::int64_t slot = first_slot; slot < n_slots; ++slot) {
                __m512 v[16];
                for (int j = 0; j < 16; ++j)
                    v[j] = j < nh ? _mm512_load_ps(lanes + (slot * 16 + j) * 16) : _mm512_setzero_ps();
                _mm512_store_ps(probs + slot * kDecodeKeys + half, sum_lanes16(v));
            }
        }
        const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (std::int64_t t = first; t < n_tokens; ++t) {
            const std::int64_t nt = smaller(kDecodeKeys, key_end(t) - kb);  // the keys this token sees
            const __mmask16 m0 = nt >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nt) - 1);
            const __mmask16 m1 =
                nt >= 32 ? __mmask16(0xFFFF) : nt > 16 ? __mmask16((1u << (nt - 16)) - 1) : __mmask16(0);
            for (std::int64_t slot = t * per_token; slot < (t + 1) * per_token; ++slot) {
                float* p = probs + slot * kDecodeKeys;
                const __m512 s0 = _mm512_mask_mov_ps(minus_inf, m0, _mm512_load_ps(p));
                const __m512 s1 = _mm512_mask_mov_ps(minus_inf, m1, _mm512_load_ps(p + 16));
                const float block_max = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
                const float new_max = larger(row_max[slot], block_max);
                const __m512 vmax = _mm512_set1_ps(new_max);
                const __m512 e0 = _mm512_maskz_mov_ps(m0, exp_nonpositive512(_mm512_sub_ps(s0, vmax)));
                const __m512 e1 = _mm512_maskz_mov_ps(m1, exp_nonpositive512(_mm512_sub_ps(s1, vmax)));
                _mm512_store_ps(p, e0);
                _mm512_store_ps(p + 16, e1);
                correction[slot] = _mm512_cvtss_f32(exp_nonpositive512(_mm512_set1_ps(row_max[slot] - new_max)));
                row_sum[slot] = row_sum[slot] * correction[slot] + _mm512_reduce_add_ps(_mm512_add_ps(e0, e1));
                row_max[slot] = new_max;
            }
            for (std::int64_t h = 0; h < n_kv; ++h) {
                const std::uint16_t* head_rows[kDecodeKeys];
                for (std::int64_t j = 0; j < nt; ++j) head_rows[j] = v_rows[j] + h * dim;
                for (std::int64_t g = 0; g < group; g += 2) {
                    const std::int64_t s0 = t * per_token + h * group + g;
                    if (g + 1 < group) {
                        accumulate_values<C, true>(head_rows, nt, probs + s0 * kDecodeKeys,
                                                   probs + (s0 + 1) * kDecodeKeys, correction[s0], correction[s0 + 1],
                                                   acc + s0 * dim, acc + (s0 + 1) * dim);
                    } else {
                        accumulate_values<C, false>(head_rows, nt, probs + s0 * kDecodeKeys, nullptr, correction[s0],
                                                    0.0f, acc + s0 * dim, nullptr);
                    }
                }
            }
        }
    }
    for (std::int64_t slot = 0; slot < n_slots; ++slot) {
        const std::int64_t row = (r.q_begin + slot / per_token) * s.n_heads + r.kv_head_begin * group + slot % per_token;
        const float* from = acc + slot * dim;
        if (part == nullptr) {
            const __m512 inv = _mm512_set1_ps(1.0f / row_sum[slot]);
            for (std::int64_t d = 0; d < dim; d += 16)
                _mm512_storeu_ps(a.out + row * dim + d, _mm512_mul_ps(_mm512_load_ps(from + d), inv));
        } else {
            std::memcpy(part->acc + row * dim, from, dim * sizeof(float));
            part->max[row] = row_max[slot];
            part->sum[row] = row_sum[slot];
        }
    }
}

}  // namespace

bool attend_decode_bf16_supported(const AttentionShape& s) { return s.head_dim % 16 == 0 && s.head_dim <= 128; }

std::size_t attend_decode_bf16_scratch_bytes(const AttentionShape& s, const DecodeRange& range) {
    const std::int64_t n_slots =
        (range.q_end - range.q_begin) * (range.kv_head_end - range.kv_head_begin) * (s.n_heads / s.n_kv_heads);
    return static_cast<std::size_t>(decode_scratch_floats(n_slots, s.head_dim)) * sizeof(float);
}

void attend_decode_bf16_avx512(const AttentionArgs& a, const AttentionShape& s, const DecodeRange& range,
                               const DecodePartial* partial, void* scratch) {
    switch (s.head_dim / 16) {
        case 1: decode_bf16<1>(a, s, range, partial, scratch); return;
        case 2: decode_bf16<2>(a, s, range, partial, scratch); return;
        case 3: decode_bf16<3>(a, s, range, partial, scratch); return;
        case 4: decode_bf16<4>(a, s, range, partial, scratch); return;
        case 5: decode_bf16<5>(a, s, range, partial, scratch); return;
        case 6: decode_bf16<6>(a, s, range, partial, scratch); return;
        case 7: decode_bf16<7>(a, s, range, partial, scratch); return;
        default: decode_bf16<8>(a, s, range, partial, scratch); return;
    }
}

}  // namespace tessera::kernels::cpu
