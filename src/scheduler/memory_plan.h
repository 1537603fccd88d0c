#pragma once
// scheduler/memory_plan.h — how big the KV pool and the request limits are (SGLang's
// model_runner KV sizing and server-args memory defaults, reference §8.2–§8.4), as pure
// formulas so `tessera plan`, start-up and tests share them.
//
// CPU reading of SGLang's GPU terms:
//   * "GPU memory" (total_gpu_memory, gpu_mem) = the rank's capacity: host memory (or the
//     cgroup limit) divided by the ranks on this host, unless given explicitly;
//   * "available after weights" = capacity − weight bytes of this rank (nothing else is
//     resident before the pool is made; activations live in the non-static part);
//   * reserve_for_graph_mb = 0 (no CUDA graphs) and no DeepEP / XPU reserve.
// Thread-safe (pure functions).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::scheduler {

struct MemoryPlanInput {
    std::int64_t capacity_bytes = 0;      // the rank's memory (see above)
    std::int64_t weight_bytes = 0;        // weights held by this rank
    double mem_fraction_static = 0.0;     // (weights + KV pool) / capacity
    std::int64_t kv_bytes_per_token = 0;  // K+V over this rank's layers (cell size)
    std::int64_t page_size = 1;
    std::int64_t context_len = 0;
    std::optional<std::int64_t> max_running_requests;  // --max-running-requests
    std::optional<std::int64_t> max_total_tokens;      // --max-total-tokens (debug cap)
    int dp_size = 1;
    bool enable_dp_attention = false;
};

struct MemoryPlan {
    std::int64_t max_total_num_tokens = 0;   // KV slots; multiple of page_size
    std::int64_t req_to_token_pool_size = 0; // request rows (max_num_reqs)
    std::int64_t req_to_token_width = 0;     // context_len + 4
    std::int64_t max_running_requests = 0;
    std::int64_t max_req_len = 0;            // input + output of one request
    std::int64_t max_req_input_len = 0;
    std::int64_t kv_pool_bytes = 0;          // max_total_num_tokens · kv_bytes_per_token
    double rest_gib = 0.0;                   // memory left for the pool before rounding
    std::vector<std::string> warnings;       // to be logged by the caller (WARN)
};

// Fails with "Not enough memory. Please try to increase --mem-fraction-static." when the
// pool would hold no token.
StatusOr<MemoryPlan> plan_memory(const MemoryPlanInput& in);

struct MemFractionInput {
    std::optional<std::int64_t> capacity_mib;  // unset: unknown → 0.95
    std::int64_t chunked_prefill_size = -1;    // resolved value; -1 = chunking off
    std::int64_t max_prefill_tokens = 16384;
    int tp_size = 1;
    int pp_size = 1;
    std::int64_t host_headroom_mib = 0;  // added to the reserve: cpu_host_headroom_mib on CPU
};

// Default --mem-fraction-static (§8.2): reserve 512 MiB + 1.5 MiB per activation token +
// tp·pp/8 GiB (+ graph reserve, 0 on CPU), at least 10 GiB above 60 GiB of capacity;
// fraction = round((capacity − reserve) / capacity, 3).
double default_mem_fraction_static(const MemFractionInput& in);

// On a CPU host the rank's "device memory" is the machine's RAM, which the OS, its page
// cache and the HTTP/tokenizer side also live in; a GPU's memory holds none of them. The
// default reserve keeps this much more for them: a tenth of the rank's capacity, at least
// 1 GiB.
std::int64_t cpu_host_headroom_mib(std::int64_t capacity_mib);

// Default --max-cached-tokens: the tokens the prefix cache may keep for reuse once no
// request holds them, an eighth of the rank's memory. SGLang lets the cache fill the pool
// (GPU memory is reserved up front anyway); on CPU each cached token is resident RAM.
std::int64_t default_max_cached_tokens(std::int64_t capacity_bytes, std::int64_t kv_bytes_per_token);

// Default --chunked-prefill-size from the rank's capacity (§8.1 tiers).
std::int64_t default_chunked_prefill_size(std::optional<std::int64_t> capacity_mib);

// One rank's memory as `tessera serve` settles it from its flags (unset = SGLang's None),
// before the ranks agree on the smallest pool: the defaults above, then plan_memory. The
// one path for start-up and `tessera plan`.
struct RankMemoryRequest {
    std::int64_t capacity_bytes = 0;
    std::int64_t weight_bytes = 0;
    std::int64_t kv_bytes_per_token = 0;
    std::int64_t model_context_len = 0;  // config.json max_position_embeddings
    std::optional<double> mem_fraction_static;
    std::optional<std::int64_t> chunked_prefill_size;
    std::optional<std::int64_t> context_length;
    std::optional<std::int64_t> max_running_requests;
    std::optional<std::int64_t> max_total_tokens;
    std::int64_t max_prefill_tokens = 16384;
    std::int64_t page_size = 1;
    int tp_size = 1;
    int pp_size = 1;
    int dp_size = 1;
    bool enable_dp_attention = false;
};

struct RankMemory {
    double mem_fraction_static = 0.0;
    std::int64_t chunked_prefill_size = 0;
    std::int64_t context_len = 0;
    MemoryPlan plan;
};

// The defaults alone (mem_fraction_static, chunked_prefill_size, context_len; plan left empty):
// they do not depend on whether the pool fits.
RankMemory rank_memory_defaults(const RankMemoryRequest& request);
StatusOr<RankMemory> plan_rank_memory(const RankMemoryRequest& request);

}  // namespace tessera::scheduler
