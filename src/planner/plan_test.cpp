// tessera plan against the reference's worked examples (SGLang's rank layout), the memory
// rules, the traffic formulas and the fixes it proposes. Real configs: tests/data/configs.

#include "planner/plan.h"

#include <gtest/gtest.h>

#include "models/model.h"

namespace tessera::planner {
namespace {

PlanRequest request(const std::string& model, const std::string& device, const std::function<void(server::ServerArgs&)>& set) {
    PlanRequest r;
    r.args.model_path = std::string(TSR_SOURCE_DIR) + "/tests/data/configs/" + model;
    set(r.args);
    EXPECT_TRUE(r.args.resolve().ok());
    auto config = models::read_model_config(r.args.model_path);
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (config.ok()) r.config = *config;
    auto d = device_preset(device);
    EXPECT_TRUE(d.ok());
    if (d.ok()) r.device = *d;
    r.host_memory_bytes = std::int64_t{64} << 30;
    return r;
}

Plan plan_of(const PlanRequest& r) {
    auto p = make_plan(r);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? *p : Plan{};
}

// Reference worked example A: tp 16, dp 8 with DP attention, 2 nodes of 8 GPUs, a2a none, ep 8.
TEST(PlanTest, WorkedExampleARankTable) {
    const PlanRequest r = request("deepseek-v3", "h800", [](server::ServerArgs& a) {
        a.tp_size = 16;
        a.dp_size = 8;
        a.enable_dp_attention = true;
        a.nnodes = 2;
        a.dist_init_addr = "10.0.0.1:5000";
        a.ep_size = 8;
        a.max_running_requests = 64;
    });
    const Plan p = plan_of(r);
    ASSERT_EQ(p.world_size, 16);
    for (const RankPlan& rank : p.ranks) {
        const int g = rank.coords.global_rank;
        EXPECT_EQ(rank.coords.node, g / 8) << g;
        EXPECT_EQ(rank.coords.tp_rank, g) << g;
        EXPECT_EQ(rank.coords.attn_dp_rank, g / 2) << g;
        EXPECT_EQ(rank.coords.attn_tp_rank, g % 2) << g;
        EXPECT_EQ(rank.coords.moe_ep_rank, g / 2) << g;
        EXPECT_EQ(rank.coords.moe_tp_rank, g % 2) << g;
        EXPECT_EQ(rank.size.experts_per_rank, 256 / 8) << "each rank holds 1/8 of the experts";
    }
    EXPECT_EQ(p.chunked_prefill_size, 8192 / 8) << "an 80 GB device's default, divided over the DP groups";
    EXPECT_EQ(p.max_running_requests, 64 / 8);
    ASSERT_FALSE(p.traffic.empty());
    EXPECT_EQ(p.traffic.front().kind, "attention-tp all-reduce");
}

// Reference worked example B: pp 2, tp 4 on one node, then on two.
TEST(PlanTest, WorkedExampleBRankTableAndLayers) {
    const Plan one_node = plan_of(request("deepseek-v3", "h20", [](server::ServerArgs& a) {
        a.tp_size = 4;
        a.pp_size = 2;
    }));
    ASSERT_EQ(one_node.world_size, 8);
    for (const RankPlan& rank : one_node.ranks) {
        EXPECT_EQ(rank.coords.pp_rank, rank.coords.global_rank / 4);
        EXPECT_EQ(rank.coords.tp_rank, rank.coords.global_rank % 4);
        EXPECT_EQ(rank.coords.node, 0);
        EXPECT_EQ(rank.size.first_layer, rank.coords.pp_rank == 0 ? 0 : 30);
        EXPECT_EQ(rank.size.end_layer, rank.coords.pp_rank == 0 ? 30 : 61);
    }
    const Plan two_nodes = plan_of(request("deepseek-v3", "h20", [](server::ServerArgs& a) {
        a.tp_size = 4;
        a.pp_size = 2;
        a.nnodes = 2;
        a.dist_init_addr = "10.0.0.1:5000";
    }));
    for (const RankPlan& rank : two_nodes.ranks) EXPECT_EQ(rank.coords.node, rank.coords.pp_rank);
}

TEST(PlanTest, TrafficAndBubbleFollowSeedFormulas) {
    PlanRequest r = request("deepseek-v3", "h20", [](server::ServerArgs& a) {
        a.tp_size = 8;
        a.pp_size = 4;
        a.nnodes = 4;
        a.dist_init_addr = "10.0.0.1:5000";
        a.chunked_prefill_size = 12288;
    });
    r.prompt_len = 131072;
    const Plan p = plan_of(r);
    ASSERT_EQ(p.traffic.size(), 2u);
    EXPECT_EQ(p.traffic[0].kind, "tp all-reduce");
    EXPECT_EQ(p.traffic[0].bytes_per_token_per_layer, 2 * 2 * 7 * 7168 * 2 / 8) << "2 x 2(T-1)/T x H x bf16";
    EXPECT_FALSE(p.traffic[0].inter_node) << "a TP group of 8 stays inside its node";
    EXPECT_EQ(p.traffic[1].kind, "pp send");
    EXPECT_EQ(p.traffic[1].layers, 3);
    EXPECT_TRUE(p.traffic[1].inter_node);
    EXPECT_EQ(p.micro_batches, 11);
    EXPECT_DOUBLE_EQ(p.bubble, 3.0 / 14.0);
    EXPECT_TRUE(p.fits());
}

// Dynamic chunks are cut as the scheduler cuts them (scheduler::ChunkSizePredictor), so the
// launch's smooth factor moves the plan: 0 keeps the fixed chunks, 1 follows the cost model
// (shorter later chunks, a shorter last chunk through the other stages), seed 003's 0.65 lies
// between.
TEST(PlanTest, DynamicChunksFollowTheSchedulersSmoothFactor) {
    const auto pp4 = [](bool dynamic, double smooth) {
        PlanRequest r = request("deepseek-v3", "h20", [dynamic](server::ServerArgs& a) {
            a.tp_size = 8;
            a.pp_size = 4;
            a.nnodes = 4;
            a.dist_init_addr = "10.0.0.1:5000";
            a.chunked_prefill_size = 12288;
            a.enable_dynamic_chunking = dynamic;
        });
        r.prompt_len = 131072;
        r.dynamic_chunking_smooth_factor = smooth;
        return plan_of(r);
    };
    const Plan fixed = pp4(false, 0.75);
    const Plan unsmoothed = pp4(true, 0.0);
    EXPECT_EQ(unsmoothed.micro_batches, fixed.micro_batches);
    EXPECT_DOUBLE_EQ(unsmoothed.ttft_s, fixed.ttft_s);
    const Plan seed = pp4(true, 0.65);
    const Plan exact = pp4(true, 1.0);
    EXPECT_LT(fixed.micro_batches, seed.micro_batches);
    EXPECT_LT(seed.micro_batches, exact.micro_batches);
    EXPECT_GT(fixed.ttft_s, seed.ttft_s);
    EXPECT_GT(seed.ttft_s, exact.ttft_s);
}

// An all-to-all dispatcher returns a MoE layer's output through its combine: only attention's
// all-reduce stays, and the combine is the one collective of the dispatch that waits for
// compute. DeepSeek's shared experts are whole on every rank then, so they need none either.
TEST(PlanTest, AllToAllDispatchReplacesTheMoeAllReduce) {
    auto traffic = [](const std::string& model, const std::string& backend) {
        return plan_of(request(model, "h20", [&](server::ServerArgs& a) {
                   a.tp_size = 8;
                   a.ep_size = 8;
                   a.moe_a2a_backend = backend;
               })).traffic;
    };
    const std::vector<Traffic> none = traffic("qwen3-235b-a22b-fp8", "none");
    ASSERT_EQ(none.size(), 1u);
    EXPECT_EQ(none[0].syncs, 2);
    const std::vector<Traffic> a2a = traffic("qwen3-235b-a22b-fp8", "all_to_all");
    ASSERT_EQ(a2a.size(), 3u);
    EXPECT_EQ(a2a[0].kind, "tp all-reduce");
    EXPECT_EQ(a2a[0].syncs, 1);
    EXPECT_EQ(a2a[0].bytes_per_token_per_layer * 2, none[0].bytes_per_token_per_layer);
    EXPECT_EQ(a2a[1].kind, "ep dispatch + combine");
    EXPECT_EQ(a2a[1].syncs, 1);
    EXPECT_EQ(a2a[1].bytes_per_token_per_layer, 2 * 8 * 7 * 4096 * 2 / 8 / 8)
        << "each rank sends the rows of the 1/8 of the tokens it owns";
    EXPECT_EQ(a2a[2].kind, "ep all-gather of owned rows");
    EXPECT_EQ(a2a[2].bytes_per_token_per_layer, 7 * 4096 * 2 / 8) << "(ep-1)/ep x H x bf16";
    EXPECT_EQ(a2a[2].syncs, 0) << "it follows the combine";
    EXPECT_EQ(traffic("deepseek-v3", "all_to_all")[0].syncs, 1) << "shared experts need no all-reduce";
}

// SGLang's DeepSeek-V3 prefill layout: DP-attention over 4 nodes of 8, replicated dense MLPs.
void deepseek_prefill_layout(server::ServerArgs& a, const std::string& backend) {
    a.tp_size = 32;
    a.dp_size = 32;
    a.enable_dp_attention = true;
    a.ep_size = 32;
    a.moe_dense_tp_size = 1;
    a.nnodes = 4;
    a.dist_init_addr = "10.0.0.1:5000";
    a.moe_a2a_backend = backend;
}

// SGLang's DeepSeek-V3 prefill layout (DeepEP): its shared experts are whole on every rank, so
// their 2048-wide fp8 blocks are never cut; split over 32 ranks (the standard dispatcher) they
// would be 64 wide and refused.
TEST(PlanTest, SharedExpertsAreWholeUnderAllToAll) {
    auto plan = [](const std::string& backend) {
        return plan_of(request("deepseek-v3", "h800", [&](server::ServerArgs& a) { deepseek_prefill_layout(a, backend); }));
    };
    const Plan standard = plan("none");
    ASSERT_FALSE(standard.fits());
    EXPECT_NE(standard.checks.front().what.find("Weight output_partition_size = 64 is not divisible"), std::string::npos)
        << standard.checks.front().what;
    EXPECT_NE(standard.checks.front().what.find("mlp.shared_experts."), std::string::npos)
        << standard.checks.front().what;
    const Plan a2a = plan("all_to_all");
    ASSERT_TRUE(a2a.fits()) << (a2a.checks.empty() ? "" : a2a.checks.front().what);
    const RankSize& size = a2a.ranks.front().size;
    // 58 MoE layers, each with a whole shared expert: 3 × 7168 × 2048 fp8 codes, plus one f32
    // scale per 16 outputs × 128 inputs as the kernels pack them (1/32 more).
    EXPECT_TRUE(size.shared_experts_whole);
    EXPECT_EQ(size.shared_expert_bytes, 58ll * 3 * 7168 * 2048 * 33 / 32);
}

// A lone prompt under DP-attention with whole shared experts (all_to_all): its group's
// attention-TP ranks own its tokens, so each of them runs the shared experts on 1/attn_tp of
// them. Widening the shared experts costs a rank of a two-rank attention group half what it
// costs a rank that is its group alone. Compute only: links and memory made free.
TEST(PlanTest, LonePromptSharesItsSharedExpertsOverItsAttentionGroup) {
    auto seconds_per_token = [](int dp, std::int64_t shared_width) {
        PlanRequest r = request("deepseek-v3", "h800", [&](server::ServerArgs& a) {
            deepseek_prefill_layout(a, "all_to_all");
            a.dp_size = dp;
        });
        r.config.moe.shared_expert_intermediate_size = shared_width;
        r.prompt_len = 2048;
        r.device.memory_bandwidth = r.device.inter_node_bandwidth = r.device.intra_node_bandwidth = 1e30;
        r.device.collective_latency_s = 0;
        const Plan p = plan_of(r);
        EXPECT_TRUE(p.ranks.front().size.shared_experts_whole);
        for (const RankPlan& rank : p.ranks) EXPECT_EQ(rank.coords.attn_tp_rank, rank.coords.global_rank % (32 / dp));
        return p.prefill_tokens_per_s > 0 ? 1.0 / p.prefill_tokens_per_s : 0.0;
    };
    const double alone = seconds_per_token(32, 4096) - seconds_per_token(32, 2048);
    const double pair = seconds_per_token(16, 4096) - seconds_per_token(16, 2048);
    ASSERT_GT(alone, 0);
    EXPECT_NEAR(pair / alone, 0.5, 1e-6);
}

// SGLang's prefill layout for DeepSeek-V3 (DP-attention over 4 nodes of 8, DeepEP, replicated
// dense MLPs) as SGLang runs it: no layer gathers the DP groups' tokens; the normal kernels
// send a token's fp8 row once to each other node holding one of its experts (4 of 8 expert
// groups picked, 2 groups per node) and the low-latency ones once per expert, at the 58 MoE
// layers only; each pass counts its own kernels' bytes.
TEST(PlanTest, DeepEpTrafficFollowsItsKernels) {
    auto plan = [](const std::string& backend, const std::string& mode) {
        PlanRequest r = request("deepseek-v3", "h100", [&](server::ServerArgs& a) {
            deepseek_prefill_layout(a, backend);
            a.deepep_mode = mode;
        });
        r.prompt_len = 2000;
        r.decode_batch = 64;
        return plan_of(r);
    };
    const Plan a2a = plan("all_to_all", "auto");
    ASSERT_EQ(a2a.traffic.size(), 1u) << "no layer gathers: MoE tokens stay scattered, dense MLPs are whole";
    EXPECT_EQ(a2a.traffic[0].kind, "ep dispatch + combine");
    EXPECT_EQ(a2a.traffic[0].layers, 58) << "the three dense layers dispatch nothing";
    const Plan masked = plan("none", "auto");
    ASSERT_FALSE(masked.traffic.empty());
    EXPECT_EQ(masked.traffic[0].kind, "dp-attention gather + scatter");
    EXPECT_EQ(masked.traffic[0].layers, 58) << "only the MoE layers gather: the dense MLPs are whole";

    const Plan auto_mode = plan("deepep", "auto");
    ASSERT_TRUE(auto_mode.fits()) << "shared experts whole, as under all_to_all";
    ASSERT_EQ(auto_mode.traffic.size(), 3u);
    const double remote_nodes = 3 * (1 - (6.0 * 5 * 4 * 3) / (8.0 * 7 * 6 * 5));
    const double row = 7168 * (1 + 4.0 / 128) + 7168 * 2;  // fp8 dispatch + bf16 combine
    const Traffic& between = auto_mode.traffic[0];
    EXPECT_EQ(between.kind, "ep dispatch + combine (DeepEP normal, between nodes)");
    EXPECT_EQ(between.bytes_per_token_per_layer, static_cast<std::int64_t>(remote_nodes * row));
    EXPECT_EQ(between.layers, 58);
    EXPECT_TRUE(between.inter_node);
    EXPECT_EQ(between.phase, TrafficPhase::kPrefill);
    EXPECT_EQ(auto_mode.traffic[1].bytes_per_token_per_layer, static_cast<std::int64_t>(8 * 31.0 / 32 * row));
    EXPECT_FALSE(auto_mode.traffic[1].inter_node);
    const Traffic& low_latency = auto_mode.traffic[2];
    EXPECT_EQ(low_latency.kind, "ep dispatch + combine (DeepEP low-latency)");
    EXPECT_EQ(low_latency.bytes_per_token_per_layer, static_cast<std::int64_t>(8 * 31.0 / 32 * row));
    EXPECT_TRUE(low_latency.inter_node);
    EXPECT_EQ(low_latency.phase, TrafficPhase::kDecode);

    // Low-latency kernels for both passes: prefill now pays their bytes over the NIC; decode
    // does not change.
    const Plan ll = plan("deepep", "low_latency");
    EXPECT_EQ(ll.traffic.back().phase, TrafficPhase::kEvery);
    EXPECT_LT(ll.all_groups_prefill_tokens_per_s, auto_mode.all_groups_prefill_tokens_per_s);
    EXPECT_DOUBLE_EQ(ll.batch_decode_step_s, auto_mode.batch_decode_step_s);
    EXPECT_GT(auto_mode.all_groups_prefill_tokens_per_s, a2a.all_groups_prefill_tokens_per_s);

    // On this CPU tessera serve runs deepep as its all_to_all exchange, and plans it so.
    PlanRequest cpu = request("deepseek-v3", "cpu", [](server::ServerArgs& a) { deepseek_prefill_layout(a, "deepep"); });
    cpu.prompt_len = 2000;
    const Plan here = plan_of(cpu);
    ASSERT_EQ(here.traffic.size(), 1u);
    EXPECT_EQ(here.traffic[0].kind, "ep dispatch + combine");
}

// tessera's all_to_all under DP-attention with two attention-TP ranks per group: attention is
// summed over them, each sends half of the group's rows to the experts, and the halves are
// gathered back; no layer gathers every group's rows (Qwen3-MoE has no dense layer).
TEST(PlanTest, ScatteredMoeGathersOnlyWithinTheGroup) {
    const Plan p = plan_of(request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) {
        a.tp_size = 8;
        a.dp_size = 4;
        a.enable_dp_attention = true;
        a.ep_size = 8;
        a.moe_a2a_backend = "all_to_all";
    }));
    std::vector<std::string> kinds;
    for (const Traffic& t : p.traffic) kinds.push_back(t.kind);
    EXPECT_EQ(kinds, (std::vector<std::string>{"attention-tp all-reduce", "attention-tp all-gather, moe slices",
                                               "ep dispatch + combine"}));
    ASSERT_EQ(p.traffic.size(), 3u);
    EXPECT_EQ(p.traffic[1].bytes_per_token_per_layer, 4096 / 2 * 2) << "(A-1)/A x H x bf16";
    EXPECT_EQ(p.traffic[1].layers, 94);
    EXPECT_EQ(p.traffic[2].bytes_per_token_per_layer, 2 * 8 * 7 * 4096 * 2 / 8 / 2)
        << "each of the group's two attention-TP ranks sends half of its rows";
}

