#include "scheduler/memory_plan.h"

#include <gtest/gtest.h>

#include "kvcache/kv_cache.h"

namespace tessera::scheduler {
namespace {

constexpr std::int64_t kGiB = 1024LL * 1024 * 1024;

TEST(MemoryPlanTest, CapacityFromFractionAndCellSize) {
    // 16 GiB rank, 4 GiB weights, fraction 0.5: rest = 12 − 8 = 4 GiB.
    MemoryPlanInput in{.capacity_bytes = 16 * kGiB, .weight_bytes = 4 * kGiB,
                       .mem_fraction_static = 0.5, .kv_bytes_per_token = 131072,
                       .page_size = 16, .context_len = 4096};
    auto plan = plan_memory(in);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_EQ(plan->max_total_num_tokens, 4 * kGiB / 131072);  // 32768, page aligned
    EXPECT_EQ(plan->req_to_token_pool_size, 4096);  // min(max(32768/4096·512, 2048), 4096)
    EXPECT_EQ(plan->max_running_requests, 4096);    // min(32768 / 2, 4096)
    EXPECT_EQ(plan->req_to_token_width, 4100);
    EXPECT_EQ(plan->max_req_len, 4095);
    EXPECT_EQ(plan->max_req_input_len, 4094);
    EXPECT_TRUE(plan->warnings.empty());
}

// MLA (SGLang's get_cell_size_per_token): (kv_lora_rank + qk_rope_head_dim) per layer, no V.
// DeepSeek-V3: (512 + 64) · 61 layers · 2 bytes = 70,272 B; the same layers as MHA would hold
// 128 heads · (192 + 128) · 61 · 2 = 4,997,120 B.
TEST(MemoryPlanTest, MlaCellSizeIsTheLatentRow) {
    const kvcache::KvCacheShape mla{61, 1, 512 + 64, DType::kBF16, kvcache::KvKind::kLatent};
    EXPECT_EQ(mla.bytes_per_token(), 70272);
    MemoryPlanInput in{.capacity_bytes = 16 * kGiB, .weight_bytes = 4 * kGiB,
                       .mem_fraction_static = 0.5, .kv_bytes_per_token = mla.bytes_per_token(),
                       .page_size = 64, .context_len = 4096};
    auto plan = plan_memory(in);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    // rest 4 GiB: 4294967296 // 70272 = 61119 tokens, down to a page multiple: 61056.
    EXPECT_EQ(plan->max_total_num_tokens, 61056);
    EXPECT_EQ(plan->kv_pool_bytes, 61056LL * 70272);
}

TEST(MemoryPlanTest, UserCapsAndPageRounding) {
    MemoryPlanInput in{.capacity_bytes = 16 * kGiB, .weight_bytes = 4 * kGiB,
                       .mem_fraction_static = 0.5, .kv_bytes_per_token = 131072,
                       .page_size = 64, .context_len = 8192,
                       .max_running_requests = 48, .max_total_tokens = 1000};
    auto plan = plan_memory(in);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->max_total_num_tokens, 960);  // capped, then rounded down to pages
    EXPECT_EQ(plan->req_to_token_pool_size, 48);
    EXPECT_EQ(plan->max_running_requests, 48);
    EXPECT_EQ(plan->max_req_len, 959);

    in.max_total_tokens = 1'000'000;  // larger than profiled: warning, profiled value kept
    plan = plan_memory(in);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->max_total_num_tokens, 32768);
    ASSERT_EQ(plan->warnings.size(), 1u);
    EXPECT_NE(plan->warnings[0].find("larger than the profiled value 32768"), std::string::npos);

    in.enable_dp_attention = true;
    in.dp_size = 4;
    EXPECT_EQ(plan_memory(in)->max_running_requests, 12);
}

TEST(MemoryPlanTest, NotEnoughMemory) {
    MemoryPlanInput in{.capacity_bytes = 8 * kGiB, .weight_bytes = 6 * kGiB,
                       .mem_fraction_static = 0.7, .kv_bytes_per_token = 4096,
                       .page_size = 1, .context_len = 2048};
    auto plan = plan_memory(in);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().message(), "Not enough memory. Please try to increase --mem-fraction-static.");
}

TEST(MemoryPlanTest, DefaultMemFractionMatchesTheReferenceExample) {
    // §8.2 worked example without the graph terms (1024 + 400 MiB there): on CPU the
    // reserve is 512 + 8192·1.5 + 8/8·1024 = 13824 MiB.
    const double f = default_mem_fraction_static(
        {.capacity_mib = 81559, .chunked_prefill_size = 8192, .tp_size = 8, .pp_size = 1});
    EXPECT_DOUBLE_EQ(f, 0.831);  // round((81559 − 13824) / 81559, 3)
    // Small host: 512 + 2048·1.5 + 128 = 3712 MiB of 16 GiB.
    EXPECT_DOUBLE_EQ(default_mem_fraction_static({.capacity_mib = 16384, .chunked_prefill_size = 2048}),
                     0.773);
    // > 60 GiB: at least 10 GiB reserved.
    EXPECT_DOUBLE_EQ(default_mem_fraction_static({.capacity_mib = 65536, .chunked_prefill_size = 2048}),
                     0.844);
    EXPECT_DOUBLE_EQ(default_mem_fraction_static({}), 0.95);
    // A CPU host keeps a tenth of its memory (at least 1 GiB) for the OS on top of that:
    // 24 GiB, 4096-token chunks: 512 + 6144 + 128 + 2457 MiB reserved.
    EXPECT_EQ(cpu_host_headroom_mib(24576), 2457);
    EXPECT_EQ(cpu_host_headroom_mib(4096), 1024);
    EXPECT_DOUBLE_EQ(default_mem_fraction_static({.capacity_mib = 24576, .chunked_prefill_size = 4096,
                                                  .host_headroom_mib = cpu_host_headroom_mib(24576)}),
                     0.624);  // round((24576 − 9241) / 24576, 3); 0.724 without the headroom
    // The prefix cache keeps at most an eighth of the rank's memory once unused.
    EXPECT_EQ(default_max_cached_tokens(std::int64_t{24} << 30, 114688), (std::int64_t{3} << 30) / 114688);
    EXPECT_EQ(default_chunked_prefill_size(16384), 2048);
    EXPECT_EQ(default_chunked_prefill_size(81559), 8192);
    EXPECT_EQ(default_chunked_prefill_size(std::nullopt), 4096);
}

}  // namespace
}  // namespace tessera::scheduler
