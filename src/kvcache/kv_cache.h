#pragma once
// kvcache/kv_cache.h — the K/V store of one sequence: per layer, [capacity, n_kv_heads,
// head_dim] of shape.dtype for K and for V, positions 0..capacity-1 in order; or, for MLA, one
// latent row per token (the K buffer) and no V.
// The paged, multi-request pool of the serving engine builds on the same row layout.
// Owned and used by one thread (the rank's executor thread).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace tessera::kvcache {

// Per layer, the K and V rows a forward reads and writes (a KvCache or a shared pool).
struct KvView {
    DType dtype = DType::kF32;  // kF32 or kBF16 elements
    std::vector<void*> k;       // [layer] → dtype [rows, n_kv_heads, head_dim]
    std::vector<void*> v;       // [layer] → the same; nullptr for a latent cache
    std::size_t layer_bytes = 0;  // size of each of those buffers
};

// /release_memory_occupation: gives the pages of every buffer of `kv` back to the system. What
// they held is gone (they read zero, or old rows at the buffers' unaligned ends); each page
// costs memory again when a forward writes it. Only while no sequence holds KV in them.
void release_pages(const KvView& kv);

// What one layer stores per token: K and V of its KV heads (MHA / GQA), or one latent row
// shared by every head with no separate V (MLA: kv_lora_rank + qk_rope_head_dim values).
enum class KvKind { kKeyValue, kLatent };

struct KvCacheShape {
    std::int64_t n_layers = 0;
    std::int64_t n_kv_heads = 0;
    std::int64_t head_dim = 0;
    DType dtype = DType::kF32;  // element type of the stored K/V (kF32 or kBF16)
    KvKind kind = KvKind::kKeyValue;

    std::int64_t row_floats() const { return n_kv_heads * head_dim; }  // elements per row
    std::int64_t row_bytes() const { return row_floats() * static_cast<std::int64_t>(dtype_size(dtype)); }
    bool has_v() const { return kind == KvKind::kKeyValue; }
    // Bytes one token takes over all layers (SGLang's cell size): K and V, or the latent.
    std::int64_t bytes_per_token() const { return (has_v() ? 2 : 1) * n_layers * row_bytes(); }
};

class KvCache {
 public:
    KvCache(const KvCacheShape& shape, std::int64_t capacity);

    const KvCacheShape& shape() const { return shape_; }
    std::int64_t capacity() const { return capacity_; }

    // shape().dtype [capacity, n_kv_heads, head_dim]
    void* k(std::int64_t layer) { return k_[layer].data(); }
    void* v(std::int64_t layer) { return shape_.has_v() ? v_[layer].data() : nullptr; }

    KvView view();

    // Fails with a message naming the limit when positions [start, start + n) do not fit.
    Status check_fits(std::int64_t start, std::int64_t n) const;

 private:
    KvCacheShape shape_;
    std::int64_t capacity_;
    std::vector<AlignedBuffer> k_;
    std::vector<AlignedBuffer> v_;
};

}  // namespace tessera::kvcache
