#include "kvcache/kv_pool.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera::kvcache
