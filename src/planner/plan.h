#pragma once
// planner/plan.h — what a launch would do, computed before it runs (`tessera plan`): the rank
// table and groups (dist::ParallelLayout), each rank's weights, KV pool and start-up line
// (the memory path of `tessera serve`), the traffic per token of TP, PP, EP and DP-attention,
// the pipeline bubble, a roofline estimate of TTFT and decode speed, and the pre-launch
// checks with the one fix that works when something does not fit.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/parallel_layout.h"
#include "loader/model_config.h"
#include "planner/device.h"
#include "planner/model_size.h"
#include "scheduler/dynamic_chunking.h"
#include "scheduler/memory_plan.h"
#include "server/server_args.h"

namespace tessera::planner {

struct PlanRequest {
    server::ServerArgs args;  // resolved (ServerArgs::resolve)
    loader::ModelConfig config;
    DeviceSpec device;
    std::int64_t prompt_len = 4096;  // the request TTFT and the bubble are estimated for
    // Requests decoding at once in each DP group (at a context of prompt_len) for the batched
    // decode estimate; 0: none.
    std::int64_t decode_batch = 0;
    // SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR of the launch: how far dynamic chunks follow the
    // fitted cost (scheduler::ChunkSizePredictorConfig::smooth_factor).
    double dynamic_chunking_smooth_factor = scheduler::kDefaultDynamicChunkingSmoothFactor;
    std::int64_t host_memory_bytes = 0;  // `cpu`: the host's memory (tests pin it)
    bool suggest_fixes = true;  // search --pp-size for a fix (a sweep does not need one)
};

struct RankPlan {
    dist::RankCoords coords;
    std::int64_t capacity_bytes = 0;
    RankSize size;
    std::int64_t own_max_total_num_tokens = 0;  // before the ranks agree on the smallest
    std::string error;  // this rank cannot start (the plan's first failing check names it)
};

// Which forward passes a collective runs in: DeepEP dispatches prefill and decode batches with
// different kernels (normal and low-latency), which move different bytes.
enum class TrafficPhase { kEvery, kPrefill, kDecode };

// Bytes one token moves per layer (or per stage boundary) on each rank, and where.
struct Traffic {
    std::string kind;   // "tp all-reduce", "pp send", "ep dispatch+combine", "dp-attention gather+scatter"
    std::int64_t bytes_per_token_per_layer = 0;
    std::int64_t layers = 0;  // layers (or boundaries) it happens at
    // Collectives per layer (or boundary) that wait for every rank's compute to finish: each
    // costs DeviceSpec::collective_latency_s, the skew between ranks plus the hand-off. One
    // that follows another, or only work every rank does alike (the router), costs its bytes.
    int syncs = 1;
    bool inter_node = false;
    std::string formula;
    TrafficPhase phase = TrafficPhase::kEvery;
    // The model's layers (or boundaries) it happens at, over every stage: `layers` is the most
    // one stage has (a stage's pace in prefill), this is what a token crosses in decode.
    std::int64_t total_layers = 0;
};

struct Check {
    bool ok = true;
    std::string what;
    std::string fix;  // empty when ok
};

struct Plan {
    std::vector<std::string> rewrites;  // SGLang's rewrites of the flags (ServerArgs::notes)
    std::string tessera_refusal;        // what `tessera serve` would refuse on this CPU build, if anything
    std::vector<std::string> caveats;   // flags of the launch whose cost the estimates leave out
    dist::ParallelConfig parallel;
    int world_size = 0;
    std::vector<RankPlan> ranks;
    WeightTypes types;
    double mem_fraction_static = 0;
    std::int64_t chunked_prefill_size = 0;
    std::int64_t context_len = 0;
    std::int64_t max_total_num_tokens = 0;  // agreed (the smallest rank's)
    std::int64_t max_running_requests = 0;
    double available_gb_rank0 = 0;
    std::string startup_line;  // what rank 0 of `tessera serve` logs
    std::vector<Traffic> traffic;
    int pp_size = 1;
    std::int64_t micro_batches = 1;  // prefill chunks of the prompt
    double bubble = 0;               // (P - 1) / (P - 1 + M)
    double ttft_s = 0;                // one request of prompt_len tokens on an idle launch
    double prefill_tokens_per_s = 0;  // prompts back to back: every stage busy
    // The same in every DP group (and replica) at once: the launch's input tokens/s.
    double all_groups_prefill_tokens_per_s = 0;
    double decode_tokens_per_s = 0;   // one request at a context of prompt_len
    // decode_batch requests in every DP group at once: the launch's output tokens/s and one
    // step's time (0 when not asked).
    double batch_decode_tokens_per_s = 0;
    double batch_decode_step_s = 0;
    std::vector<Check> checks;
    bool fits() const;
};

StatusOr<Plan> make_plan(const PlanRequest& request);

// The memory request of one rank from the launch flags: what `tessera serve` sizes its KV pool
// with at start-up (from the loaded model's bytes) and `tessera plan` (from config.json's).
scheduler::RankMemoryRequest rank_memory_request(const server::ServerArgs& args, std::int64_t model_context_len,
                                                 std::int64_t capacity_bytes, std::int64_t weight_bytes,
                                                 std::int64_t kv_bytes_per_token);

// "1.23 GB", "12.3 MB", "4.0 kB".
std::string bytes_text(std::int64_t bytes);

// A table for people and an object for machines.
std::string render_plan(const Plan& plan, const PlanRequest& request);
std::string plan_json(const Plan& plan, const PlanRequest& request);

}  // namespace tessera::planner
