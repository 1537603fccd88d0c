// A decode step of a dense model allocates nothing from the heap once its buffers have grown
// (issue: "no allocation per step"): every operator new during steady decode steps of a
// two-sequence batch is counted, on every thread.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "app/make_model.h"
#include "base/thread_pool.h"
#include "kvcache/kv_cache.h"
#include "models/model.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    const std::size_t size = std::max<std::size_t>(n, 1);
    void* p = align <= alignof(std::max_align_t) ? std::malloc(size)
                                                 : std::aligned_alloc(align, (size + align - 1) / align * align);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace tessera {
namespace {

namespace fs = std::filesystem;

class ForwardAllocationsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardAllocationsTest, DecodeStepsAllocateNothing) {
    const fs::path dir = fs::temp_directory_path() / ("tessera_alloc_test_" + std::to_string(::getpid()) + GetParam());
    fs::remove_all(dir);
    app::MakeModelOptions o;
    o.arch = GetParam();
    o.dtype = "bf16";
    o.seed = 5;
    o.out = dir.string();
    ASSERT_TRUE(app::make_model(o).ok());
    models::LoadOptions load;
    load.model_path = o.out;
    auto model = models::load_model(load);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    models::Model& m = **model;

    constexpr std::int64_t kRowsPerSeq = 64, kPrompt = 8, kWarmSteps = 3, kCountedSteps = 6;
    kvcache::KvCache cache(m.kv_cache_shape(), 2 * kRowsPerSeq);
    const kvcache::KvView view = cache.view();
    std::vector<std::int32_t> slots_a(kRowsPerSeq), slots_b(kRowsPerSeq);
    std::iota(slots_a.begin(), slots_a.end(), 0);
    std::iota(slots_b.begin(), slots_b.end(), static_cast<std::int32_t>(kRowsPerSeq));
    ThreadPool pool(2);
    std::vector<float> logits;

    std::vector<std::int32_t> prompt(2 * kPrompt);
    std::iota(prompt.begin(), prompt.end(), 1);
    models::BatchInput prefill{prompt,
                               {{kPrompt, 0, slots_a.data(), models::LogitsMode::kLast},
                                {kPrompt, 0, slots_b.data(), models::LogitsMode::kLast}}};
    ASSERT_TRUE(m.forward(prefill, view, &pool, &logits).ok());

    const std::int64_t vocab = m.config().vocab_size;
    std::vector<std::int32_t> next(2);
    models::BatchInput step{next,
                            {{1, kPrompt, slots_a.data(), models::LogitsMode::kLast},
                             {1, kPrompt, slots_b.data(), models::LogitsMode::kLast}}};
    for (std::int64_t s = 0; s < kWarmSteps + kCountedSteps; ++s) {
        for (std::size_t i = 0; i < next.size(); ++i) {
            const float* row = logits.data() + static_cast<std::int64_t>(i) * vocab;
            next[i] = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
            step.seqs[i].start_pos = kPrompt + s;
        }
        if (s == kWarmSteps) g_counting = true;
        const Status status = m.forward(step, view, &pool, &logits);
        ASSERT_TRUE(status.ok()) << status.to_string();
    }
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << GetParam() << ": heap allocations in " << kCountedSteps << " decode steps";
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Dense, ForwardAllocationsTest, ::testing::Values("qwen3", "llama", "qwen3-moe", "deepseek-v3"));

}  // namespace
}  // namespace tessera
