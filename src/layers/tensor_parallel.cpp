#include "layers/tensor_parallel.h"

#include <algorithm>
#include <string>

namespace tessera::layers {

namespace {
std::string valid_sizes(std::int64_t n) {
    std::string out;
    for (std::int64_t d = 1; d <= n && d <= 64; ++d)
        if (n % d == 0) out += (out.empty() ? "" : ", ") + std::to_string(d);
    return out;
}
}  // namespace

StatusOr<Range> even_shard(const char* what, std::int64_t n, TpShard shard) {
    if (n % shard.size != 0) {
        return Status::InvalidArgument("tp_size (" + std::to_string(shard.size) + ") must divide " + what + " (" +
                                       std::to_string(n) + "); valid tp_size: " + valid_sizes(n));
    }
    const std::int64_t per = n / shard.size;
    return Range{shard.rank * per, per};
}

StatusOr<AttentionShard> shard_attention(std::int64_t n_heads, std::int64_t n_kv_heads, TpShard shard) {
    AttentionShard a;
    TSR_ASSIGN_OR_RETURN(a.q_heads, even_shard("num_attention_heads", n_heads, shard));
    if (shard.size <= n_kv_heads) {
        TSR_ASSIGN_OR_RETURN(a.kv_heads, even_shard("num_key_value_heads", n_kv_heads, shard));
    } else {
        if (shard.size % n_kv_heads != 0) {
            return Status::InvalidArgument("tp_size (" + std::to_string(shard.size) +
                                           ") above num_key_value_heads (" + std::to_string(n_kv_heads) +
                                           ") must be a multiple of it so KV heads replicate evenly");
        }
        a.kv_heads = {shard.rank / (shard.size / n_kv_heads), 1};
    }
    return a;
}

VocabShard shard_vocab(std::int64_t vocab, TpShard shard) {
    VocabShard v;
    v.rows_per_rank = (vocab + shard.size - 1) / shard.size;
    const std::int64_t begin = std::min(vocab, shard.rank * v.rows_per_rank);
    v.rows = {begin, std::min(vocab, begin + v.rows_per_rank) - begin};
    return v;
}

}  // namespace tessera::layers