// Under pipeline parallelism the traffic rows count each stage's own layers: DeepSeek-V3's 61
// layers over 4 stages are 15, 15, 15 and 16 (the last stages take the remainder), and only
// stage 0 holds the 3 dense layers. A replicated dense MLP (--moe-dense-tp-size 1) needs no
// all-reduce.
TEST(PlanTest, TrafficCountsEachStagesOwnLayers) {
    auto plan = [](std::optional<int> dense_tp) {
        return plan_of(request("deepseek-v3", "h20", [&](server::ServerArgs& a) {
            a.tp_size = 8;
            a.pp_size = 4;
            a.ep_size = 8;
            a.moe_a2a_backend = "all_to_all";
            a.moe_dense_tp_size = dense_tp;
            a.nnodes = 4;
            a.dist_init_addr = "10.0.0.1:5000";
        }));
    };
    const Plan p = plan(std::nullopt);
    auto find = [](const Plan& plan, const std::string& kind) -> const Traffic* {
        for (const Traffic& t : plan.traffic)
            if (t.kind == kind) return &t;
        return nullptr;
    };
    const Traffic* reduce = find(p, "tp all-reduce");
    const Traffic* dense = find(p, "tp all-reduce, dense mlp");
    const Traffic* dispatch = find(p, "ep dispatch + combine");
    ASSERT_TRUE(reduce && dense && dispatch);
    EXPECT_EQ(reduce->layers, 16);
    EXPECT_EQ(reduce->total_layers, 61);
    EXPECT_EQ(dense->layers, 3);
    EXPECT_EQ(dense->total_layers, 3);
    EXPECT_EQ(dispatch->layers, 16);
    EXPECT_EQ(dispatch->total_layers, 58);
    EXPECT_EQ(find(p, "pp send")->total_layers, 3);
    EXPECT_EQ(find(plan(1), "tp all-reduce, dense mlp"), nullptr);
}

