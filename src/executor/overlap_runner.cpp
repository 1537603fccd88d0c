#include "executor/overlap_runner.h"

#include <utility>

namespace tessera::executor {

OverlapRunner::OverlapRunner(BatchRunner& inner) : inner_(inner), thread_([this] { loop(); }) {}

OverlapRunner::~OverlapRunner() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

StatusOr<std::vector<SampledToken>> OverlapRunner::run(const ForwardBatch& batch) {
    TSR_RETURN_IF_ERROR(launch(batch));
    return collect();
}

Status OverlapRunner::launch(const ForwardBatch& batch) {
    {
        std::lock_guard lock(mu_);
        queued_.push_back(batch);
        ++uncollected_;
        ++unfinished_;
    }
    cv_.notify_all();
    return Status::Ok();
}

StatusOr<std::vector<SampledToken>> OverlapRunner::collect() {
    std::unique_lock lock(mu_);
    if (uncollected_ == 0) return Status::Internal("collect() without a launched step");
    cv_.wait(lock, [this] { return !done_.empty(); });
    Done done = std::move(done_.front());
    done_.pop_front();
    --uncollected_;
    lock.unlock();
    last_round_extended_ = done.extended;
    rounds_.fetch_add(1, std::memory_order_relaxed);
    if (!done.fatal.ok()) (void)note_failure(done.fatal);
    return std::move(done.result);
}

void OverlapRunner::wait_idle() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return unfinished_ == 0; });
}

StatusOr<bool> OverlapRunner::idle_step() {
    {
        std::lock_guard lock(mu_);
        if (uncollected_ > 0)
            return Status::Internal("an idle round was asked for while " + std::to_string(uncollected_) +
                                    " launched steps are not collected");
    }
    StatusOr<bool> busy = inner_.idle_step();
    rounds_.fetch_add(1, std::memory_order_relaxed);
    if (!inner_.fatal_error().ok()) (void)note_failure(inner_.fatal_error());
    return busy;
}

void OverlapRunner::loop() {
    for (;;) {
        ForwardBatch batch;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
            if (queued_.empty()) return;  // stopping, and every launched step has run
            batch = std::move(queued_.front());
            queued_.pop_front();
        }
        Status resolved = futures_.resolve(batch);
        StatusOr<std::vector<SampledToken>> result =
            resolved.ok() ? inner_.run(batch) : StatusOr<std::vector<SampledToken>>(std::move(resolved));
        futures_.record(batch, result);
        Done done{.result = std::move(result), .fatal = inner_.fatal_error(), .extended = inner_.last_round_extended()};
        {
            std::lock_guard lock(mu_);
            done_.push_back(std::move(done));
            --unfinished_;
        }
        cv_.notify_all();
    }
}

}  // namespace tessera::executor
