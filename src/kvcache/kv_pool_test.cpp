#include "kvcache/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "base/process_memory.h"

namespace tessera::kvcache {
namespace {

TEST(SlotAllocatorTest, PageSizeOneHandsOutDistinctSlotsAndNeverSlotZero) {
    SlotAllocator alloc(8, 1);
    EXPECT_EQ(alloc.available(), 8);
    auto a = alloc.alloc(5);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, (std::vector<std::int32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(alloc.available(), 3);
    EXPECT_FALSE(alloc.alloc(4).has_value());  // short: nullopt, nothing taken
    EXPECT_EQ(alloc.available(), 3);
    auto b = alloc.alloc(3);
    ASSERT_TRUE(b.has_value());
    std::set<std::int32_t> all(a->begin(), a->end());
    all.insert(b->begin(), b->end());
    EXPECT_EQ(all.size(), 8u);
    EXPECT_EQ(all.count(0), 0u);
    alloc.free(*a);
    alloc.free(*b);
    EXPECT_EQ(alloc.available(), alloc.capacity());
}

TEST(SlotAllocatorTest, PagedAllocationContinuesTheSequencePage) {
    SlotAllocator alloc(64, 16);  // 4 pages, slots 16..79
    auto a = alloc.alloc(5);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->front(), 16);  // page 0 is padding
    EXPECT_EQ(alloc.available(), 48);
    // 11 more fit the current page, the 12th takes a new one.
    auto b = alloc.alloc(12, a->back());
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ((*b)[0], 21);
    EXPECT_EQ((*b)[10], 31);
    EXPECT_EQ((*b)[11] % 16, 0);
    EXPECT_EQ(alloc.available(), 32);
    // Decode-style: one token at a time stays in the page.
    auto c = alloc.alloc(1, b->back());
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ((*c)[0], b->back() + 1);
    EXPECT_EQ(alloc.available(), 32);
    alloc.free(*a);
    EXPECT_EQ(alloc.available(), 32);  // page still partly used by b
    alloc.free(*b);
    alloc.free(*c);
    EXPECT_EQ(alloc.available(), 64);
}

TEST(SlotAllocatorTest, ShortPoolReturnsNulloptWithoutSideEffects) {
    SlotAllocator alloc(32, 16);
    auto a = alloc.alloc(20);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(alloc.available(), 0);
    EXPECT_FALSE(alloc.alloc(13, a->back()).has_value());  // 12 fit the page, 1 does not
    auto b = alloc.alloc(12, a->back());  // exactly the rest of the page
    ASSERT_TRUE(b.has_value());
    alloc.free(*a);
    alloc.free(*b);
    EXPECT_EQ(alloc.available(), 32);
}

// Sequences keep consecutive slots: a new one starts kGrowthSlots after the run before it,
// and decode steps grow each sequence into the slots right after its last one.
TEST(SlotAllocatorTest, SequencesGrowIntoConsecutiveSlots) {
    constexpr std::int32_t kGap = SlotAllocator::kGrowthSlots;
    SlotAllocator alloc(4096, 1);
    auto a = alloc.alloc(5);
    auto b = alloc.alloc(7);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->front(), 1);
    EXPECT_EQ(b->front(), 6 + kGap);  // a's run ends at slot 5; b leaves it room
    for (int step = 0; step < 100; ++step) {  // interleaved decode steps
        auto na = alloc.alloc(1, a->back());
        auto nb = alloc.alloc(1, b->back());
        ASSERT_TRUE(na && nb);
        EXPECT_EQ(na->front(), a->back() + 1);
        EXPECT_EQ(nb->front(), b->back() + 1);
        a->push_back(na->front());
        b->push_back(nb->front());
    }
    // A chunked prompt continues its own run too.
    auto c = alloc.alloc(10);
    auto c2 = alloc.alloc(20, c->back());
    ASSERT_TRUE(c && c2);
    EXPECT_EQ(c2->front(), c->back() + 1);
    EXPECT_EQ(alloc.available(), 4096 - 105 - 107 - 30);
}

TEST(SlotAllocatorTest, GapsAndFragmentsAreStillHandedOut) {
    SlotAllocator alloc(300, 1);
    auto a = alloc.alloc(10);   // 1..10
    auto b = alloc.alloc(10);   // after a 256-slot gap: 267..276
    ASSERT_TRUE(a && b);
    EXPECT_EQ(b->front(), 267);
    // No run has room for 30 after a gap: the middle of the touched hole between a and b.
    auto c = alloc.alloc(30);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->front(), 11 + (256 - 30) / 2);
    EXPECT_EQ(c->back(), 11 + (256 - 30) / 2 + 29);
    // Everything else still fits, and freeing it all gives back one whole run.
    auto rest = alloc.alloc(alloc.available());
    ASSERT_TRUE(rest.has_value());
    EXPECT_EQ(alloc.available(), 0);
    EXPECT_FALSE(alloc.alloc(1).has_value());
    std::set<std::int32_t> all;
    for (const auto* v : {&*a, &*b, &*c, &*rest}) all.insert(v->begin(), v->end());
    EXPECT_EQ(all.size(), 300u);
    EXPECT_EQ(*all.begin(), 1);
    EXPECT_EQ(*all.rbegin(), 300);
    for (const auto* v : {&*a, &*b, &*c, &*rest}) alloc.free(*v);
    auto whole = alloc.alloc(300);
    ASSERT_TRUE(whole.has_value());
    EXPECT_EQ(whole->front(), 1);
    EXPECT_EQ(whole->back(), 300);
}