// Two-batch overlap: a batch's bytes move while its other half computes, so the step is the
// slower of compute and traffic (measured here against the same launch with free links and
// no collective latency); a lone decoding request is not split.
TEST(PlanTest, TwoBatchOverlapHidesTheSmallerOfComputeAndTraffic) {
    auto plan = [](bool overlap, bool free_links) {
        PlanRequest r = request("deepseek-v3", "h100", [&](server::ServerArgs& a) {
            a.tp_size = 72;
            a.dp_size = 72;
            a.enable_dp_attention = true;
            a.ep_size = 72;
            a.ep_num_redundant_experts = 32;
            a.moe_dense_tp_size = 1;
            a.nnodes = 9;
            a.dist_init_addr = "10.0.0.1:5000";
            a.moe_a2a_backend = "deepep";
            a.enable_two_batch_overlap = overlap;
        });
        r.prompt_len = 2000;
        r.decode_batch = 256;
        r.device.collective_latency_s = 0;
        if (free_links) r.device.inter_node_bandwidth = r.device.intra_node_bandwidth = 1e30;
        return plan_of(r);
    };
    const Plan serial = plan(false, false), overlapped = plan(true, false), compute = plan(false, true);
    const double traffic = serial.batch_decode_step_s - compute.batch_decode_step_s;
    ASSERT_GT(traffic, 0);
    EXPECT_NEAR(overlapped.batch_decode_step_s, std::max(compute.batch_decode_step_s, traffic), 1e-9);
    EXPECT_LT(overlapped.batch_decode_step_s, serial.batch_decode_step_s);
    EXPECT_GT(overlapped.all_groups_prefill_tokens_per_s, serial.all_groups_prefill_tokens_per_s);
    EXPECT_LE(overlapped.all_groups_prefill_tokens_per_s, compute.all_groups_prefill_tokens_per_s * (1 + 1e-9));
    EXPECT_DOUBLE_EQ(overlapped.decode_tokens_per_s, serial.decode_tokens_per_s);
}

