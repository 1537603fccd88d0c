#pragma once
// executor/overlap_runner.h — overlap scheduling (SGLang's default, scheduler.py
// event_loop_overlap): steps run on a thread of their own, so the scheduler thread applies
// step n's results (events to the clients, KV bookkeeping) and forms step n+1 while step n
// computes, and step n+1 is already queued when step n ends. Decode tokens of n+1 that n
// samples are passed as kFutureToken and resolved here, in launch order. Wraps the rank's
// runner (the local model, the TP leader or a DP-attention group's leader); with
// --disable-overlap-schedule it is left out. A lockstep runner's idle rounds (DP-attention)
// run on the caller's thread: the driver joins one only when nothing is launched, so the step
// thread is then done with the inner runner.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "executor/forward_batch.h"
#include "executor/future_tokens.h"

namespace tessera::executor {

class OverlapRunner final : public BatchRunner {
 public:
    // `inner` must outlive this runner; from now on only this runner's thread calls it.
    explicit OverlapRunner(BatchRunner& inner);
    ~OverlapRunner() override;  // waits for the steps launched and stops the thread
    OverlapRunner(const OverlapRunner&) = delete;
    OverlapRunner& operator=(const OverlapRunner&) = delete;

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override;
    // Queues the step and returns at once.
    Status launch(const ForwardBatch& batch) override;
    // Waits for the oldest launched step.
    StatusOr<std::vector<SampledToken>> collect() override;
    // Waits until every launched step has run (collected or not): the inner runner is then
    // free for its owner to stop.
    void wait_idle();

    bool lockstep() const override { return inner_.lockstep(); }
    // Rounds so far: the steps collected and the idle rounds. Not the steps the thread has
    // run: the driver compares rounds() around a scheduler step to see whether it ran one,
    // and a step launched then may finish at any time.
    std::int64_t rounds() const override { return rounds_.load(std::memory_order_relaxed); }
    // Fails when a step is launched and not collected (the driver joins idle rounds only when
    // its scheduler has nothing in flight).
    StatusOr<bool> idle_step() override;
    LockstepStats lockstep_stats() const override { return inner_.lockstep_stats(); }
    bool last_round_extended() const override { return last_round_extended_; }
    // On the caller's thread: the agreement travels over a group of its own, not the step's.
    StatusOr<PrefillAgreement> agree_prefill(const PrefillIntent& mine) override { return inner_.agree_prefill(mine); }
    Status before_round() override { return inner_.before_round(); }
    bool lockstep_stopping() const override { return inner_.lockstep_stopping(); }

 private:
    struct Done {
        StatusOr<std::vector<SampledToken>> result;
        Status fatal;  // the inner runner's fatal error right after this step
        bool extended = false;  // the inner runner's last_round_extended() right after it
    };
    void loop();

    BatchRunner& inner_;
    FutureTokens futures_;  // the step thread's only
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ForwardBatch> queued_;
    std::deque<Done> done_;
    std::int64_t uncollected_ = 0;  // launched, not yet collected
    std::int64_t unfinished_ = 0;   // launched, not yet run to the end
    std::atomic<std::int64_t> rounds_{0};  // the caller's: collect() and idle_step()
    bool last_round_extended_ = false;     // the caller's: set by collect()
    bool stopping_ = false;
    std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tessera::executor
