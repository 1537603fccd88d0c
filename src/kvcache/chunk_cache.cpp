// kvcache/chunk_cache.cpp — ChunkCache: the PrefixCache used with --disable-radix-cache.
// Nothing is reused: match_prefix finds nothing and insert hands the slots straight back to
// the allocator. Keeping the same interface lets the scheduler run one code path (SGLang's
// ChunkCache plays the same role). Owned by the scheduler thread.

#include "kvcache/kv_pool.h"
#include "kvcache/prefix_cache.h"

namespace tessera::kvcache {
namespace {

class ChunkCache final : public PrefixCache {
 public:
    explicit ChunkCache(SlotAllocator& allocator) : allocator_(allocator) {}

    // ---- PrefixCache ----------------------------------------------------------------------
    MatchResult match_prefix(std::span<const std::int32_t> /*tokens*/) override { return {}; }
    NodeId insert(std::span<const std::int32_t> /*tokens*/, std::span<const std::int32_t> slots,
                  const InsertOptions& /*options*/) override {
        allocator_.free(std::vector<std::int32_t>(slots.begin(), slots.end()));
        return 0;
    }
    void inc_lock_ref(NodeId /*node*/) override {}
    void dec_lock_ref(NodeId /*node*/) override {}
    void inc_session_ref(NodeId /*node*/) override {}
    void dec_session_ref(NodeId /*node*/) override {}
    std::int64_t evict(std::int64_t /*n_tokens*/) override { return 0; }
    std::int64_t evictable_size() const override { return 0; }
    std::int64_t protected_size() const override { return 0; }
    std::int64_t total_size() const override { return 0; }
    bool reset() override { return true; }

 private:
    SlotAllocator& allocator_;
};

}  // namespace

std::unique_ptr<PrefixCache> make_chunk_cache(SlotAllocator& allocator) {
    return std::make_unique<ChunkCache>(allocator);
}

}  // namespace tessera::kvcache
