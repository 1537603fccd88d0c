#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace tessera {

namespace {
constexpr int kSpinIterations = 20000;

inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int w = 1; w < n_threads_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run_impl(Trampoline fn, void* ctx) {
    if (n_threads_ == 1) {
        fn(ctx, 0, 1);
        return;
    }
    task_ = fn;
    task_ctx_ = ctx;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    fn(ctx, 0, n_threads_);
    int spins = 0;
    while (pending_.load(std::memory_order_acquire) != 0) {
        if (++spins < kSpinIterations) {
            cpu_relax();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker_loop(int worker) {
    std::uint32_t seen = 0;
    while (true) {
        int spins = 0;
        std::uint32_t gen;
        while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
            if (++spins < kSpinIterations) {
                cpu_relax();
            } else {
                generation_.wait(seen, std::memory_order_acquire);
            }
        }
        seen = gen;
        if (stop_.load()) return;
        task_(task_ctx_, worker, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

int default_thread_count() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace tessera
