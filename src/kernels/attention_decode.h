#pragma once
// kernels/attention_decode.h — what one decode-attention task covers and what it returns when
// a sequence's keys are split between tasks (flash decoding), and how many query tokens a
// prefill task of the bf16 block kernel takes. Internal to kernels/; plain structs, so any
// ISA's file may include it.

#include <cstdint>
#include <limits>

namespace tessera::kernels::attention_detail {

// KV heads [kv_head_begin, kv_head_end) (every query head of their groups), query tokens
// [q_begin, q_end), and the keys [key_begin, key_end) of the cache (clipped to what each
// query sees).
struct DecodeRange {
    std::int64_t kv_head_begin = 0, kv_head_end = 0, q_begin = 0, q_end = 0;
    std::int64_t key_begin = 0, key_end = std::numeric_limits<std::int64_t>::max();
};

// A task's unnormalised result over its keys, per output row (query token · n_heads + head):
// the weighted value sum, the running max and the softmax denominator. A row whose keys all
// lie outside the range has sum 0.
struct DecodePartial {
    float* acc = nullptr;  // [rows][head_dim]
    float* max = nullptr;  // [rows]
    float* sum = nullptr;  // [rows]
};

// How many key ranges each of `n_decode_seqs` decoding sequences with `n_keys` cached keys
// splits into, for `n_workers` threads: 1 when the batch alone keeps every worker busy.
std::int64_t decode_key_parts(std::int64_t n_decode_seqs, std::int64_t n_keys, int n_workers);

// Query tokens per task of the bf16 block kernel for a prompt of n_q tokens over n_kv_heads KV
// heads and n_workers threads: as many as leave four tasks per worker, in steps of 64, from 64
// to 512.
std::int64_t bf16_prefill_query_tokens(std::int64_t n_q, std::int64_t n_kv_heads, int n_workers);

}  // namespace tessera::kernels::attention_detail
