// OverlapRunner over a fake inner runner: steps run on the runner's own thread in launch order,
// launch() does not wait for them, future tokens are resolved from the step before (also into
// output_ids), and failures reach collect() without hanging anything.

#include "executor/overlap_runner.h"

#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>
namespace tessera::executor {
namespace {

// Samples token = 100 × (steps it ran so far) + (fed token) for each sequence; can be held at a gate.
class InnerRunner final : public BatchRunner {
 public:
    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override {
        {
            std::unique_lock lock(mu);
            ++started;
            cv.notify_all();
            cv.wait(lock, [this] { return !hold; });
            seen.push_back(batch);
        }
        if (fail_step == static_cast<int>(seen.size()) - 1) return note_failure(failure);
        extended = extended_step == static_cast<int>(seen.size()) - 1;
        std::vector<SampledToken> out;
        for (const ForwardSequence& s : batch.seqs)
            out.push_back({.token = s.need_token ? 100 * static_cast<std::int32_t>(seen.size()) + s.tokens.back() : -1});
        return out;
    }
    void release() {
        std::lock_guard lock(mu);
        hold = false;
        cv.notify_all();
    }
    void wait_started(int n) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return started >= n; });
    }

    std::mutex mu;
    std::condition_variable cv;
    bool hold = false;
    int started = 0;
    int fail_step = -1;
    Status failure = Status::Internal("injected");
    std::vector<ForwardBatch> seen;
    // As a DP-attention runner: the step whose round another group prefilled in.
    bool last_round_extended() const override { return extended; }
    int extended_step = -1;
    bool extended = false;
};

ForwardBatch decode(std::vector<std::pair<std::string, std::int32_t>> seqs) {
    ForwardBatch b;
    for (auto& [rid, token] : seqs)
        b.seqs.push_back({.rid = rid, .tokens = {token}, .start_pos = 4, .need_token = true, .output_ids = {7}});
    return b;
}

TEST(OverlapRunnerTest, LaunchReturnsWhileTheStepRunsAndFutureTokensAreResolved) {
    InnerRunner inner;
    inner.hold = true;
    OverlapRunner runner(inner);
    ASSERT_TRUE(runner.launch(decode({{"a", 5}, {"b", 6}})).ok());
    inner.wait_started(1);  // step 0 is running, held: launch() came back anyway
    ASSERT_TRUE(runner.launch(decode({{"b", kFutureToken}, {"c", 9}, {"a", kFutureToken}})).ok());
    inner.release();
    auto first = runner.collect();
    ASSERT_TRUE(first.ok());
    EXPECT_EQ((*first)[0].token, 105);
    EXPECT_EQ((*first)[1].token, 106);
    auto second = runner.collect();
    ASSERT_TRUE(second.ok());
    ASSERT_EQ(inner.seen.size(), 2u);
    const ForwardBatch& fed = inner.seen[1];
    EXPECT_EQ(fed.seqs[0].tokens, std::vector<std::int32_t>{106});
    EXPECT_EQ(fed.seqs[0].output_ids, (std::vector<std::int32_t>{7, 106}));
    EXPECT_EQ(fed.seqs[1].tokens, std::vector<std::int32_t>{9});
    EXPECT_EQ(fed.seqs[1].output_ids, std::vector<std::int32_t>{7});
    EXPECT_EQ(fed.seqs[2].tokens, std::vector<std::int32_t>{105});
    EXPECT_EQ((*second)[0].token, 306);
    // run() is launch + collect.
    auto third = runner.run(decode({{"c", kFutureToken}}));
    ASSERT_TRUE(third.ok());
    EXPECT_EQ((*third)[0].token, 300 + 209);
}

// Whether another DP group prefilled in a step's round reaches the scheduler with that step,
// though the step thread has run later steps since.
TEST(OverlapRunnerTest, EachCollectedStepCarriesItsRoundsPrefillFlag) {
    InnerRunner inner;
    inner.extended_step = 1;
    OverlapRunner runner(inner);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(runner.launch(decode({{"a", 5 + i}})).ok());
    runner.wait_idle();  // all three ran: the inner runner's own flag is the last step's
    std::vector<bool> flags;
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(runner.collect().ok());
        flags.push_back(runner.last_round_extended());
    }
    EXPECT_EQ(flags, (std::vector<bool>{false, true, false}));
}

