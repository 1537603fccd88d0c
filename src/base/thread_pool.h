#pragma once
// base/thread_pool.h — the one compute thread pool of a process (or of a rank).
// run() is called from one thread at a time (the owner, e.g. the executor thread); the
// caller takes part as worker 0. Idle workers spin briefly, then sleep on a futex, so an
// idle pool does not steal a core from another rank.

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(worker, n_workers) once on each of the pool's threads and waits for all.
    template <typename F>
    void run(F&& fn) {
        run_impl(&invoke<std::remove_reference_t<F>>, &fn);
    }

    // Splits [0, n) into contiguous ranges, one per worker, and calls fn(begin, end)
    // on each non-empty range. `align` rounds the split points (e.g. to whole panels).
    template <typename F>
    void parallel_for(std::int64_t n, F&& fn, std::int64_t align = 1) {
        run([&](int worker, int n_workers) {
            const std::int64_t units = (n + align - 1) / align;
            const std::int64_t begin = std::min(n, units * worker / n_workers * align);
            const std::int64_t end = std::min(n, units * (worker + 1) / n_workers * align);
            if (begin < end) fn(begin, end);
        });
    }

 private:
    using Trampoline = void (*)(void* ctx, int worker, int n_workers);
    template <typename F>
    static void invoke(void* ctx, int worker, int n_workers) {
        (*static_cast<F*>(ctx))(worker, n_workers);
    }
    void run_impl(Trampoline fn, void* ctx);
    void worker_loop(int worker);

    const int n_threads_;
    std::vector<std::thread> threads_;
    Trampoline task_ = nullptr;
    void* task_ctx_ = nullptr;
    std::atomic<std::uint32_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
};

// Threads to use by default: the cores this process may run on.
int default_thread_count();

}  // namespace tessera