// After the pool's pages were given back (/release_memory_occupation), none counts as touched:
// the first sequence starts at the pool's start again, not after the old high-water mark.
TEST(SlotAllocatorTest, ForgettingTouchedPagesStartsAfresh) {
    SlotAllocator alloc(4096, 16);
    const std::vector<std::int32_t> a = *alloc.alloc(100);
    const std::vector<std::int32_t> b = *alloc.alloc(100);
    EXPECT_GT(alloc.touched(), 256);
    alloc.free(a);
    alloc.free(b);
    alloc.forget_touched();
    EXPECT_EQ(alloc.touched(), 0);
    EXPECT_EQ(alloc.available(), 4096);
    EXPECT_EQ(alloc.alloc(10)->front(), 16);  // page 1: page 0 is the padding slot's
}

// Two sequences touch slots 1..276 (the second after a 256-slot growth gap). While a quarter
// of the touched region is free, new sequences split its largest hole in the middle, so each
// neighbour keeps half the room to grow, rather than touching fresh pages: resident memory
// grows with the load, not with the pool.
TEST(SlotAllocatorTest, TouchedPagesAreReusedBeforeFreshOnes) {
    SlotAllocator alloc(8192, 1);
    std::vector<std::vector<std::int32_t>> seqs;
    seqs.push_back(*alloc.alloc(10));
    seqs.push_back(*alloc.alloc(10));
    EXPECT_EQ(seqs[1].front(), 267);
    EXPECT_EQ(alloc.touched(), 276);
    auto third = alloc.alloc(10);
    ASSERT_TRUE(third.has_value());
    EXPECT_EQ(third->front(), 11 + (256 - 10) / 2);  // the middle of the hole 11..266
    auto fresh = alloc.alloc(100);
    ASSERT_TRUE(fresh.has_value());
    EXPECT_EQ(fresh->front(), 11 + (123 - 100) / 2);  // the middle of the larger half, 11..133
    EXPECT_EQ(alloc.touched(), 276);
    seqs.push_back(*third);

    // Churn with at most 8 sequences of up to 200 tokens alive: the touched region stays
    // within what they need with their gaps, far below the 8192-slot pool.
    std::mt19937 gen(7);
    std::vector<std::vector<std::int32_t>> live;
    for (auto& s : seqs) alloc.free(s);
    alloc.free(*fresh);
    for (int op = 0; op < 3000; ++op) {
        if (live.size() < 8 && gen() % 2 == 0) {
            live.push_back(*alloc.alloc(1 + static_cast<std::int64_t>(gen() % 200)));
        } else if (!live.empty()) {
            const std::size_t i = gen() % live.size();
            alloc.free(live[i]);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    EXPECT_LE(alloc.touched(), 8 * (200 + SlotAllocator::kGrowthSlots));
}

// Random allocations, growth and frees against a plain model of which slots are in use.
TEST(SlotAllocatorTest, RandomChurnKeepsSlotsDistinctAndCounted) {
    for (std::int64_t page_size : {1, 4}) {
        SlotAllocator alloc(1024, page_size);
        std::mt19937 gen(static_cast<unsigned>(page_size));
        std::vector<std::vector<std::int32_t>> live;
        std::set<std::int32_t> used;
        for (int op = 0; op < 4000; ++op) {
            const int what = static_cast<int>(gen() % 3);
            if (what == 0 || live.empty()) {
                const std::int64_t n = 1 + static_cast<std::int64_t>(gen() % 40);
                auto got = alloc.alloc(n);
                if (!got) continue;
                for (std::int32_t s : *got) ASSERT_TRUE(used.insert(s).second) << "slot " << s << " handed out twice";
                live.push_back(*got);
            } else if (what == 1) {
                auto& seq = live[gen() % live.size()];
                auto got = alloc.alloc(1 + static_cast<std::int64_t>(gen() % 3), seq.back());
                if (!got) continue;
                for (std::int32_t s : *got) ASSERT_TRUE(used.insert(s).second) << "slot " << s << " handed out twice";
                seq.insert(seq.end(), got->begin(), got->end());
            } else {
                const std::size_t i = gen() % live.size();
                alloc.free(live[i]);
                for (std::int32_t s : live[i]) used.erase(s);
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
            }
            ASSERT_GE(alloc.available(), 0);
            ASSERT_LE(static_cast<std::int64_t>(used.size()) + alloc.available(), alloc.capacity());
        }
        for (const auto& seq : live) alloc.free(seq);
        EXPECT_EQ(alloc.available(), alloc.capacity());
        EXPECT_TRUE(alloc.alloc(alloc.capacity()).has_value());
    }
}

TEST(KvPoolTest, RowsIncludeThePaddingPage) {
    KvPool pool({.shape = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 4},
                 .n_slots = 32,
                 .page_size = 16});
    EXPECT_EQ(pool.row_floats(), 8);
    // Last row (slot 32 + 16 - 1) is writable.
    static_cast<float*>(pool.k(1))[(32 + 16 - 1) * 8 + 7] = 1.0f;
    static_cast<float*>(pool.v(0))[0] = 2.0f;
    EXPECT_EQ(static_cast<float*>(pool.k(1))[(32 + 16 - 1) * 8 + 7], 1.0f);
    // bf16 rows take half the bytes.
    KvPool half({.shape = {.n_layers = 1, .n_kv_heads = 2, .head_dim = 4, .dtype = DType::kBF16},
                 .n_slots = 32,
                 .page_size = 16});
    EXPECT_EQ(half.config().shape.row_bytes(), 16);
    static_cast<std::uint16_t*>(half.k(0))[(32 + 16) * 8 - 1] = 7;
}

// /release_memory_occupation on a rank: the pool's written pages leave the process's resident
// memory and read zero; the pool takes writes again afterwards.
TEST(KvPoolTest, ReleasedPagesLeaveResidentMemory) {
    KvPool pool({.shape = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 128}, .n_slots = 8192, .page_size = 16});
    const KvView kv = pool.view();
    const std::int64_t bytes = 4 * static_cast<std::int64_t>(kv.layer_bytes);  // K and V of two layers
    ASSERT_GE(bytes, std::int64_t{32} << 20);
    const auto fill = [&] {
        for (void* p : {pool.k(0), pool.k(1), pool.v(0), pool.v(1)}) std::memset(p, 1, kv.layer_bytes);
    };
    fill();
    const std::int64_t written = process_memory().resident_bytes;
    release_pages(kv);
    const std::int64_t released = process_memory().resident_bytes;
    EXPECT_GT(written - released, bytes * 9 / 10) << written << " resident before, " << released << " after";
    EXPECT_EQ(static_cast<const char*>(pool.v(1))[kv.layer_bytes / 2], 0);
    fill();
    EXPECT_EQ(static_cast<const char*>(pool.v(1))[kv.layer_bytes / 2], 1);
}

}  // namespace
}  // namespace tessera::kvcache
