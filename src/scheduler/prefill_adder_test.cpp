#include "scheduler/prefill_adder.h"

#include <map>

#include <gtest/gtest.h>

namespace tessera::scheduler {
namespace {

// A pool with `free` slots and per-node evictable prefixes that locking takes away.
class FakeKv final : public KvBudgetView {
 public:
    std::int64_t free = 0;
    std::map<kvcache::NodeId, std::int64_t> evictable_prefix;  // node → its unlocked tokens
    std::map<kvcache::NodeId, int> locks;

    std::int64_t available_and_evictable() const override {
        std::int64_t ev = 0;
        for (const auto& [node, n] : evictable_prefix)
            if (locks.count(node) == 0 || locks.at(node) == 0) ev += n;
        return free + ev;
    }
    void inc_lock_ref(kvcache::NodeId node) override { ++locks[node]; }
    void dec_lock_ref(kvcache::NodeId node) override { --locks[node]; }
};

PrefillCandidate cand(std::size_t id, std::int64_t extend, std::int64_t max_new,
                      std::int64_t prefix = 0, kvcache::NodeId node = 0) {
    return {.id = id, .prefix_len = prefix, .extend_input_len = extend, .max_new_tokens = max_new,
            .last_node = node};
}

TEST(PrefillAdderTest, ChargesExtendPlusClippedReserveUntilNoToken) {
    FakeKv kv;
    kv.free = 1000;
    PrefillAdder adder({.max_new_reqs = 100}, {}, kv);
    EXPECT_EQ(adder.add_one_req(cand(0, 100, 200)), AddReqResult::kContinue);  // 300
    EXPECT_EQ(adder.add_one_req(cand(1, 100, 5000)), AddReqResult::kNoToken);  // 100 + 4096
    EXPECT_EQ(adder.add_one_req(cand(2, 300, 300)), AddReqResult::kContinue);  // 900 total
    EXPECT_EQ(adder.add_one_req(cand(3, 50, 60)), AddReqResult::kNoToken);     // 110 >= 100
    ASSERT_EQ(adder.can_run().size(), 2u);
    EXPECT_EQ(adder.can_run()[1].id, 2u);
    EXPECT_EQ(adder.log_input_tokens(), 400);
    EXPECT_DOUBLE_EQ(adder.rem_total_tokens(), 100.0);
}

// Mixed chunks: the running batch's decode tokens come off both token budgets first.
TEST(PrefillAdderTest, MixedDecodeTokensLowerTheChunkAndInputBudgets) {
    FakeKv kv;
    kv.free = 100000;
    PrefillAdder chunked({.chunked_prefill_size = 64, .max_new_reqs = 10, .mixed_decode_tokens = 10}, {}, kv);
    EXPECT_EQ(chunked.add_one_req(cand(0, 100, 10)), AddReqResult::kOther);
    ASSERT_EQ(chunked.can_run().size(), 1u);
    EXPECT_EQ(chunked.can_run()[0].extend_len, 54);
    EXPECT_TRUE(chunked.can_run()[0].truncated);
    PrefillAdder input({.max_prefill_tokens = 100, .max_new_reqs = 10, .mixed_decode_tokens = 30}, {}, kv);
    EXPECT_EQ(input.add_one_req(cand(0, 60, 10)), AddReqResult::kContinue);
    EXPECT_EQ(input.add_one_req(cand(1, 20, 10)), AddReqResult::kOther);  // 70 − 60 = 10 left
}

TEST(PrefillAdderTest, RunningRequestsReserveTheirExpectedRemainder) {
    FakeKv kv;
    kv.free = 1000;
    // min(10000 − 0, 4096) · 0.5 + (100 − 60) · 0.5 = 2068 > 1000: nothing fits.
    std::vector<RunningReqView> running = {{.max_new_tokens = 10000, .output_len = 0},
                                           {.max_new_tokens = 100, .output_len = 60}};
    PrefillAdder full({.new_token_ratio = 0.5, .max_new_reqs = 10}, running, kv);
    EXPECT_EQ(full.add_one_req(cand(0, 1, 1)), AddReqResult::kNoToken);
    running.pop_back();
    running[0].max_new_tokens = 1000;  // 1000 · 0.5 = 500 reserved
    PrefillAdder some({.new_token_ratio = 0.5, .max_new_reqs = 10}, running, kv);
    EXPECT_EQ(some.add_one_req(cand(0, 200, 200)), AddReqResult::kContinue);
    EXPECT_EQ(some.add_one_req(cand(1, 50, 50)), AddReqResult::kNoToken);  // 100 >= 100
}

TEST(PrefillAdderTest, InputBudgetAndRequestCaps) {
    FakeKv kv;
    kv.free = 100000;
    PrefillAdder adder({.max_prefill_tokens = 1000, .max_new_reqs = 100}, {}, kv);
    EXPECT_EQ(adder.add_one_req(cand(0, 2000, 10)), AddReqResult::kOther);  // admitted, budget spent
    EXPECT_EQ(adder.can_run().size(), 1u);  // the first request may exceed it alone
    PrefillAdder b({.max_prefill_tokens = 1000, .max_new_reqs = 100}, {}, kv);
    EXPECT_EQ(b.add_one_req(cand(0, 600, 10)), AddReqResult::kContinue);
    EXPECT_EQ(b.add_one_req(cand(1, 400, 10)), AddReqResult::kOther);  // 400 >= 400 remaining
    EXPECT_EQ(b.can_run().size(), 1u);

    PrefillAdder cap({.max_new_reqs = 2}, {}, kv);
    EXPECT_EQ(cap.add_one_req(cand(0, 1, 1)), AddReqResult::kContinue);
    EXPECT_EQ(cap.add_one_req(cand(1, 1, 1)), AddReqResult::kContinue);
    EXPECT_EQ(cap.add_one_req(cand(2, 1, 1)), AddReqResult::kReqLimit);
    PrefillAdder pmax({.max_new_reqs = 10, .prefill_max_requests = 1}, {}, kv);
    EXPECT_EQ(pmax.add_one_req(cand(0, 1, 1)), AddReqResult::kContinue);
    EXPECT_EQ(pmax.add_one_req(cand(1, 1, 1)), AddReqResult::kOther);
}

TEST(PrefillAdderTest, ChunksTheRequestThatExceedsTheChunkBudgetInWholePages) {
    FakeKv kv;
    kv.free = 100000;
    PrefillAdder adder({.page_size = 16, .chunked_prefill_size = 100, .max_new_reqs = 10}, {}, kv);
    EXPECT_EQ(adder.add_one_req(cand(0, 30, 10)), AddReqResult::kContinue);  // charged 32
    EXPECT_EQ(adder.add_one_req(cand(1, 500, 10)), AddReqResult::kContinue);  // 68 left → 64
    // 4 tokens of chunk budget left: less than a page, so nothing more is chunked.
    EXPECT_EQ(adder.add_one_req(cand(2, 10, 10)), AddReqResult::kOther);
    ASSERT_EQ(adder.can_run().size(), 2u);
    EXPECT_EQ(adder.can_run()[1].extend_len, 64);
    EXPECT_TRUE(adder.can_run()[1].truncated);
    EXPECT_EQ(adder.chunked_id(), 1u);

    // Next round: the chunked request comes first and takes what the chunk budget allows.
    PrefillAdder next({.page_size = 16, .chunked_prefill_size = 100, .max_new_reqs = 10}, {}, kv);
    next.add_chunked_req(cand(1, 436, 10, 64));
    EXPECT_EQ(next.can_run()[0].extend_len, 96);
    EXPECT_TRUE(next.can_run()[0].truncated);
    EXPECT_EQ(next.log_hit_tokens(), 0);  // continuing chunks are not cache hits
    // Its last chunk is admitted whole, with the decode reserve.
    PrefillAdder last({.page_size = 16, .chunked_prefill_size = 100, .max_new_reqs = 10}, {}, kv);
    last.add_chunked_req(cand(1, 20, 10, 480));
    EXPECT_EQ(last.can_run()[0].extend_len, 20);
    EXPECT_FALSE(last.can_run()[0].truncated);
    EXPECT_FALSE(last.chunked_id().has_value());
}

TEST(PrefillAdderTest, LockingTheMatchedPrefixRemovesItFromTheBudget) {
    FakeKv kv;
    kv.free = 100;
    kv.evictable_prefix[7] = 60;  // the candidate's own cached prefix is evictable
    PrefillAdder adder({.max_new_reqs = 10}, {}, kv);
    // 95 + 10 < 160 before locking, but not < 100 once the prefix is locked.
    EXPECT_EQ(adder.add_one_req(cand(0, 95, 10, 60, 7)), AddReqResult::kNoToken);
    EXPECT_EQ(kv.locks[7], 0);  // released again
    EXPECT_EQ(adder.add_one_req(cand(1, 50, 10, 60, 7)), AddReqResult::kContinue);
    EXPECT_EQ(kv.locks[7], 1);  // kept for the admitted request
    EXPECT_EQ(adder.log_hit_tokens(), 60);
}

}  // namespace
}  // namespace tessera::scheduler
