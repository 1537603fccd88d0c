// layers/dp_attention_test.cpp — the padding-mode rule with SGLang's cases, the buffer
// layouts, and the gather / scatter collectives on 4 ranks as threads (shared memory):
// attn_dp 2 × attn_tp 2 and attn_dp 4 × attn_tp 1, both modes, partial and replicated rows.

#include "layers/dp_attention.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>

#include "dist/process_group.h"
#include "dist/store.h"

namespace tessera::layers {
namespace {

TEST(DpPaddingMode, AnyPrefillUsesSumLen) {
    const std::vector<std::int64_t> even = {4, 4};
    EXPECT_EQ(dp_padding_mode(true, even), DpPaddingMode::kSumLen);
    EXPECT_EQ(dp_padding_mode(false, even), DpPaddingMode::kMaxLen);
}

TEST(DpPaddingMode, DecodePadsWhenPaddingCostsAtMostTheRows) {
    // sum · 2 >= max · groups: ties prefer max_len.
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{3, 1}), DpPaddingMode::kMaxLen);  // 8 >= 6
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{2, 0}), DpPaddingMode::kMaxLen);  // 4 >= 4
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{5, 0}), DpPaddingMode::kMaxLen);  // 10 >= 10
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{8, 1, 0, 0}), DpPaddingMode::kSumLen);  // 18 < 32
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{8, 8, 0, 0}), DpPaddingMode::kMaxLen);  // 32 >= 32
    EXPECT_EQ(dp_padding_mode(false, std::vector<std::int64_t>{0, 0}), DpPaddingMode::kMaxLen);
}

TEST(DpBufferLayout, SumLenPacksSlotsBackToBack) {
    const DpBufferLayout l = dp_buffer_layout(DpPaddingMode::kSumLen, std::vector<std::int64_t>{3, 0, 2}, 2);
    EXPECT_EQ(l.offsets, (std::vector<std::int64_t>{0, 3, 3}));
    EXPECT_EQ(l.rows, 5);
}

TEST(DpBufferLayout, MaxLenRoundsSlotsToAttentionTp) {
    const DpBufferLayout l = dp_buffer_layout(DpPaddingMode::kMaxLen, std::vector<std::int64_t>{3, 1}, 2);
    EXPECT_EQ(l.slot_rows, 4);
    EXPECT_EQ(l.offsets, (std::vector<std::int64_t>{0, 4}));
    EXPECT_EQ(l.rows, 8);
    EXPECT_EQ(dp_buffer_layout(DpPaddingMode::kMaxLen, std::vector<std::int64_t>{3, 1}, 1).rows, 6);
}

// ---- collectives -----------------------------------------------------------------------------

constexpr std::int64_t kHidden = 3;

// Rank r's value for row i of group g's rows (integers: sums are exact in any order).
float cell(int rank, int group, std::int64_t row, std::int64_t col) {
    return static_cast<float>(100 * group + 10 * row + col + rank);
}

struct Rank {
    std::unique_ptr<dist::ProcessGroup> tp, attn_tp;
};

