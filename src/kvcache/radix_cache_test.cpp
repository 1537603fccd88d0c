#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/kv_pool.h"
#include "kvcache/prefix_cache.h"

namespace tessera::kvcache {
namespace {

using Tokens = std::vector<std::int32_t>;

// A request's life as the scheduler drives it: allocate slots for all tokens, then hand them
// to the cache (which returns duplicates), keeping any partial last page to free by hand.
class RadixCacheTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
    std::int64_t page() const { return GetParam(); }
    void make(std::int64_t n_slots, EvictionPolicy policy = EvictionPolicy::kLru) {
        alloc_ = std::make_unique<SlotAllocator>(n_slots, page());
        cache_ = make_radix_cache(*alloc_, page(), policy);
    }
    // Computes `tokens` reusing the cached prefix, caches it, frees the unaligned tail.
    NodeId run_request(const Tokens& tokens, const InsertOptions& options = {}) {
        MatchResult m = cache_->match_prefix(tokens);
        std::vector<std::int32_t> slots = m.slots;
        const std::int32_t last = slots.empty() ? -1 : slots.back();
        auto fresh = alloc_->alloc(static_cast<std::int64_t>(tokens.size() - slots.size()), last);
        EXPECT_TRUE(fresh.has_value());
        slots.insert(slots.end(), fresh->begin(), fresh->end());
        const auto aligned = tokens.size() / page() * page();
        NodeId node = cache_->insert(std::span(tokens).first(aligned), std::span(slots).first(aligned), options);
        alloc_->free(std::vector<std::int32_t>(slots.begin() + aligned, slots.end()));
        return node;
    }
    void expect_whole() const {
        EXPECT_EQ(alloc_->available() + cache_->total_size(), alloc_->capacity());
        EXPECT_EQ(cache_->evictable_size() + cache_->protected_size(), cache_->total_size());
    }
    static Tokens seq(std::int32_t start, std::int64_t n) {
        Tokens t(static_cast<std::size_t>(n));
        std::iota(t.begin(), t.end(), start);
        return t;
    }

    std::unique_ptr<SlotAllocator> alloc_;
    std::unique_ptr<PrefixCache> cache_;
};

TEST_P(RadixCacheTest, MatchInsertAndSplit) {
    make(256);
    const std::int64_t P = page();
    Tokens a = seq(100, 4 * P);
    run_request(a);
    EXPECT_EQ(cache_->total_size(), 4 * P);
    expect_whole();

    // Shares the first 2 pages, then diverges: the edge is split at the page boundary.
    Tokens b = seq(100, 2 * P);
    Tokens tail = seq(500, 2 * P);
    b.insert(b.end(), tail.begin(), tail.end());
    MatchResult m = cache_->match_prefix(b);
    EXPECT_EQ(static_cast<std::int64_t>(m.slots.size()), 2 * P);
    EXPECT_NE(m.last_node, 0);
    run_request(b);
    EXPECT_EQ(cache_->total_size(), 6 * P);
    expect_whole();

    // Both full sequences match completely with the slots they were cached with.
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(a).slots.size()), 4 * P);
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(b).slots.size()), 4 * P);
    EXPECT_EQ(cache_->match_prefix(a).slots.front(), cache_->match_prefix(b).slots.front());
    EXPECT_NE(cache_->match_prefix(a).slots.back(), cache_->match_prefix(b).slots.back());

    // A query that ends inside an edge splits it so the returned node ends at the match.
    Tokens c = seq(100, 3 * P);
    Tokens x = seq(900, P);
    c.insert(c.end(), x.begin(), x.end());
    m = cache_->match_prefix(c);
    EXPECT_EQ(static_cast<std::int64_t>(m.slots.size()), 3 * P);
    cache_->inc_lock_ref(m.last_node);
    EXPECT_EQ(cache_->protected_size(), 3 * P);
    cache_->dec_lock_ref(m.last_node);
    EXPECT_EQ(cache_->protected_size(), 0);
    expect_whole();
}

TEST_P(RadixCacheTest, DuplicateInsertReturnsSlotsToTheAllocator) {
    make(256);
    const std::int64_t P = page();
    Tokens a = seq(1, 3 * P);
    // Two requests computed the same tokens independently (no match in between).
    auto s1 = alloc_->alloc(3 * P);
    auto s2 = alloc_->alloc(3 * P);
    ASSERT_TRUE(s1 && s2);
    cache_->insert(a, *s1);
    const auto before = alloc_->available();
    cache_->insert(a, *s2);  // all duplicates: freed
    EXPECT_EQ(alloc_->available(), before + 3 * P);
    EXPECT_EQ(cache_->match_prefix(a).slots, *s1);
    expect_whole();
}

