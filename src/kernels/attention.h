#pragma once
// kernels/attention.h — causal softmax attention of a run of new tokens over one sequence's
// KV cache, flash style: keys are visited in blocks with an online softmax, so no
// [queries × keys] matrix is ever materialised. Covers prefill (many queries), chunked
// prefill (queries after a cached prefix) and decode (one query). GQA: query head h reads
// KV head h / (n_heads / n_kv_heads). Thread-safe; work is split over `pool`.

#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::kernels {

struct AttentionShape {
    std::int64_t n_heads = 0;     // query heads
    std::int64_t n_kv_heads = 0;  // divides n_heads
    std::int64_t head_dim = 0;
    float scale = 1.0f;  // usually 1 / sqrt(head_dim)
};

// q   f32 [n_q, n_heads, head_dim] (token rows q_stride floats apart; 0 = n_heads·head_dim)
// k,v f32, bf16 or fp8 (e4m3 / e5m2, values as stored: scale 1) [n_kv, n_kv_heads, head_dim]
//     (rows kv_stride apart; 0 = n_kv_heads·head_dim):
//     the cache holding positions 0 .. start_pos + n_q - 1: position p is row p, or row
//     kv_slots[p] when kv_slots is given (a paged pool shared by many sequences)
// out f32 [n_q, n_heads, head_dim]
// Query i sits at position start_pos + i and attends keys 0 .. start_pos + i.
struct AttentionArgs {
    const float* q = nullptr;
    const void* k = nullptr;  // kv_dtype elements
    const void* v = nullptr;
    float* out = nullptr;
    std::int64_t n_q = 0;
    std::int64_t start_pos = 0;
    std::int64_t q_stride = 0;
    std::int64_t kv_stride = 0;
    const std::int32_t* kv_slots = nullptr;  // I32 [start_pos + n_q] or nullptr (identity)
    DType kv_dtype = DType::kF32;            // K/V element type (read widened to f32)
};

void attention(const AttentionArgs& args, const AttentionShape& shape, ThreadPool* pool);

// Several sequences at once (a decode batch): one dispatch to the pool for all of them.
void attention_batch(std::span<const AttentionArgs> batch, const AttentionShape& shape, ThreadPool* pool);

// Plain two-pass softmax over each query row: the twin attention() is tested against.
void attention_reference(const AttentionArgs& args, const AttentionShape& shape);

}  // namespace tessera::kernels