TEST(OverlapRunnerTest, AFailedStepFailsTheStepFedItsTokens) {
    InnerRunner inner;
    inner.fail_step = 0;
    inner.failure = Status(StatusCode::kUnavailable, "peer lost");  // breaks the rank group
    OverlapRunner runner(inner);
    ASSERT_TRUE(runner.launch(decode({{"a", 5}})).ok());
    ASSERT_TRUE(runner.launch(decode({{"a", kFutureToken}})).ok());
    ASSERT_TRUE(runner.launch(decode({{"b", 3}})).ok());
    auto first = runner.collect();
    EXPECT_FALSE(first.ok());
    auto second = runner.collect();
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("the step before failed: peer lost"), std::string::npos);
    auto third = runner.collect();  // a step of its own runs as usual
    ASSERT_TRUE(third.ok());
    EXPECT_EQ((*third)[0].token, 203);
    EXPECT_EQ(inner.seen.size(), 2u);  // the fed step never reached the model
    // A token nobody sampled is an error, not a guess.
    auto orphan = runner.run(decode({{"z", kFutureToken}}));
    EXPECT_FALSE(orphan.ok());
    EXPECT_EQ(runner.fatal_error().message(), "peer lost");
}

TEST(OverlapRunnerTest, CollectWithoutALaunchAndShutdownWithStepsQueuedDoNotHang) {
    InnerRunner inner;
    {
        OverlapRunner runner(inner);
        EXPECT_FALSE(runner.collect().ok());
        ASSERT_TRUE(runner.launch(decode({{"a", 1}})).ok());
        ASSERT_TRUE(runner.launch(decode({{"a", kFutureToken}})).ok());
    }  // destroyed with both uncollected: they run, then the thread stops
    EXPECT_EQ(inner.seen.size(), 2u);
}

// A DP-attention group's leader: its idle rounds are counted, and reported busy while `busy`.
class LockstepInner final : public BatchRunner {
 public:
    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override {
        ++runs;
        return std::vector<SampledToken>(batch.seqs.size(), SampledToken{.token = 1});
    }
    bool lockstep() const override { return true; }
    StatusOr<bool> idle_step() override {
        ++idle_rounds;
        return busy;
    }
    LockstepStats lockstep_stats() const override { return {.forwards = 11, .idle_steps = 3, .tokens = 40}; }
    bool lockstep_stopping() const override { return true; }
    int runs = 0, idle_rounds = 0;
    bool busy = true;
};

// The engine loop's contract: rounds() moves when a collected step ran, idle rounds run on the
// caller's thread only when nothing is launched, and the lockstep queries reach the inner runner.
TEST(OverlapRunnerTest, IdleRoundsOfALockstepRunnerRunWhenNothingIsLaunched) {
    LockstepInner inner;
    OverlapRunner runner(inner);
    EXPECT_TRUE(runner.lockstep());
    EXPECT_TRUE(runner.lockstep_stopping());
    EXPECT_EQ(runner.lockstep_stats().idle_steps, 3);
    EXPECT_EQ(runner.rounds(), 0);
    auto busy = runner.idle_step();
    ASSERT_TRUE(busy.ok());
    EXPECT_TRUE(*busy);
    EXPECT_EQ(inner.idle_rounds, 1);
    EXPECT_EQ(runner.rounds(), 1);

    ASSERT_TRUE(runner.launch(decode({{"a", 5}})).ok());
    ASSERT_TRUE(runner.launch(decode({{"a", kFutureToken}})).ok());
    runner.wait_idle();
    EXPECT_EQ(runner.rounds(), 1);  // both ran, neither is collected: no round for the driver yet
    EXPECT_FALSE(runner.idle_step().ok());  // steps are launched: the round is refused, not interleaved
    EXPECT_EQ(inner.idle_rounds, 1);
    ASSERT_TRUE(runner.collect().ok());
    EXPECT_EQ(runner.rounds(), 2);
    EXPECT_FALSE(runner.idle_step().ok());
    ASSERT_TRUE(runner.collect().ok());
    EXPECT_EQ(runner.rounds(), 3);
    inner.busy = false;
    busy = runner.idle_step();
    ASSERT_TRUE(busy.ok());
    EXPECT_FALSE(*busy);
    EXPECT_EQ(inner.idle_rounds, 2);
    EXPECT_EQ(inner.runs, 2);
    EXPECT_EQ(runner.rounds(), 4);
}

TEST(OverlapRunnerTest, WaitIdleReturnsOnceLaunchedStepsRan) {
    InnerRunner inner;
    inner.hold = true;
    OverlapRunner runner(inner);
    ASSERT_TRUE(runner.launch(decode({{"a", 1}})).ok());
    ASSERT_TRUE(runner.launch(decode({{"b", 2}})).ok());
    inner.wait_started(1);
    inner.release();
    runner.wait_idle();  // neither is collected
    {
        std::lock_guard lock(inner.mu);
        EXPECT_EQ(inner.seen.size(), 2u);
    }
    EXPECT_TRUE(runner.collect().ok());
    EXPECT_TRUE(runner.collect().ok());
}

}  // namespace
}  // namespace tessera::executor