TEST_P(RadixCacheTest, PartialPagesAreNotMatched) {
    make(256);
    const std::int64_t P = page();
    Tokens a = seq(1, 2 * P + (P > 1 ? P / 2 : 0));
    run_request(a);
    EXPECT_EQ(cache_->total_size(), 2 * P);
    Tokens q = seq(1, 2 * P - 1);  // ends one token short of the second page
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(q).slots.size()), P == 1 ? 1 : P);
    if (P > 1) {
        // Same first page, but the second page differs in its last token.
        Tokens d = seq(1, 2 * P);
        d.back() = 7777;
        EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(d).slots.size()), P);
    }
    expect_whole();
}

TEST_P(RadixCacheTest, EvictsLeastRecentlyUsedUnlockedLeavesFirst) {
    make(256);
    const std::int64_t P = page();
    Tokens a = seq(1000, 2 * P), b = seq(2000, 2 * P), c = seq(3000, 2 * P);
    run_request(a);
    run_request(b);
    run_request(c);
    cache_->match_prefix(a);  // a is now the most recent; b is the least recent
    NodeId locked_c = cache_->match_prefix(c).last_node;
    cache_->inc_lock_ref(locked_c);  // c is in use
    EXPECT_EQ(cache_->evictable_size(), 4 * P);
    EXPECT_EQ(cache_->evict(1), 2 * P);  // evicts whole leaves: b
    EXPECT_TRUE(cache_->match_prefix(b).slots.empty());
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(a).slots.size()), 2 * P);
    // Asking for more than is evictable frees what it can and never touches c.
    EXPECT_EQ(cache_->evict(100 * P), 2 * P);
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(c).slots.size()), 2 * P);
    EXPECT_EQ(cache_->evictable_size(), 0);
    EXPECT_FALSE(cache_->reset());  // c still locked
    cache_->dec_lock_ref(locked_c);
    expect_whole();
    EXPECT_TRUE(cache_->reset());
    EXPECT_EQ(cache_->total_size(), 0);
    EXPECT_EQ(alloc_->available(), alloc_->capacity());
}

// Evicts one leaf at a time and returns the names of the sequences in the order they went.
// Presence is checked by matching the survivors oldest first, which keeps their recency order.
std::vector<std::string> eviction_order(PrefixCache& cache, std::vector<std::pair<std::string, Tokens>> by_recency) {
    std::vector<std::string> order;
    while (!by_recency.empty()) {
        if (cache.evict(1) == 0) break;
        for (auto it = by_recency.begin(); it != by_recency.end();) {
            if (cache.match_prefix(it->second).slots.empty()) {
                order.push_back(it->first);
                it = by_recency.erase(it);
            } else {
                ++it;
            }
        }
    }
    return order;
}

// Four prompts cached in this order: a three times (priority 0), b twice (5), c once (5), d
// once (-1). Each of SGLang's policies evicts them in its own order.
TEST_P(RadixCacheTest, EachEvictionPolicyHasItsOrder) {
    const std::int64_t P = page();
    const Tokens a = seq(1000, 2 * P), b = seq(2000, 2 * P), c = seq(3000, 2 * P), d = seq(4000, 2 * P);
    const std::pair<EvictionPolicy, std::vector<std::string>> expected[] = {
        {EvictionPolicy::kLru, {"a", "b", "c", "d"}},       // oldest first
        {EvictionPolicy::kLfu, {"c", "d", "b", "a"}},       // 1, 1, 2, 3 inserts
        {EvictionPolicy::kSlru, {"c", "d", "a", "b"}},      // inserted once, then the protected by age
        {EvictionPolicy::kPriority, {"d", "a", "b", "c"}},  // -1, 0, then 5 by age
    };
    for (const auto& [policy, order] : expected) {
        make(256, policy);
        for (int i = 0; i < 3; ++i) run_request(a, {.priority = 0});
        for (int i = 0; i < 2; ++i) run_request(b, {.priority = 5});
        run_request(c, {.priority = 5});
        run_request(d, {.priority = -1});
        EXPECT_EQ(eviction_order(*cache_, {{"a", a}, {"b", b}, {"c", c}, {"d", d}}), order)
            << "policy " << static_cast<int>(policy);
        expect_whole();
    }
}

