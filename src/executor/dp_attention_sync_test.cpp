// executor/dp_attention_sync_test.cpp — the DP-attention groups' per-round agreement on a
// control step (a weight update's phase, a memory release): it runs only in the round in which
// every group presents the same one; a group that presents it alone waits, and two different
// ones are told apart. Two groups of one rank each, as threads over a shared-memory TP group.

#include "executor/dp_attention_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dist/process_group.h"
#include "dist/store.h"

namespace tessera::executor {
namespace {

struct Round {
    std::int64_t control[2];  // each group's control fingerprint (0: none)
    std::int64_t tokens[2];
};

// Every round's agreement, as each group saw it.
std::vector<std::vector<DpAttentionSync::Agreed>> agree(const std::vector<Round>& rounds) {
    static std::atomic<int> job{0};
    const std::string name = "dpa_sync_" + std::to_string(job.fetch_add(1));
    std::unique_ptr<dist::Store> store = dist::make_hash_store();
    std::vector<std::vector<DpAttentionSync::Agreed>> seen(2);
    std::vector<std::thread> groups;
    for (int g = 0; g < 2; ++g) {
        groups.emplace_back([&, g] {
            dist::ProcessGroupOptions o;
            o.name = name;
            o.rank = g;
            o.size = 2;
            o.timeout = std::chrono::seconds(10);
            auto tp = dist::make_shm_group(*store, o);
            ASSERT_TRUE(tp.ok()) << tp.status().to_string();
            DpAttentionSync sync({.dp_rank = g, .dp_size = 2, .tp_rank = 0, .tp_size = 1, .tp_group = tp->get()});
            for (const Round& r : rounds) {
                auto agreed = sync.exchange({.tokens = r.tokens[g], .logit_rows = r.tokens[g] > 0 ? 1 : 0,
                                             .control = r.control[g]});
                ASSERT_TRUE(agreed.ok()) << agreed.status().to_string();
                seen[g].push_back(*agreed);
            }
        });
    }
    for (std::thread& t : groups) t.join();
    return seen;
}

TEST(DpAttentionSyncTest, AControlStepRunsInTheRoundEveryGroupPresentsIt) {
    const std::int64_t update = 0x1234567, other = 0x7654321;
    const auto seen = agree({{{update, 0}, {0, 5}},       // group 1 still decodes: group 0 waits
                             {{update, update}, {0, 0}},  // both: the control round
                             {{update, other}, {0, 0}},   // two different ones
                             {{0, 0}, {3, 0}}});          // an ordinary round
    for (int g = 0; g < 2; ++g) {
        EXPECT_FALSE(seen[g][0].control) << "group " << g;
        EXPECT_FALSE(seen[g][0].controls_differ);
        EXPECT_TRUE(seen[g][0].any_tokens && seen[g][0].runs()) << "group 0 joins group 1's round";
        EXPECT_TRUE(seen[g][1].control);
        EXPECT_TRUE(seen[g][1].runs()) << "a control round runs with no tokens";
        EXPECT_FALSE(seen[g][2].control);
        EXPECT_TRUE(seen[g][2].controls_differ);
        EXPECT_FALSE(seen[g][3].control || seen[g][3].controls_differ);
        EXPECT_EQ(seen[g][3].step.num_tokens, (std::vector<std::int64_t>{3, 0}));
    }
}

}  // namespace
}  // namespace tessera::executor
