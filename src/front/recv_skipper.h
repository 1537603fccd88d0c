#pragma once
// front/recv_skipper.h — --scheduler-recv-interval (SGLang managers/scheduler_recv_skipper.py
// SchedulerRecvSkipper): the engine reads its inbox (new requests, aborts, flushes) only once
// the turns since the last read weigh at least the interval. A decode step and an idle turn
// weigh 1; a prefill step weighs the whole interval, so the inbox is read after every prefill
// and a burst of arrivals is taken together while decoding goes on. The first turn reads.
// Interval 1 (the default) reads every turn. Owned by the engine thread.

#include "scheduler/scheduler.h"

namespace tessera::front {

class RecvSkipper {
 public:
    explicit RecvSkipper(int interval) : interval_(interval), weight_(interval) {}

    // Called once per turn, with the step the last turn ran: whether to read the inbox now.
    bool should_receive(scheduler::StepKind last) {
        weight_ += last == scheduler::StepKind::kPrefill ? interval_ : 1;
        if (weight_ < interval_) return false;
        weight_ = 0;
        return true;
    }

 private:
    const int interval_;
    int weight_;  // of the turns since the last read
};

}  // namespace tessera::front
