#pragma once
// kvcache/kv_pool.h — the paged K/V storage of one rank, shared by all requests: per layer,
// K and V rows of shape.dtype [n_slots, n_kv_heads, head_dim]. A slot holds one token's K/V; slots are
// handed out a page (page_size consecutive slots) at a time by SlotAllocator. Slot 0 is
// reserved as padding and never handed out. Owned by the rank's executor thread.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "kvcache/kv_cache.h"

namespace tessera::kvcache {

struct KvPoolConfig {
    KvCacheShape shape;          // layers, kv heads and head_dim on this rank
    std::int64_t n_slots = 0;    // usable token slots (max_total_num_tokens), multiple of page_size
    std::int64_t page_size = 1;
};

class KvPool {
 public:
    explicit KvPool(const KvPoolConfig& config);
    const KvPoolConfig& config() const { return config_; }
    // f32 [n_slots + page_size, n_kv_heads, head_dim]; row s is slot s (slot 0 = padding).
    void* k(std::int64_t layer) { return k_[layer].data(); }
    void* v(std::int64_t layer) { return config_.shape.has_v() ? v_[layer].data() : nullptr; }
    KvView view();
    std::int64_t row_floats() const { return config_.shape.row_floats(); }

 private:
    KvPoolConfig config_;
    std::vector<AlignedBuffer> k_;
    std::vector<AlignedBuffer> v_;
};

// Free pages, as runs of consecutive pages. alloc(n) returns n slots (ceil(n / page_size)
// pages' worth, the first n of them in order) or nullopt when the pool is short: running out
// is normal control flow for the scheduler (it evicts cache or retracts), not an error.
//
// Placement keeps each sequence's slots consecutive where it can, because attention reads
// a sequence's K/V rows in position order and consecutive rows stream from memory about
// twice as fast as scattered ones: a sequence grows into the pages right after its last
// one, and a new sequence starts kGrowthSlots after the end of the run before it, so that
// run can still grow. Those gaps are ordinary free pages: when nothing else is left they are
// handed out like any other.
//
// On a CPU host the pool is the machine's RAM, and a page costs resident memory from the
// first time it is written until the process exits. So pages already handed out once
// ("touched") are reused before fresh ones: a new run goes into a touched hole that holds it
// with its gap; else, while at least a quarter of the touched region is free, into the
// middle of the largest touched hole (both neighbours keep half the room), or into touched
// fragments; only then onto fresh pages. The touched region thus stays within about 4/3 of
// the slots in use (plus one gap), however large the pool: memory follows the load.
class SlotAllocator {
 public:
    // Room left after a run for its sequence to grow before the next sequence starts.
    static constexpr std::int64_t kGrowthSlots = 256;

    SlotAllocator(std::int64_t n_slots, std::int64_t page_size);
    // Slots for `n` more tokens of a sequence whose last slot is `last_slot` (-1 for none):
    // continues the sequence's current page while it has room, then takes whole pages.
    std::optional<std::vector<std::int32_t>> alloc(std::int64_t n, std::int32_t last_slot = -1);
    // Returns slots; a page goes back to the free runs when all its slots are free.
    void free(const std::vector<std::int32_t>& slots);
    std::int64_t available() const;  // free slots, counting whole free pages only
    // Slots up to the highest page ever handed out: a bound on the pool's resident memory.
    std::int64_t touched() const { return (high_water_ - 1) * page_size_; }
    // The pool's pages were given back (kvcache::release_pages): none counts as touched any
    // more. Only while every slot is free.
    void forget_touched();
    std::int64_t capacity() const { return n_slots_; }
    std::int64_t page_size() const { return page_size_; }

 private:
    // Takes up to `count` free pages starting at `page` (stopping at the end of its run);
    // returns how many it took.
    std::int64_t take_from(std::int32_t page, std::int64_t count, std::vector<std::int32_t>* pages);
    void release_page(std::int32_t page);
    // First page of the first run that holds `count` pages after a growth gap (when the run
    // follows a used page) and ends before page `limit`, or -1.
    std::int32_t place_new_run(std::int64_t count, std::int64_t limit) const;
    std::int64_t free_pages_below(std::int64_t limit) const;
    // Where `count` pages go in the middle of the largest free run below high_water_, or -1.
    std::int32_t split_touched_hole(std::int64_t count) const;

    std::int64_t n_slots_;
    std::int64_t page_size_;
    std::map<std::int32_t, std::int32_t> free_runs_;  // first page -> pages in the run
    std::int64_t free_pages_ = 0;
    std::vector<std::int32_t> used_in_page_;  // per page: slots in use
    std::int64_t high_water_ = 1;  // one past the highest page ever handed out
};

}  // namespace tessera::kvcache
