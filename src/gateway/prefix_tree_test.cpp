#include "gateway/prefix_tree.h"

#include <gtest/gtest.h>

namespace tessera::gateway {
namespace {

TEST(PrefixTreeTest, LongestPrefixNamesItsTenant) {
    PrefixTree t;
    t.insert("hello world", "a");
    t.insert("help me", "b");
    auto m = t.prefix_match("hello there");
    EXPECT_EQ(m.matched, 6u);  // "hello "
    EXPECT_EQ(m.tenant, "a");
    m = t.prefix_match("help me please");
    EXPECT_EQ(m.matched, 7u);
    EXPECT_EQ(m.tenant, "b");
    m = t.prefix_match("hel");
    EXPECT_EQ(m.matched, 3u);
    EXPECT_EQ(m.tenant, "b") << "both hold 'hel'; the most recent insert wins";
    EXPECT_EQ(t.prefix_match("xyz").matched, 0u);
}

TEST(PrefixTreeTest, AllowedFilterSkipsTenantsThatCannotTakeIt) {
    PrefixTree t;
    t.insert("shared prefix AAAA", "a");
    t.insert("shared", "b");
    auto m = t.prefix_match("shared prefix AAAA", [](const std::string& x) { return x == "b"; });
    EXPECT_EQ(m.matched, 6u);
    EXPECT_EQ(m.tenant, "b");
    m = t.prefix_match("shared prefix AAAA", [](const std::string&) { return false; });
    EXPECT_EQ(m.matched, 0u);
}

TEST(PrefixTreeTest, CountsBytesPerTenantAndEvictsLeastRecentlyUsedLeaves) {
    PrefixTree t;
    t.insert("aaaa1111", "w");  // 8 bytes
    t.insert("aaaa2222", "w");  // +4 (shares "aaaa")
    t.insert("bbbb", "w");      // +4
    EXPECT_EQ(t.tenant_bytes("w"), 16u);
    t.insert("aaaa1111", "w");  // touch: now the most recent
    t.evict(12);
    EXPECT_LE(t.tenant_bytes("w"), 12u);
    EXPECT_EQ(t.prefix_match("aaaa1111").matched, 8u) << "recently used text survives";
    EXPECT_EQ(t.prefix_match("aaaa2222").matched, 4u) << "the oldest leaf went first";
    t.evict(0);
    EXPECT_EQ(t.tenant_bytes("w"), 0u);
    EXPECT_EQ(t.prefix_match("aaaa1111").matched, 0u);
    EXPECT_EQ(t.node_count(), 1u) << "nodes nobody holds are freed";
}

TEST(PrefixTreeTest, RemovingATenantLeavesTheOthers) {
    PrefixTree t;
    t.insert("common text one", "a");
    t.insert("common text two", "b");
    t.remove_tenant("a");
    EXPECT_EQ(t.tenant_bytes("a"), 0u);
    auto m = t.prefix_match("common text one");
    EXPECT_EQ(m.tenant, "b");
    EXPECT_EQ(m.matched, 12u);  // "common text "
    EXPECT_EQ(t.tenant_bytes("b"), 15u);
}

}  // namespace
}  // namespace tessera::gateway