// Under DP-attention with one attention rank per group, a dense MLP split over the TP group
// runs on every group's gathered tokens: per token it costs what a replicated one
// (--moe-dense-tp-size 1) costs on the group's own tokens. With memory and links free, the
// busy launches compute the same; a lone group's prefill gathers only its own tokens.
TEST(PlanTest, GatheredDenseMlpRunsOnEveryGroupsTokens) {
    auto plan = [](int dense_tp) {
        PlanRequest r = request("deepseek-v3", "h800", [&](server::ServerArgs& a) {
            a.tp_size = 8;
            a.dp_size = 8;
            a.enable_dp_attention = true;
            a.ep_size = 8;
            a.moe_dense_tp_size = dense_tp;
        });
        r.prompt_len = 2048;
        r.decode_batch = 32;
        r.device.memory_bandwidth = r.device.inter_node_bandwidth = r.device.intra_node_bandwidth = 1e30;
        r.device.collective_latency_s = 0;
        r.device.memory_bytes = std::int64_t{1} << 40;  // 671B parameters on 8 devices
        return plan_of(r);
    };
    const Plan split = plan(8), replicated = plan(1);
    ASSERT_GT(split.batch_decode_step_s, 0);
    EXPECT_TRUE(split.ranks.front().size.dense_mlp_gathered);
    EXPECT_FALSE(replicated.ranks.front().size.dense_mlp_gathered);
    EXPECT_EQ(split.ranks.front().size.dense_mlp_bytes * 8, replicated.ranks.front().size.dense_mlp_bytes);
    EXPECT_NEAR(split.batch_decode_step_s / replicated.batch_decode_step_s, 1.0, 1e-9);
    EXPECT_NEAR(split.all_groups_prefill_tokens_per_s / replicated.all_groups_prefill_tokens_per_s, 1.0, 1e-9);
    EXPECT_GT(split.prefill_tokens_per_s, replicated.prefill_tokens_per_s);
}

