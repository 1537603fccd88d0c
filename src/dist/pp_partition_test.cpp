#include "dist/pp_partition.h"

#include <gtest/gtest.h>

namespace tessera::dist {
namespace {

using Ranges = std::vector<LayerRange>;

Ranges ranges(int num_layers, int pp_size, const std::optional<std::string>& partition = std::nullopt) {
    auto r = pp_layer_ranges(num_layers, pp_size, partition);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r.value() : Ranges{};
}

std::string error(int num_layers, int pp_size, const std::optional<std::string>& partition) {
    auto r = pp_layer_ranges(num_layers, pp_size, partition);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
}

// Every stage non-empty, stage i starts where stage i-1 ended, and together they cover
// exactly [0, num_layers).
void expect_tiles(const Ranges& rs, int num_layers) {
    int next = 0;
    for (const LayerRange& r : rs) {
        EXPECT_EQ(r.begin, next);
        EXPECT_GT(r.size(), 0);
        next = r.end;
    }
    EXPECT_EQ(next, num_layers);
}

// Expected splits computed by hand: base = L / pp, rem = L % pp, the last rem stages get
// base + 1 layers.
TEST(PpPartitionTest, DefaultSplitGivesSpareLayersToLastStages) {
    // 61 / 2: base 30, rem 1 → the last stage gets 31.
    EXPECT_EQ(ranges(61, 2), (Ranges{{0, 30}, {30, 61}}));
    // 28 / 4: even.
    EXPECT_EQ(ranges(28, 4), (Ranges{{0, 7}, {7, 14}, {14, 21}, {21, 28}}));
    // 5 / 3: base 1, rem 2 → sizes 1, 2, 2.
    EXPECT_EQ(ranges(5, 3), (Ranges{{0, 1}, {1, 3}, {3, 5}}));
    // 10 / 4: base 2, rem 2 → sizes 2, 2, 3, 3.
    EXPECT_EQ(ranges(10, 4), (Ranges{{0, 2}, {2, 4}, {4, 7}, {7, 10}}));
    EXPECT_EQ(ranges(7, 1), (Ranges{{0, 7}}));
    EXPECT_EQ(ranges(3, 3), (Ranges{{0, 1}, {1, 2}, {2, 3}}));
}

TEST(PpPartitionTest, SingleRankMatchesTheFullList) {
    for (int pp = 1; pp <= 5; ++pp) {
        const Ranges all = ranges(61, pp);
        for (int rank = 0; rank < pp; ++rank) {
            auto r = pp_layer_range(61, rank, pp, std::nullopt);
            ASSERT_TRUE(r.ok()) << r.status().message();
            EXPECT_EQ(r.value(), all[rank]);
        }
    }
    auto r = pp_layer_range(61, 1, 2, std::nullopt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->begin, 30);
    EXPECT_EQ(r->end, 61);
}

TEST(PpPartitionTest, EveryDefaultSplitTilesTheModel) {
    for (int layers = 1; layers <= 64; ++layers)
        for (int pp = 1; pp <= layers && pp <= 16; ++pp) {
            SCOPED_TRACE(testing::Message() << layers << " layers, pp " << pp);
            const Ranges rs = ranges(layers, pp);
            ASSERT_EQ(rs.size(), static_cast<size_t>(pp));
            expect_tiles(rs, layers);
            // Sizes differ by at most one and never decrease along the pipeline.
            for (int i = 1; i < pp; ++i) {
                EXPECT_GE(rs[i].size(), rs[i - 1].size());
                EXPECT_LE(rs[i].size() - rs[0].size(), 1);
            }
        }
}

TEST(PpPartitionTest, ExplicitPartition) {
    EXPECT_EQ(ranges(61, 4, "15,15,15,16"), (Ranges{{0, 15}, {15, 30}, {30, 45}, {45, 61}}));
    EXPECT_EQ(ranges(8, 3, "1,2,5"), (Ranges{{0, 1}, {1, 3}, {3, 8}}));
    EXPECT_EQ(ranges(8, 2, " 3, 5"), (Ranges{{0, 3}, {3, 8}}));  // Python int() tolerates spaces
    EXPECT_EQ(ranges(8, 1, "8"), (Ranges{{0, 8}}));
    expect_tiles(ranges(61, 4, "15,15,15,16"), 61);
    expect_tiles(ranges(8, 3, "1,2,5"), 8);
    auto r = pp_layer_range(8, 2, 3, std::string("1,2,5"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value(), (LayerRange{3, 8}));
}

TEST(PpPartitionTest, PartitionErrorsNameVariableValueAndFix) {
    std::string m = error(9, 3, "3,3");
    EXPECT_NE(m.find("SGLANG_PP_LAYER_PARTITION=3,3 has 2 entries but --pp-size is 3"), std::string::npos) << m;

    m = error(8, 2, "3,4");
    EXPECT_NE(m.find("SGLANG_PP_LAYER_PARTITION=3,4 sums to 7 but the model has 8 layers"),
              std::string::npos)
        << m;

    m = error(8, 2, "3,x");
    EXPECT_NE(m.find("Invalid partition string '3,x'"), std::string::npos) << m;
    EXPECT_NE(m.find("SGLANG_PP_LAYER_PARTITION"), std::string::npos) << m;
    for (const char* bad : {"", "3,", ",5", "3,,5", "3.5,4.5", "3;5", "0x3,5"}) {
        m = error(8, 2, std::string(bad));
        EXPECT_NE(m.find("Invalid partition string"), std::string::npos) << bad << ": " << m;
    }

    m = error(8, 2, "0,8");
    EXPECT_NE(m.find("SGLANG_PP_LAYER_PARTITION=0,8"), std::string::npos) << m;
    EXPECT_NE(m.find("at least one layer"), std::string::npos) << m;
    m = error(8, 3, "-1,4,5");
    EXPECT_NE(m.find("stage 0 -1 layers"), std::string::npos) << m;
}

TEST(PpPartitionTest, MoreStagesThanLayersIsRejected) {
    const std::string m = error(3, 4, std::nullopt);
    EXPECT_NE(m.find("--pp-size 4 is larger than the model's 3 layers"), std::string::npos) << m;
    EXPECT_NE(m.find("--pp-size <= 3"), std::string::npos) << m;
    EXPECT_FALSE(pp_layer_range(3, 0, 4, std::nullopt).ok());
}

TEST(PpPartitionTest, BadArgumentsAreRejected) {
    EXPECT_FALSE(pp_layer_range(8, 2, 2, std::nullopt).ok());
    EXPECT_FALSE(pp_layer_range(8, -1, 2, std::nullopt).ok());
    EXPECT_FALSE(pp_layer_range(8, 0, 0, std::nullopt).ok());
    EXPECT_FALSE(pp_layer_range(0, 0, 1, std::nullopt).ok());
}

TEST(PpPartitionTest, EmbeddingOnFirstStageLmHeadOnLast) {
    EXPECT_TRUE(owns_embedding(0));
    EXPECT_FALSE(owns_embedding(1));
    EXPECT_TRUE(owns_lm_head(3, 4));
    EXPECT_FALSE(owns_lm_head(2, 4));
    EXPECT_TRUE(owns_embedding(0) && owns_lm_head(0, 1));  // pp = 1: one stage does both
}

}  // namespace
}  // namespace tessera::dist
