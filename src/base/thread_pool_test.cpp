#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace tessera {
namespace {

TEST(ThreadPoolTest, EveryWorkerRunsOncePerCall) {
    ThreadPool pool(3);
    for (int round = 0; round < 200; ++round) {
        std::vector<std::atomic<int>> hits(3);
        pool.run([&](int worker, int n_workers) {
            EXPECT_EQ(n_workers, 3);
            hits[worker].fetch_add(1);
        });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
}

TEST(ThreadPoolTest, ParallelForCoversTheRangeExactlyOnceWithAlignment) {
    ThreadPool pool(2);
    for (std::int64_t n : {0, 1, 15, 16, 17, 100, 1023}) {
        std::vector<int> seen(n, 0);
        pool.parallel_for(
            n,
            [&](std::int64_t b, std::int64_t e) {
                EXPECT_EQ(b % 16, 0);
                for (auto i = b; i < e; ++i) seen[i]++;
            },
            16);
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
    }
}

}  // namespace
}  // namespace tessera