// 4 threads, one TP group of 4 and attention-TP groups of `attn_tp` consecutive ranks.
void run_world(int attn_tp, const std::function<void(const DpAttentionParallel&)>& body) {
    static std::atomic<int> counter{0};
    const std::string name = "dpa" + std::to_string(counter.fetch_add(1));
    auto store = dist::make_hash_store();
    constexpr int kRanks = 4;
    std::latch done(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
        threads.emplace_back([&, r] {
            dist::ProcessGroupOptions o;
            o.name = name + "_tp";
            o.rank = r;
            o.size = kRanks;
            o.timeout = std::chrono::milliseconds(20'000);
            auto tp = dist::make_shm_group(*store, o);
            ASSERT_TRUE(tp.ok()) << tp.status().to_string();
            std::unique_ptr<dist::ProcessGroup> group;
            if (attn_tp > 1) {
                dist::ProcessGroupOptions a = o;
                a.name = name + "_attn" + std::to_string(r / attn_tp);
                a.rank = r % attn_tp;
                a.size = attn_tp;
                auto made = dist::make_shm_group(*store, a);
                ASSERT_TRUE(made.ok()) << made.status().to_string();
                group = std::move(made).value();
            }
            DpAttentionParallel dpa{r / attn_tp, kRanks / attn_tp, r % attn_tp, attn_tp, group.get(), tp->get()};
            body(dpa);
            done.arrive_and_wait();
        });
    }
    for (auto& t : threads) t.join();
}

void check_gather_and_scatter(int attn_tp, DpPaddingMode mode, const std::vector<std::int64_t>& counts, bool partial) {
    SCOPED_TRACE(testing::Message() << "attn_tp " << attn_tp << " " << dp_padding_mode_name(mode)
                                    << (partial ? " partial" : " replicate"));
    const DpBufferLayout layout = dp_buffer_layout(mode, counts, attn_tp);
    run_world(attn_tp, [&](const DpAttentionParallel& dpa) {
        const int tp_rank = dpa.dp_rank * attn_tp + dpa.tp_rank;
        const std::int64_t n = counts[dpa.dp_rank];
        std::vector<float> local(static_cast<std::size_t>(n * kHidden));
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t c = 0; c < kHidden; ++c)
                local[i * kHidden + c] = cell(partial ? tp_rank : 0, dpa.dp_rank, i, c);
        std::vector<float> global;
        ASSERT_TRUE(dp_gather(local, kHidden, layout, partial, dpa, global).ok());
        ASSERT_EQ(static_cast<std::int64_t>(global.size()), layout.rows * kHidden);
        for (int g = 0; g < dpa.dp_size; ++g) {
            for (std::int64_t i = 0; i < counts[g]; ++i) {
                for (std::int64_t c = 0; c < kHidden; ++c) {
                    float want = 0;
                    for (int t = 0; t < attn_tp; ++t) want += partial ? cell(g * attn_tp + t, g, i, c) : 0;
                    if (!partial) want = cell(0, g, i, c);
                    EXPECT_EQ(global[(layout.offsets[g] + i) * kHidden + c], want) << "group " << g << " row " << i;
                }
            }
        }
        // Back: as reduced rows (dp_scatter) and as per-rank shares (dp_reduce_scatter).
        std::vector<float> back(static_cast<std::size_t>(n * kHidden), -1.0f);
        dp_scatter(global, kHidden, layout, dpa, back.data());
        for (std::int64_t i = 0; i < n * kHidden; ++i) EXPECT_EQ(back[i], global[layout.local_offset(dpa.dp_rank) * kHidden + i]);
        if (mode == DpPaddingMode::kMaxLen) {
            std::vector<float> scratch;
            ASSERT_TRUE(dp_reduce_scatter(global, kHidden, layout, dpa, scratch, back.data()).ok());
            for (std::int64_t i = 0; i < n * kHidden; ++i)
                EXPECT_EQ(back[i], 4 * global[layout.local_offset(dpa.dp_rank) * kHidden + i]);
        }
    });
}

TEST(DpGather, EveryModeAndLayoutGivesEveryGroupsRows) {
    for (int attn_tp : {1, 2}) {
        const std::vector<std::int64_t> counts = attn_tp == 2 ? std::vector<std::int64_t>{3, 1}
                                                              : std::vector<std::int64_t>{3, 0, 2, 1};
        for (DpPaddingMode mode : {DpPaddingMode::kMaxLen, DpPaddingMode::kSumLen})
            for (bool partial : {false, true}) check_gather_and_scatter(attn_tp, mode, counts, partial);
    }
}

TEST(DpGather, ReduceScatterRefusesSumLen) {
    const DpBufferLayout layout = dp_buffer_layout(DpPaddingMode::kSumLen, std::vector<std::int64_t>{1, 1}, 1);
    DpAttentionParallel dpa;
    std::vector<float> scratch, global(2 * kHidden), local(kHidden);
    EXPECT_FALSE(dp_reduce_scatter(global, kHidden, layout, dpa, scratch, local.data()).ok());
}

}  // namespace
}  // namespace tessera::layers