// The chunks of a prompt still prefilling are no hits; a node cut in two keeps its count on
// both sides; a prefix shared by requests keeps the highest priority of them.
TEST_P(RadixCacheTest, HitsAndPrioritiesFollowInsertsAcrossSplits) {
    const std::int64_t P = page();
    make(256, EvictionPolicy::kLfu);
    const Tokens old_once = seq(1000, 2 * P), chunked = seq(2000, 2 * P);
    run_request(old_once);
    for (int i = 0; i < 3; ++i) run_request(chunked, {.chunked = true});
    EXPECT_EQ(eviction_order(*cache_, {{"old_once", old_once}, {"chunked", chunked}}),
              (std::vector<std::string>{"chunked", "old_once"}));

    // e twice, then f once sharing e's first page, then l twice. The split leaves e's tail 2
    // hits and their shared page 3 (2 + f's), f's tail 1. So f's tail goes first although e
    // is older, then e's tail (2, older than l), then l (2) before the shared page (3).
    make(256, EvictionPolicy::kLfu);
    const Tokens e = seq(3000, 3 * P), l = seq(6000, 2 * P);
    Tokens f = seq(3000, P);
    const Tokens f_tail = seq(7000, 2 * P);
    f.insert(f.end(), f_tail.begin(), f_tail.end());
    run_request(e);
    run_request(e);
    run_request(f);
    run_request(l);
    run_request(l);
    EXPECT_EQ(cache_->evict(1), 2 * P);
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(f).slots.size()), P) << "f's own tail went";
    EXPECT_EQ(cache_->evict(1), 2 * P);
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(e).slots.size()), P) << "e's tail went";
    EXPECT_EQ(cache_->evict(1), 2 * P);
    EXPECT_TRUE(cache_->match_prefix(l).slots.empty()) << "l went before the shared page";
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(e).slots.size()), P);
    expect_whole();

    // Under priority: g (9) shares its first page with h (1), which came later. h's tail goes
    // first; then g's tail and the shared page (9) outlast i (2), cached after both.
    make(256, EvictionPolicy::kPriority);
    const Tokens g = seq(5000, 2 * P), i = seq(9000, 2 * P);
    Tokens h = seq(5000, P);
    const Tokens h_tail = seq(8000, P);
    h.insert(h.end(), h_tail.begin(), h_tail.end());
    run_request(g, {.priority = 9});
    run_request(h, {.priority = 1});
    run_request(i, {.priority = 2});
    EXPECT_EQ(cache_->evict(1), P);
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(h).slots.size()), P);
    EXPECT_EQ(cache_->evict(1), 2 * P);
    EXPECT_TRUE(cache_->match_prefix(i).slots.empty());
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(g).slots.size()), 2 * P);
    expect_whole();
}

TEST(EvictionPolicyTest, ParsesSglangsNamesInAnyCase) {
    EXPECT_EQ(parse_eviction_policy("lru").value(), EvictionPolicy::kLru);
    EXPECT_EQ(parse_eviction_policy("LFU").value(), EvictionPolicy::kLfu);
    EXPECT_EQ(parse_eviction_policy("slru").value(), EvictionPolicy::kSlru);
    EXPECT_EQ(parse_eviction_policy("Priority").value(), EvictionPolicy::kPriority);
    const auto fifo = parse_eviction_policy("fifo");
    ASSERT_FALSE(fifo.ok());
    EXPECT_EQ(fifo.status().message(), "--radix-eviction-policy fifo is not a policy; use lru, lfu, slru or priority");
}

TEST_P(RadixCacheTest, EvictionCascadesToParentsAndLocksCoverThePath) {
    make(256);
    const std::int64_t P = page();
    Tokens base = seq(1, 2 * P);
    Tokens a = base, b = base;
    Tokens ta = seq(100, P), tb = seq(200, P);
    a.insert(a.end(), ta.begin(), ta.end());
    b.insert(b.end(), tb.begin(), tb.end());
    NodeId na = run_request(a);
    run_request(b);
    EXPECT_EQ(cache_->total_size(), 4 * P);
    cache_->inc_lock_ref(na);  // locks a's leaf and the shared base
    EXPECT_EQ(cache_->protected_size(), 3 * P);
    EXPECT_EQ(cache_->evict(100 * P), P);  // only b's leaf may go
    cache_->dec_lock_ref(na);
    EXPECT_EQ(cache_->evict(100 * P), 3 * P);  // a's leaf, then the base it leaves behind
    EXPECT_EQ(cache_->total_size(), 0);
    expect_whole();
}

