#pragma once
// kernels/cpu/attention_avx512.h — attention over a bf16 cache with AVX-512: prefill blocks on
// the BF16 dot-product instructions, and decode rows (cpu/attention_avx512.cpp, compiled with
// the AVX-512 flags; call only after kernels::isa_supported(kAvx512Bf16)). No intrinsics here.
// Reentrant.

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_decode.h"

namespace tessera::kernels::cpu {

// Shapes the kernel takes: head_dim a multiple of 32.
bool attend_block_bf16_supported(const AttentionShape& s);

// Scratch bytes for one call with `n_tokens` query tokens.
std::size_t attend_block_bf16_scratch_bytes(const AttentionShape& s, std::int64_t n_tokens);

// Query tokens [q_begin, q_end) of one sequence, every query head of KV head `kv_head`, over
// keys 0 .. start_pos + q_end - 1 of a bf16 cache (a.kv_bf16), causal, flash style in
// blocks of 64 keys. Scores and the weighted sum of values are two small bf16 GEMMs on the
// matmul micro-kernel, so q (scaled) and the softmax weights are rounded to bf16 as GPU
// flash kernels do; max, sums and outputs stay f32. `scratch` is 64-byte aligned.
void attend_block_bf16_avx512(const AttentionArgs& a, const AttentionShape& s, std::int64_t kv_head,
                              std::int64_t q_begin, std::int64_t q_end, void* scratch);

// Decode over a bf16 cache: what attention_detail::attend_decode_rows computes, with each
// query row's value accumulator held in registers across a block of keys. Shapes: head_dim a
// multiple of 16, at most 128. `scratch` (64-byte aligned) holds
// attend_decode_bf16_scratch_bytes for the range.
bool attend_decode_bf16_supported(const AttentionShape& s);
std::size_t attend_decode_bf16_scratch_bytes(const AttentionShape& s, const attention_detail::DecodeRange& range);
void attend_decode_bf16_avx512(const AttentionArgs& a, const AttentionShape& s,
                               const attention_detail::DecodeRange& range,
                               const attention_detail::DecodePartial* partial, void* scratch);

}  // namespace tessera::kernels::cpu