// Batched decode: one request per group reads what the single-request estimate reads (its
// token's experts are 8 of 128, one local expert in expectation), so the two agree; more
// requests read more experts and KV and run more FLOPs, so throughput grows less than the batch.
TEST(PlanTest, BatchedDecodeGrowsFromTheSingleRequestEstimate) {
    auto plan = [](std::int64_t batch, std::int64_t context) {
        PlanRequest r = request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) {
            a.tp_size = 8;
            a.ep_size = 8;
        });
        r.decode_batch = batch;
        r.prompt_len = context;
        return plan_of(r);
    };
    const Plan one = plan(1, 2048);
    ASSERT_GT(one.decode_tokens_per_s, 0);
    EXPECT_NEAR(one.batch_decode_tokens_per_s / one.decode_tokens_per_s, 1.0, 1e-9);
    EXPECT_EQ(plan(0, 2048).batch_decode_tokens_per_s, 0) << "not asked";
    const Plan b64 = plan(64, 2048), b1024 = plan(1024, 2048);
    EXPECT_GT(b64.batch_decode_tokens_per_s, 8 * one.batch_decode_tokens_per_s);
    EXPECT_LT(b64.batch_decode_tokens_per_s, 64 * one.batch_decode_tokens_per_s);
    EXPECT_GT(b1024.batch_decode_tokens_per_s, b64.batch_decode_tokens_per_s);
    EXPECT_LT(b1024.batch_decode_tokens_per_s, 16 * b64.batch_decode_tokens_per_s);
    EXPECT_GT(plan(64, 8192).batch_decode_step_s, b64.batch_decode_step_s) << "four times the KV to read";
}

