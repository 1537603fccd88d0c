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

// rows_f32[b] = rows[b][0:latent] widened.
void mla_widen_rows(const std::uint16_t* const* rows, std::int64_t nb, std::int64_t latent, float* rows_f32);
// The same for four heads at once: y[h] (latent floats apart) with keep[h] and weights
// w[h · w_stride + b]; each row chunk is loaded once for the four.
void mla_weighted_rows4(float* y, const float* keep, const float* w, std::int64_t w_stride, const float* rows_f32,
                        std::int64_t nb, std::int64_t latent);

}  // namespace tessera::kernels::cpu
