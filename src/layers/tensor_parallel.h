#pragma once
// layers/tensor_parallel.h — how a dense decoder is split over the ranks of a TP group of
// size p (Megatron style, as SGLang's layers/linear.py and vocab_parallel_embedding.py):
//   column parallel (q/k/v, gate/up):  Y = X·Aᵀ, A split by output rows; rank r keeps
//       A[r·n/p : (r+1)·n/p, :]; the output stays sharded (no communication).
//   row parallel (o_proj, down):       Y = X·Aᵀ, A split by input columns; rank r keeps
//       A[:, r·k/p : (r+1)·k/p] and produces a partial sum; all_reduce on the TP group.
//   attention: query heads split evenly; KV heads split evenly when p <= n_kv_heads,
//       otherwise each rank keeps the one KV head its query heads read (replicated).
//   vocab parallel (embedding, LM head): rank r keeps rows [r·v, (r+1)·v) with
//       v = ceil(vocab / p); embedding rows outside the shard read as 0 and the partial
//       embeddings are all_reduced; LM-head logits are all_gathered and the padding dropped.
// Pure functions; thread-safe.

#include <cstdint>

#include "base/status.h"

namespace tessera::layers {

struct TpShard {
    int rank = 0;
    int size = 1;
};

struct Range {
    std::int64_t begin = 0;
    std::int64_t count = 0;
};

// This rank's slice of n features split evenly; fails naming `what` if p does not divide n.
StatusOr<Range> even_shard(const char* what, std::int64_t n, TpShard shard);

struct AttentionShard {
    Range q_heads;
    Range kv_heads;
};

StatusOr<AttentionShard> shard_attention(std::int64_t n_heads, std::int64_t n_kv_heads, TpShard shard);

struct VocabShard {
    std::int64_t rows_per_rank = 0;  // ceil(vocab / p): every rank's (padded) shard height
    Range rows;                      // this rank's real rows, count may be < rows_per_rank
};

VocabShard shard_vocab(std::int64_t vocab, TpShard shard);

}  // namespace tessera::layers