// Every DP group prefilling at once: one group is the single-group figure; replicas multiply
// it; DP-attention groups multiply it less, because each rank also runs its share of the
// other groups' expert work.
TEST(PlanTest, AllGroupsPrefillScalesWithTheGroups) {
    auto plan = [](int dp, bool dp_attention) {
        return plan_of(request("deepseek-v3", "h800", [&](server::ServerArgs& a) {
            a.tp_size = 16;
            a.ep_size = 16;
            a.dp_size = dp;
            a.enable_dp_attention = dp_attention;
            a.nnodes = 2 * (dp_attention ? 1 : dp);
            a.dist_init_addr = "10.0.0.1:5000";
        }));
    };
    const Plan one = plan(1, false);
    ASSERT_GT(one.prefill_tokens_per_s, 0);
    EXPECT_NEAR(one.all_groups_prefill_tokens_per_s / one.prefill_tokens_per_s, 1.0, 1e-9);
    const Plan replicas = plan(2, false);
    EXPECT_NEAR(replicas.all_groups_prefill_tokens_per_s / replicas.prefill_tokens_per_s, 2.0, 1e-9);
    const Plan dpa = plan(8, true);
    EXPECT_GT(dpa.all_groups_prefill_tokens_per_s, 1.5 * dpa.prefill_tokens_per_s);
    EXPECT_LT(dpa.all_groups_prefill_tokens_per_s, 8 * dpa.prefill_tokens_per_s);
}

