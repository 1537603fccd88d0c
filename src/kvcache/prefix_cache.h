#pragma once
// kvcache/prefix_cache.h — reuse of K/V across requests that share a token prefix
// (SGLang's BasePrefixCache). RadixCache keeps a radix tree of token sequences → slots with
// lock counts (a locked node is in use by a running request and cannot be evicted) and
// evicts by one of SGLang's policies (--radix-eviction-policy); ChunkCache is the no-reuse
// variant behind --disable-radix-cache. Both only book-keep slots: the caller owns the
// SlotAllocator and the K/V data.
// Owned by the scheduler thread; not thread-safe.

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::kvcache {

class SlotAllocator;

// Opaque handle of a tree node (a matched prefix end). 0 = the root (empty prefix).
using NodeId = std::int64_t;

// Which unlocked leaf evict() takes first (SGLang's mem_cache/evict_policy.py strategies):
//   lru       the least recently matched or inserted;
//   lfu       the fewest inserts through it (a request caching its prompt or its output), then lru;
//   slru      those inserted through fewer than twice (probationary) before the others
//             (protected), lru within each;
//   priority  the lowest request priority that inserted through it, then lru.
enum class EvictionPolicy { kLru, kLfu, kSlru, kPriority };

// "lru", "lfu", "slru" or "priority" (any case, as SGLang lowers it).
StatusOr<EvictionPolicy> parse_eviction_policy(std::string_view name);

// What an insert records on the nodes it passes: the inserting request's priority (a node
// keeps the highest), and whether it is a chunk of a prompt still being prefilled, which does
// not count as a hit (SGLang's _inc_hit_count: a chunked request would count its own chunks).
struct InsertOptions {
    std::int64_t priority = 0;
    bool chunked = false;
};

struct MatchResult {
    std::vector<std::int32_t> slots;  // slots of the longest cached prefix, one per token
    NodeId last_node = 0;             // lock this node while the request uses the prefix
};

class PrefixCache {
 public:
    virtual ~PrefixCache() = default;
    // Longest cached prefix of `tokens`, in whole pages (a partial last page is not reused).
    virtual MatchResult match_prefix(std::span<const std::int32_t> tokens) = 0;
    // Inserts tokens → slots (same length). Slots of a prefix that was already cached are
    // returned to the allocator (the tree keeps its own copy). Returns the node of the end.
    virtual NodeId insert(std::span<const std::int32_t> tokens, std::span<const std::int32_t> slots,
                          const InsertOptions& options = {}) = 0;
    // lock: +1 on every node from `node` to the root; unlock: -1. Locked nodes are not evicted.
    virtual void inc_lock_ref(NodeId node) = 0;
    virtual void dec_lock_ref(NodeId node) = 0;
    // Session references (--enable-session-radix-cache): +1 / -1 on every node from `node` to
    // the root. evict() takes unreferenced leaves before referenced ones; unlike a locked node
    // a referenced one can still go, after which dec_session_ref of it does nothing.
    virtual void inc_session_ref(NodeId node) = 0;
    virtual void dec_session_ref(NodeId node) = 0;
    // Frees at least `n_tokens` slots of unlocked leaves in the policy's order (those no
    // session references before the others; fewer if not enough is evictable). Returns the
    // number freed.
    virtual std::int64_t evict(std::int64_t n_tokens) = 0;
    virtual std::int64_t evictable_size() const = 0;  // cached tokens in unlocked nodes
    virtual std::int64_t protected_size() const = 0;  // cached tokens in locked nodes
    virtual std::int64_t total_size() const = 0;
    // Drops everything unlocked (/flush_cache); false when some node is still locked.
    virtual bool reset() = 0;
};

std::unique_ptr<PrefixCache> make_radix_cache(SlotAllocator& allocator, std::int64_t page_size,
                                              EvictionPolicy policy = EvictionPolicy::kLru);
std::unique_ptr<PrefixCache> make_chunk_cache(SlotAllocator& allocator);

}  // namespace tessera::kvcache