TEST_P(RadixCacheTest, SessionReferencedLeavesAreEvictedAfterTheOthers) {
    make(256);
    const std::int64_t P = page();
    Tokens base = seq(1, 2 * P);
    Tokens a = base, b = base, c = seq(500, P);
    Tokens ta = seq(100, P), tb = seq(200, P);
    a.insert(a.end(), ta.begin(), ta.end());
    b.insert(b.end(), tb.begin(), tb.end());
    const NodeId na = run_request(a);  // the oldest, referenced by a session
    run_request(b);
    run_request(c);
    cache_->inc_session_ref(na);
    EXPECT_EQ(cache_->evictable_size(), 5 * P) << "referenced is still evictable";
    // b's leaf and c go first although a's leaf is older; then a's leaf, then the base.
    EXPECT_EQ(cache_->evict(1), P);
    EXPECT_TRUE(cache_->match_prefix(b).slots.size() == static_cast<std::size_t>(2 * P)) << "b's own page went";
    EXPECT_EQ(cache_->evict(1), P);
    EXPECT_TRUE(cache_->match_prefix(c).slots.empty());
    EXPECT_EQ(static_cast<std::int64_t>(cache_->match_prefix(a).slots.size()), 3 * P);
    // A split below the reference keeps the counts on the whole root path.
    Tokens a2 = seq(1, P);
    const Tokens tail = seq(900, P);
    a2.insert(a2.end(), tail.begin(), tail.end());
    run_request(a2);  // splits the base after its first page
    EXPECT_EQ(cache_->evict(1), P) << "a2's leaf, unreferenced";
    EXPECT_EQ(cache_->evict(1), P) << "then a's leaf";
    cache_->dec_session_ref(na);  // evicted: nothing to do
    EXPECT_EQ(cache_->evict(100 * P), 2 * P) << "the base's two nodes";
    expect_whole();
    // Released before eviction, a reference leaves plain LRU order.
    const NodeId nb = run_request(b);
    run_request(c);
    cache_->inc_session_ref(nb);
    cache_->dec_session_ref(nb);
    EXPECT_EQ(cache_->evict(1), 3 * P) << "b is the least recently used again";
    expect_whole();
}

TEST_P(RadixCacheTest, ManyRequestsKeepAccountingWhole) {
    make(64 * page());
    const std::int64_t P = page();
    std::uint32_t state = 12345;
    for (int i = 0; i < 200; ++i) {
        state = state * 1103515245u + 12345u;
        const auto len = static_cast<std::int64_t>(P + (state >> 8) % (6 * P));
        // One of 3 shared stems, then a tail from one of 5 variants: lots of splits, hits
        // and duplicate inserts.
        const auto stem = static_cast<std::int32_t>((state >> 12) % 3);
        const auto variant = static_cast<std::int32_t>((state >> 16) % 5);
        Tokens t(static_cast<std::size_t>(len));
        for (std::int64_t j = 0; j < len; ++j) {
            t[j] = j < 2 * P ? stem * 1000 + static_cast<std::int32_t>(j)
                             : variant * 100 + static_cast<std::int32_t>(j % 13);
        }
        const std::int64_t need = len + P;
        if (alloc_->available() < need) cache_->evict(need);
        run_request(t);
        expect_whole();
    }
    EXPECT_TRUE(cache_->reset());
    EXPECT_EQ(alloc_->available(), alloc_->capacity());
}

TEST(ChunkCacheTest, NeverMatchesAndFreesOnInsert) {
    SlotAllocator alloc(32, 1);
    auto cache = make_chunk_cache(alloc);
    auto s = alloc.alloc(10);
    ASSERT_TRUE(s.has_value());
    Tokens t = Tokens(10, 3);
    cache->insert(t, *s);
    EXPECT_EQ(alloc.available(), 32);
    EXPECT_TRUE(cache->match_prefix(t).slots.empty());
    EXPECT_EQ(cache->total_size(), 0);
    EXPECT_TRUE(cache->reset());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, RadixCacheTest, ::testing::Values(1, 4, 16));

}  // namespace
}  // namespace tessera::kvcache