// On a host, ranks beyond its cores take turns on them: TP4 on two cores gives each rank a
// quarter of the work on half a core, so its prefill is no faster than one rank on both (and
// TP2's, one core each, neither). Links made free, so only compute differs (within a few
// percent: the parts TP does not split).
TEST(PlanTest, RanksBeyondTheCoresTakeTurnsOnThem) {
    auto ttft = [](int tp) {
        PlanRequest r = request("qwen3-235b-a22b-fp8", "cpu", [tp](server::ServerArgs& a) { a.tp_size = tp; });
        r.device.cores = 2;
        r.device.flops = 2 * 2 * 64 * 2.5e9;
        r.device.intra_node_bandwidth = 1e30;
        r.device.collective_latency_s = 0;
        r.host_memory_bytes = std::int64_t{1} << 40;
        r.prompt_len = 512;
        const Plan p = plan_of(r);
        EXPECT_TRUE(p.fits()) << (p.checks.empty() ? "" : p.checks.front().what);
        return p.ttft_s;
    };
    const double one = ttft(1);
    ASSERT_GT(one, 0);
    EXPECT_NEAR(ttft(2) / one, 1.0, 0.05);
    EXPECT_NEAR(ttft(4) / one, 1.0, 0.05);  // before: 0.5, as if each rank had a core of its own
}

