#include "dist/parallel_layout.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera::dist {
namespace {

ParallelLayout make(const ParallelConfig& c) {
    auto layout = ParallelLayout::create(c);
    EXPECT_TRUE(layout.ok()) << layout.status().message();
    return std::move(layout).value();
}

using Groups = std::vector<std::vector<int>>;

// Reference §2.4: tp=16, dp=8 with DP-attention, 2 nodes × 8.
TEST(ParallelLayoutTest, WorkedExampleA_DpAttention) {
    ParallelLayout l = make({.tp_size = 16, .dp_size = 8, .enable_dp_attention = true, .nnodes = 2});
    EXPECT_EQ(l.world_size(), 16);
    EXPECT_EQ(l.attn_tp_size(), 2);
    for (int r = 0; r < 16; ++r) {
        RankCoords c = l.coords(r);
        EXPECT_EQ(c.tp_rank, r);
        EXPECT_EQ(c.attn_dp_rank, r / 2);
        EXPECT_EQ(c.attn_tp_rank, r % 2);
        EXPECT_EQ(c.node, r / 8);
    }
    EXPECT_EQ(l.group_of(GroupKind::kAttnTp, 5), (std::vector<int>{4, 5}));
    EXPECT_EQ(l.groups(GroupKind::kAttnCp).size(), 16u);  // singletons
    // The eight groups' leaders (attn_tp_rank 0), and their attention-TP partners.
    EXPECT_EQ(l.group_of(GroupKind::kAttnDp, 0), (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
    EXPECT_EQ(l.group_of(GroupKind::kAttnDp, 5), (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
    EXPECT_EQ(l.ranks_on_node(1), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(ParallelLayoutTest, WorkedExampleA_MoeViews) {
    // a2a `none`, ep 8: moe_tp 2, EP groups strided by 2.
    ParallelLayout l = make({.tp_size = 16, .dp_size = 8, .ep_size = 8, .enable_dp_attention = true});
    EXPECT_EQ(l.moe_tp_size(), 2);
    EXPECT_EQ(l.group_of(GroupKind::kMoeEp, 0), (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
    EXPECT_EQ(l.group_of(GroupKind::kMoeEp, 7), (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
    EXPECT_EQ(l.group_of(GroupKind::kMoeTp, 7), (std::vector<int>{6, 7}));
    EXPECT_EQ(l.coords(7).moe_ep_rank, 3);
    EXPECT_EQ(l.coords(7).moe_tp_rank, 1);
    // ep = tp (deepep): MOE_EP is the whole TP group, moe_ep_rank = rank.
    ParallelLayout full = make({.tp_size = 16, .dp_size = 8, .ep_size = 16, .enable_dp_attention = true});
    EXPECT_EQ(full.group_of(GroupKind::kMoeEp, 3).size(), 16u);
    EXPECT_EQ(full.coords(11).moe_ep_rank, 11);
    // ep = 1: pure TP MoE.
    ParallelLayout tp_moe = make({.tp_size = 16, .dp_size = 8, .enable_dp_attention = true});
    EXPECT_EQ(tp_moe.moe_tp_size(), 16);
}

// Reference §2.5: pp=2, tp=4.
TEST(ParallelLayoutTest, WorkedExampleB_Pipeline) {
    ParallelLayout l = make({.tp_size = 4, .pp_size = 2});
    EXPECT_EQ(l.world_size(), 8);
    EXPECT_EQ(l.groups(GroupKind::kTp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_EQ(l.groups(GroupKind::kPp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(l.coords(6).pp_rank, 1);
    EXPECT_EQ(l.coords(6).tp_rank, 2);
    // Two nodes: one stage per node.
    ParallelLayout two = make({.tp_size = 4, .pp_size = 2, .nnodes = 2});
    EXPECT_EQ(two.ranks_on_node(0), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(two.ranks_on_node(1), (std::vector<int>{4, 5, 6, 7}));
    // tp=2, pp=4 (the reference's PP example).
    ParallelLayout l24 = make({.tp_size = 2, .pp_size = 4});
    EXPECT_EQ(l24.groups(GroupKind::kPp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(ParallelLayoutTest, PlainDpAddsReplicas) {
    ParallelLayout l = make({.tp_size = 2, .dp_size = 3});
    EXPECT_EQ(l.world_size(), 6);
    EXPECT_EQ(l.groups(GroupKind::kWorld), (Groups{{0, 1}, {2, 3}, {4, 5}}));
    EXPECT_EQ(l.coords(5).replica, 2);
    EXPECT_EQ(l.coords(5).tp_rank, 1);
    // dp 1 turns DP-attention off, as SGLang does.
    ParallelLayout off = make({.tp_size = 2, .dp_size = 1, .enable_dp_attention = true});
    EXPECT_FALSE(off.config().enable_dp_attention);
}

TEST(ParallelLayoutTest, PlainDpPlacesWholeReplicasOnNodes) {
    // Two replicas per node: replica r on node r / 2.
    ParallelLayout four = make({.tp_size = 2, .dp_size = 4, .nnodes = 2});
    EXPECT_EQ(four.ranks_on_node(0), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(four.ranks_on_node(1), (std::vector<int>{4, 5, 6, 7}));
    // One replica per node.
    ParallelLayout two = make({.tp_size = 2, .dp_size = 2, .nnodes = 2});
    EXPECT_EQ(two.coords(2).node, 1);
    EXPECT_EQ(two.coords(1).node, 0);
    // Each replica over two nodes (PP2: one stage per node), replicas in order.
    ParallelLayout wide = make({.tp_size = 2, .pp_size = 2, .dp_size = 2, .nnodes = 4});
    EXPECT_EQ(wide.ranks_on_node(0), (std::vector<int>{0, 1}));
    EXPECT_EQ(wide.ranks_on_node(1), (std::vector<int>{2, 3}));
    EXPECT_EQ(wide.ranks_on_node(2), (std::vector<int>{4, 5}));
    EXPECT_EQ(wide.ranks_on_node(3), (std::vector<int>{6, 7}));
    EXPECT_EQ(wide.groups(GroupKind::kPp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

// Every group kind partitions the world, and coords agree with the groups, for every valid
// combination up to 16 ranks.
TEST(ParallelLayoutTest, EveryGroupPartitionsTheWorldExhaustively) {
    int checked = 0;
    for (int tp : {1, 2, 3, 4, 6, 8, 16})
        for (int pp : {1, 2, 3, 4})
            for (int dp : {1, 2, 4, 8})
                for (bool dpa : {false, true})
                    for (int ep : {1, 2, 4, 8, 16})
                        for (int cp : {1, 2})
                            for (int nnodes : {1, 2, 4}) {
                                ParallelConfig c{.tp_size = tp, .pp_size = pp, .dp_size = dp, .ep_size = ep,
                                                 .attn_cp_size = cp, .enable_dp_attention = dpa, .nnodes = nnodes};
                                if (tp * pp * (dpa ? 1 : dp) > 64) continue;
                                auto layout = ParallelLayout::create(c);
                                if (!layout.ok()) continue;
                                ++checked;
                                const int world = layout->world_size();
                                for (GroupKind kind : {GroupKind::kTp, GroupKind::kPp, GroupKind::kAttnTp,
                                                       GroupKind::kAttnCp, GroupKind::kAttnDp, GroupKind::kMoeEp,
                                                       GroupKind::kMoeTp, GroupKind::kMoeDp, GroupKind::kWorld}) {
                                    std::multiset<int> seen;
                                    for (auto& g : layout->groups(kind)) seen.insert(g.begin(), g.end());
                                    ASSERT_EQ(seen.size(), static_cast<std::size_t>(world)) << group_kind_name(kind);
                                    for (int r = 0; r < world; ++r)
                                        ASSERT_EQ(seen.count(r), 1u) << group_kind_name(kind) << " rank " << r;
                                }
                                for (int r = 0; r < world; ++r) {
                                    RankCoords rc = layout->coords(r);
                                    auto attn_tp = layout->group_of(GroupKind::kAttnTp, r);
                                    ASSERT_EQ(attn_tp[rc.attn_tp_rank], r);
                                    auto attn_dp = layout->group_of(GroupKind::kAttnDp, r);
                                    ASSERT_EQ(attn_dp[rc.attn_dp_rank], r);
                                    for (int member : attn_dp) {
                                        ASSERT_EQ(layout->coords(member).attn_tp_rank, rc.attn_tp_rank);
                                        ASSERT_EQ(layout->coords(member).attn_cp_rank, rc.attn_cp_rank);
                                    }
                                    auto moe_ep = layout->group_of(GroupKind::kMoeEp, r);
                                    ASSERT_EQ(moe_ep[rc.moe_ep_rank], r);
                                    auto pp_group = layout->group_of(GroupKind::kPp, r);
                                    ASSERT_EQ(pp_group[rc.pp_rank], r);
                                    ASSERT_EQ(rc.tp_rank,
                                              (rc.attn_dp_rank * cp + rc.attn_cp_rank) * layout->attn_tp_size() +
                                                  rc.attn_tp_rank);
                                }
                                std::size_t placed = 0;
                                for (int n = 0; n < nnodes; ++n) placed += layout->ranks_on_node(n).size();
                                ASSERT_EQ(placed, static_cast<std::size_t>(world));
                            }
    EXPECT_GT(checked, 200);
}

struct BadCase {
    ParallelConfig config;
    const char* expected;
};

TEST(ParallelLayoutTest, RejectsWhatSglangRejectsNamingTheFlags) {
    const BadCase cases[] = {
        {{.tp_size = 3, .pp_size = 1, .nnodes = 2}, "tp_size must be divisible by number of nodes"},
        {{.tp_size = 2, .dp_size = 3, .nnodes = 2}, "--dp-size 3 replicas cannot be placed on --nnodes 2"},
        {{.tp_size = 3, .dp_size = 2, .nnodes = 4}, "over 2 nodes per replica (--nnodes / --dp-size)"},
        {{.tp_size = 6, .dp_size = 4, .enable_dp_attention = true}, "valid --dp-size: 1, 2, 3, 6"},
        {{.tp_size = 4, .attn_cp_size = 3}, "tp_size must be divisible by attn_cp_size"},
        {{.tp_size = 4, .dp_size = 4, .attn_cp_size = 2, .enable_dp_attention = true}, "Invalid attention topology"},
        {{.tp_size = 4, .moe_dense_tp_size = 2}, "moe_dense_tp_size only supports None, 1, or tp_size"},
        {{.tp_size = 4, .ep_size = 3}, "--ep-size 3 must divide --tp-size 4"},
        {{.tp_size = 4, .pp_size = 2, .moe_dp_size = 2}, "PP is not supported with context parallelism"},
        {{.tp_size = 8, .ep_size = 2, .moe_dp_size = 2}, "--ep-size x --moe-dp-size must equal --tp-size"},
        {{.tp_size = 4, .moe_dp_size = 2, .attn_cp_size = 4}, "may differ from --moe-dp-size"},
        {{.tp_size = 0}, "--tp-size must be at least 1"},
        {{.tp_size = 2, .pp_size = 3, .nnodes = 2}, "cannot place --pp-size 3 x --tp-size 2 on --nnodes 2"},
        {{.nnodes = 2, .node_rank = 2}, "--node-rank 2 must be in [0, --nnodes 2)"},
    };
    for (const BadCase& c : cases) {
        auto layout = ParallelLayout::create(c.config);
        ASSERT_FALSE(layout.ok()) << c.expected;
        EXPECT_NE(layout.status().message().find(c.expected), std::string::npos) << layout.status().message();
    }
}

}  // namespace
}  // namespace tessera::dist
