#pragma once
// scheduler/scheduler.h — continuous batching for one rank (SGLang's Scheduler event loop,
// reference §9), as a state machine without threads or IPC: the caller feeds requests and
// calls step(); each step runs at most one batch on the BatchRunner — a prefill batch when
// one can be formed (prefill has priority), else one decode step of the running requests.
// Owns the KV slot bookkeeping (SlotAllocator + PrefixCache); the K/V data itself lives
// in the executor's KvPool, addressed by the slots in each ForwardBatch.
// Not thread-safe: every method runs on the scheduler thread; event sinks are called there
// and must not call back into the Scheduler (queue an abort and apply it after step()).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "executor/forward_batch.h"
#include "kvcache/kv_pool.h"
#include "kvcache/prefix_cache.h"
#include "scheduler/new_token_ratio.h"
#include "scheduler/prefill_adder.h"
#include "scheduler/request.h"
#include "scheduler/schedule_policy.h"

namespace tessera::scheduler {

struct SchedulerConfig {
    std::int64_t max_total_num_tokens = 0;   // KV slots (memory plan), multiple of page_size
    std::int64_t page_size = 1;
    std::int64_t max_running_requests = 0;
    std::int64_t max_prefill_tokens = 16384;
    std::int64_t chunked_prefill_size = -1;  // -1: no chunking
    std::int64_t prefill_max_requests = -1;  // -1: no cap
    std::int64_t context_len = 0;            // 0: bounded by the pool only
    SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
    bool disable_radix_cache = false;
    bool schedule_low_priority_values_first = false;
    NewTokenRatioParams new_token_ratio;     // includes --schedule-conservativeness
    int retract_decode_steps = kRetractDecodeSteps;
    std::int64_t clip_max_new_tokens = kClipMaxNewTokens;
    int decode_log_interval = 40;            // --decode-log-interval
    std::uint64_t random_seed = 0;           // --random-seed (policy random)

    Status validate() const;
};

// Gauges for /metrics and /get_server_info (SGLang's SchedulerStats names in comments).
struct SchedulerStats {
    std::int64_t num_running_reqs = 0;       // sglang:num_running_reqs
    std::int64_t num_queue_reqs = 0;         // sglang:num_queue_reqs
    std::int64_t max_total_num_tokens = 0;
    std::int64_t num_used_tokens = 0;        // max_total − (available + evictable)
    std::int64_t available_tokens = 0;       // sglang:kv_available_tokens
    std::int64_t evictable_tokens = 0;       // sglang:kv_evictable_tokens
    double token_usage = 0.0;                // sglang:token_usage
    double cache_hit_rate = 0.0;             // last prefill batch: hit / (hit + new)
    double gen_throughput = 0.0;             // tokens/s at the last decode log
    double new_token_ratio = 0.0;
    std::int64_t num_retracted_reqs = 0;     // in the last retraction
    std::int64_t total_retracted_reqs = 0;   // sglang:num_retractions
    std::int64_t prompt_tokens_total = 0;
    std::int64_t cached_tokens_total = 0;
    std::int64_t generation_tokens_total = 0;
};

enum class StepKind { kIdle, kPrefill, kDecode };

class Scheduler {
 public:
    using Clock = std::function<double()>;  // seconds, monotonic

    // REQUIRES: config.validate().ok(). `runner` must outlive the scheduler. `clock`
    // defaults to steady_clock (tests inject one for the throughput numbers).
    Scheduler(const SchedulerConfig& config, executor::BatchRunner& runner, Clock clock = {});
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Queues a request. InvalidArgument for an empty or duplicate rid, an empty or too long
    // prompt (no event is emitted then). max_new_tokens is clamped to the context budget.
    Status add_request(Req req);
    // Finishes the request with reason "abort" and releases its KV; false if unknown.
    bool abort(std::string_view rid);
    // One iteration of the loop; returns what ran.
    StepKind step();
    bool idle() const;
    // Drops the prefix cache (/flush_cache); refused (false) while requests are pending.
    bool flush_cache();

    SchedulerStats stats() const;
    const SchedulerConfig& config() const { return config_; }
    std::int64_t max_req_len() const { return max_req_len_; }
    // Verifies the KV accounting: no slot held twice, and
    // available + cached + Σ requests' own pages == capacity. For tests and debug checks.
    Status check_invariants() const;

 private:
    struct PrefillItem {
        Req* req;
        std::int64_t extend_len;
        bool truncated;  // more chunks follow
    };

    void merge_last_prefill();
    std::vector<PrefillItem> get_new_batch_prefill();
    bool alloc_prefill_slots(std::vector<PrefillItem>& items, Req* old_chunked);
    void run_prefill(std::vector<PrefillItem>& items);
    bool update_running_batch();
    bool check_decode_mem(const std::vector<Req*>& reqs);
    void retract_decode();
    void run_decode();
    void abort_batch(const std::vector<Req*>& reqs, const Status& status);

    kvcache::MatchResult match(const Req& req);
    void evict_if_needed(std::int64_t n_tokens);
    bool alloc_slots(Req& req, std::int64_t n);
    void cache_finished_req(Req& req);
    void cache_unfinished_req(Req& req);
    void release_kv_no_insert(Req& req);
    void emit(Req& req, const executor::SampledToken* token);
    void finish(Req& req, FinishReason reason, std::string error);
    void drop_finished();

    std::int64_t num_used_tokens() const;
    void log_prefill(const PrefillAdder& adder, std::int64_t n_new_seqs, std::int64_t running_bs);
    void log_decode();

    const SchedulerConfig config_;
    executor::BatchRunner& runner_;
    Clock clock_;
    std::int64_t max_req_len_ = 0;
    std::int64_t max_req_input_len_ = 0;

    std::unique_ptr<kvcache::SlotAllocator> allocator_;
    std::unique_ptr<kvcache::PrefixCache> cache_;
    NewTokenRatio ratio_;
    PolicyRng rng_;

    std::unordered_map<std::string, std::unique_ptr<Req>> reqs_;  // every unfinished request
    std::vector<Req*> waiting_;       // policy-ordered queue; no KV held
    std::vector<Req*> running_;       // the decode batch
    std::vector<Req*> last_prefill_;  // prefilled last step, join running_ next step
    Req* chunked_req_ = nullptr;      // partially prefilled, continued first next round
    bool batch_is_full_ = false;      // skip prefill until the running batch shrinks
    std::uint64_t next_arrival_ = 0;

    std::int64_t forward_ct_decode_ = 0;
    std::int64_t num_generated_since_log_ = 0;
    double last_decode_log_time_ = 0.0;
    double last_gen_throughput_ = 0.0;
    double last_cache_hit_rate_ = 0.0;
    std::int64_t last_num_retracted_ = 0;
    std::int64_t total_retracted_ = 0;
    std::int64_t prompt_tokens_total_ = 0;
    std::int64_t cached_tokens_total_ = 0;
    std::int64_t generation_tokens_total_ = 0;
};

}  // namespace tessera::scheduler