// A core computing alone runs faster than each of several busy ones (--core-tflops): a lone
// request's PP2 stages, one rank busy at a time, each get the one-core rate, while TP2's two
// ranks, busy together, keep half the host's each.
TEST(PlanTest, ALoneBusyCoreComputesAtItsOwnRate) {
    auto ttft = [](const std::function<void(server::ServerArgs&)>& layout, double core_flops) {
        PlanRequest r = request("qwen3-235b-a22b-fp8", "cpu", layout);
        r.device.cores = 2;
        r.device.flops = 1e12;
        r.device.core_flops = core_flops;
        r.device.intra_node_bandwidth = 1e30;
        r.device.collective_latency_s = 0;
        r.host_memory_bytes = std::int64_t{1} << 40;
        r.prompt_len = 512;
        return plan_of(r).ttft_s;
    };
    const auto pp2 = [](server::ServerArgs& a) { a.pp_size = 2; };
    const auto tp2 = [](server::ServerArgs& a) { a.tp_size = 2; };
    ASSERT_GT(ttft(pp2, 0), 0);
    EXPECT_NEAR(ttft(pp2, 0.8e12) / ttft(pp2, 0), 0.5 / 0.8, 0.02);
    EXPECT_NEAR(ttft(tp2, 0.8e12) / ttft(tp2, 0), 1.0, 1e-9);
}

TEST(PlanTest, WhatDoesNotFitGetsOneFixThatWorks) {
    // DeepSeek-V3 in fp8 on 8 H20s: 88 GB of weights per rank. More memory cannot help; a
    // second stage (and node) does.
    const Plan tp8 = plan_of(request("deepseek-v3", "h20", [](server::ServerArgs& a) { a.tp_size = 8; }));
    ASSERT_FALSE(tp8.fits());
    EXPECT_EQ(tp8.checks.back().fix, "set --pp-size 2 and --nnodes 2 (16 devices)");

    // With that fix and too small a fraction: the fraction is the fix, and it is enough.
    auto low = request("deepseek-v3", "h20", [](server::ServerArgs& a) {
        a.tp_size = 8;
        a.pp_size = 2;
        a.nnodes = 2;
        a.dist_init_addr = "10.0.0.1:5000";
        a.mem_fraction_static = 0.3;
    });
    const Plan small = plan_of(low);
    ASSERT_FALSE(small.fits());
    const std::string fix = small.checks.back().fix;
    ASSERT_EQ(fix.rfind("set --mem-fraction-static to at least ", 0), 0u) << fix;
    low.args.mem_fraction_static = std::stod(fix.substr(38));
    EXPECT_TRUE(plan_of(low).fits()) << "the proposed fraction fits";

    // Ranks beyond a node's devices.
    const Plan crowded = plan_of(request("deepseek-v3", "h20", [](server::ServerArgs& a) {
        a.tp_size = 8;
        a.pp_size = 2;
    }));
    ASSERT_FALSE(crowded.fits());
    EXPECT_EQ(crowded.checks[1].fix, "set --nnodes 2");

    // A pool capped below the context: the cap is the fix, not the memory.
    const Plan capped = plan_of(request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) {
        a.tp_size = 4;
        a.max_total_tokens = 1000;
    }));
    ASSERT_FALSE(capped.fits());
    EXPECT_EQ(capped.checks.back().fix, "raise --max-total-tokens to at least 40960 (or drop it)");
}

TEST(PlanTest, AShardTheModelCannotTakeIsNamed) {
    // Seed 003: TP 8 cuts Qwen3-235B-FP8's 1536-wide experts into 192-column slices, not whole
    // 128-wide fp8 blocks; TP 4 (384) works.
    const Plan tp8 = plan_of(request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) { a.tp_size = 8; }));
    ASSERT_FALSE(tp8.fits());
    EXPECT_NE(tp8.checks.front().what.find("Weight output_partition_size = 192 is not divisible by weight quantization "
                                           "block_n = 128"),
              std::string::npos)
        << tp8.checks.front().what;
    EXPECT_TRUE(plan_of(request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) { a.tp_size = 4; })).fits());
    // 64 query heads do not split over 6 ranks.
    const PlanRequest r = request("qwen3-235b-a22b-fp8", "h20", [](server::ServerArgs& a) {
        a.tp_size = 6;
    });
    const Plan p = plan_of(r);
    ASSERT_FALSE(p.fits());
    EXPECT_NE(p.checks.front().what.find("rank 0:"), std::string::npos) << p.checks.front().what;
    EXPECT_EQ(p.startup_line, "");
}

}  // namespace
}  // namespace tessera::planner
