#pragma once
// kernels/cpu/mla_attention_avx512.h — the inner loops of MLA's absorbed attention over a
// bf16 latent cache with AVX-512 (cpu/mla_attention_avx512.cpp, compiled with the AVX-512
// flags; call only after kernels::isa_supported(kAvx512Bf16)). No intrinsics here.

#include <cstdint>

namespace tessera::kernels::cpu {

// Widths the kernels take: multiples of 32.
inline bool mla_avx512_supported(std::int64_t width, std::int64_t latent) {
    return width % 32 == 0 && latent % 32 == 0;
}

// q f32 [width] → bf16 pairs for the dot products (round to nearest even).
void mla_round_query_bf16(const float* q, std::int64_t width, std::uint16_t* out);

// scores[b] = q · rows[b] over bf16 rows (the cache's, unconverted) with _mm512_dpbf16_ps.
void mla_scores_bf16(const std::uint16_t* q, const std::uint16_t* const* rows, std::int64_t nb, std::int64_t width,
                     float* scores);

// The latent parts of nb rows as key pairs for _mm512_dpbf16_ps: vp[c][j] holds the 32 bf16
// (rows[2j][16c + i], rows[2j+1][16c + i]) for i < 16 (an odd last row is paired with
// zeros). vp: (latent / 16) · ceil(nb / 2) · 32 values.
void mla_pack_value_pairs(const std::uint16_t* const* rows, std::int64_t nb, std::int64_t latent, std::uint16_t* vp);

// For heads h < n_heads (1..4): y[h] (latent floats apart) = y[h] · keep[h] +
// Σ_b w[h · w_stride + b] · rows[b][0:latent], with the weights rounded to bf16 pairs; each
// pair vector is loaded once for all the heads.
void mla_weighted_pairs(float* y, int n_heads, const float* keep, const float* w, std::int64_t w_stride,
                        const std::uint16_t* vp, std::int64_t nb, std::int64_t latent);

}  // namespace tessera::kernels::cpu
