#pragma once
// scheduler/scheduler.h — continuous batching for one rank (SGLang's Scheduler event loop,
// reference §9), as a state machine without threads or IPC: the caller feeds requests and
// calls step(). Every batch is launched on the BatchRunner and collected later: a step
// launches batches — a prefill batch when one can be formed (prefill has priority), else a
// decode micro-batch — until max_in_flight_steps are in flight, then collects the oldest.
// With one step in flight this is the plain loop (launch, collect, repeat); with more it is
// SGLang's pipeline-parallel loop (reference §6.3, §6.4): a request whose next token is in
// flight waits for it, but successive chunks of one long prompt are in flight together.
// Overlap scheduling is the one-stage case of it with one exception: the next decode step is
// launched while the last one runs, fed the tokens that one is sampling.
// Owns the KV slot bookkeeping (SlotAllocator + PrefixCache); the K/V data itself lives
// in the executor's KvPool, addressed by the slots in each ForwardBatch.
// Not thread-safe: every method runs on the scheduler thread; event sinks are called there
// and must not call back into the Scheduler (queue an abort and apply it after step()).

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "executor/forward_batch.h"
#include "kvcache/kv_pool.h"
#include "kvcache/prefix_cache.h"
#include "scheduler/dynamic_chunking.h"
#include "scheduler/new_token_ratio.h"
#include "scheduler/prefill_adder.h"
#include "scheduler/prefill_delayer.h"
#include "scheduler/request.h"
#include "scheduler/schedule_policy.h"

namespace tessera::scheduler {

struct SchedulerConfig {
    std::int64_t max_total_num_tokens = 0;   // KV slots (memory plan), multiple of page_size
    std::int64_t page_size = 1;
    std::int64_t max_running_requests = 0;
    // --min-free-slots-delay: while requests run, new ones wait until this many running slots
    // are free, and are then admitted together (0: no wait).
    std::int64_t min_free_slots = 0;
    // --max-queued-requests: the most requests waiting (not running) at once; -1: no cap. A
    // request beyond it is refused ("The request queue is full."), or, under priority
    // scheduling, takes the place of the worst waiting request if it is better (SGLang's
    // scheduler.py _abort_on_queued_limit). Requests retracted or preempted always requeue.
    std::int64_t max_queued_requests = -1;
    std::int64_t max_prefill_tokens = 16384;
    std::int64_t chunked_prefill_size = -1;  // -1: no chunking
    std::int64_t prefill_max_requests = -1;  // -1: no cap
    std::int64_t context_len = 0;            // 0: bounded by the pool only
    SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
    bool disable_radix_cache = false;
    kvcache::EvictionPolicy radix_eviction_policy = kvcache::EvictionPolicy::kLru;  // --radix-eviction-policy
    // --prefill-decode-interval: after a prefill step (a chunk, a mixed step), this many decode
    // steps run before the next prefill may (SGLang's scheduler.py _should_defer_prefill); 0: a
    // waiting request is prefilled as soon as it fits.
    std::int64_t prefill_decode_interval = 0;
    // --max-cached-tokens: the most tokens the prefix cache keeps once no request uses them
    // (its evictable share); beyond that the policy's first leaves are evicted after each step.
    // -1: no cap, as SGLang (the cache may fill the whole pool).
    std::int64_t max_cached_tokens = -1;
    bool schedule_low_priority_values_first = false;
    // --enable-priority-scheduling (SGLang scheduler.py): fcfs / lof order the queue by
    // priority first; with preemption (unless --disable-priority-preemption), a waiting request
    // that finds the running batch full (max_running_requests) preempts running ones whose
    // priority is worse by more than the threshold: their KV is freed and they queue again,
    // keeping their output. --retraction-policy priority retracts the worst priority first.
    bool enable_priority_scheduling = false;
    bool enable_priority_preemption = false;
    std::int64_t priority_preemption_threshold = 10;  // --priority-scheduling-preemption-threshold
    bool retract_by_priority = false;
    NewTokenRatioParams new_token_ratio;     // includes --schedule-conservativeness
    int retract_decode_steps = kRetractDecodeSteps;
    std::int64_t clip_max_new_tokens = kClipMaxNewTokens;
    int decode_log_interval = 40;            // --decode-log-interval
    // --enable-request-time-stats-logging: one INFO line per finished request with its time in
    // the queue and in the model (SGLang's schedule_batch.py Req.log_time_stats).
    bool log_request_time_stats = false;
    // --strip-thinking-cache: a finished request with reasoning tokens caches its prompt only.
    bool strip_thinking_cache = false;
    // --enable-streaming-session (SGLang's session/streaming_session.py StreamingSession): a
    // finished request of a streaming session (Req::streaming_session) leaves its KV in the
    // prefix cache locked for the session, so its next turn finds it whatever the pressure,
    // until release_session(). Under --disable-radix-cache the cache then holds the sessions'
    // KV only: other requests neither match nor insert.
    bool enable_streaming_session = false;
    // --enable-session-radix-cache (SGLang's session_ref_tracker.py): the KV of every finished
    // turn of an open session (Req::radix_session) is referenced for it, and evictions take
    // what no session references first; release_session() drops the references.
    bool enable_session_radix_cache = false;
    // --enable-return-routed-experts: entries per token of the routing record (num_hidden_layers
    // × top_k); 0 when off. Every step then records each token's experts by KV slot, and a
    // request with return_routed_experts gets its positions' rows with its tokens.
    std::int64_t routed_experts_width = 0;
    // Prompt log-probabilities need a logits row (vocab_size floats) per scored position: while
    // a request that asks for them waits or is being prefilled, a prefill step takes at most
    // this many tokens (a multiple of page_size; -1: no bound).
    std::int64_t max_scored_rows_per_step = -1;
    std::uint64_t random_seed = 0;           // --random-seed (policy random)
    // Pipeline parallelism (reference §6.3): steps in flight at once (pp_size +
    // --pp-async-batch-depth; 1 = run each step to completion), and the most requests in
    // one decode micro-batch (--pp-max-micro-batch-size; 0 = no cap).
    int max_in_flight_steps = 1;
    std::int64_t max_micro_batch_size = 0;
    // --enable-mixed-chunk (SGLang scheduler.py get_new_batch_prefill, mix_with_running): a
    // prefill round also carries one decode token of every running request, so decoding does
    // not pause while prompts are computed and its weight reads ride on the prefill's. Only
    // with chunked prefill and one step in flight.
    bool enable_mixed_chunk = false;
    // Overlap scheduling (SGLang's default; off with --disable-overlap-schedule): one decode
    // step more is launched while the last one runs, fed the tokens that one will sample
    // (kFutureToken), so the runner (an executor::OverlapRunner) never waits for the
    // scheduler; mixed rounds carry those decode tokens too. Needs max_in_flight_steps 1
    // (no PP). A request that stops on an eos token wastes one decode step, whose token is
    // dropped.
    bool overlap_schedule = false;
    // --enable-dynamic-chunking (reference §7): sizes each prefill chunk instead of the fixed
    // chunked_prefill_size. Unset: fixed chunks.
    std::optional<ChunkSizePredictor> dynamic_chunking;
    // --enable-prefill-delayer (scheduler/prefill_delayer.h): each prefill pass asks the runner
    // for the attention-DP groups' agreement before it admits a waiting request. Needs overlap
    // scheduling, as SGLang's does.
    std::optional<PrefillDelayerConfig> prefill_delayer;

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
    std::int64_t touched_tokens = 0;         // slots ever handed out (resident KV bound)
    double token_usage = 0.0;                // sglang:token_usage
    double cache_hit_rate = 0.0;             // last prefill batch: hit / (hit + new)
    double gen_throughput = 0.0;             // tokens/s at the last decode log
    double new_token_ratio = 0.0;
    std::int64_t num_retracted_reqs = 0;     // in the last retraction
    std::int64_t total_retracted_reqs = 0;   // sglang:num_retractions
    std::int64_t total_preempted_reqs = 0;   // by priority preemption
    std::int64_t prompt_tokens_total = 0;
    std::int64_t cached_tokens_total = 0;
    std::int64_t num_streaming_sessions = 0;         // sglang:num_streaming_sessions (holding KV)
    std::int64_t streaming_session_held_tokens = 0;  // sglang:streaming_session_held_tokens
    std::int64_t num_referencing_sessions = 0;       // --enable-session-radix-cache: sessions with references
    std::int64_t generation_tokens_total = 0;
    // Chunk budget of the last prefill round: the dynamic size when dynamic chunking is on,
    // else chunked_prefill_size (-1: no chunking).
    std::int64_t prefill_chunk_size = -1;
    std::optional<PrefillDelayerStats> prefill_delayer;  // --enable-prefill-delayer
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
    // prompt, Unavailable beyond max_queued_requests (no event is emitted then).
    // max_new_tokens is clamped to the context budget.
    Status add_request(Req req);
    // Finishes the request with reason "abort" and releases its KV; false if unknown. `error`:
    // what its final event reports ("" for none: the client asked for the abort).
    bool abort(std::string_view rid, std::string_view error = "aborted by request");
    // abort() of every request whose rid starts with `prefix` (all of them for ""), with no
    // error (SGLang's /abort_request answers them as finished with reason "abort"); how many.
    int abort_prefixed(std::string_view prefix);
    // One iteration of the loop: launches batches while fewer than max_in_flight_steps are in
    // flight, then collects the oldest and applies its results. Returns the kind of the
    // collected step (kIdle: nothing was in flight).
    StepKind step();
    // No request pending and no step in flight.
    bool idle() const;
    // /pause_generation (SGLang's scheduler.py pause_generation): the steps in flight are
    // collected, then step() schedules nothing until resume(); requests still arrive and
    // queue. `retract`: every running request (and a partly prefilled one) gives up its KV,
    // unshared, and queues again with its output so far. Otherwise all stays in place.
    void pause(bool retract);
    void resume() { paused_ = false; }
    bool paused() const { return paused_; }
    // Drops the prefix cache (/flush_cache), with the KV streaming sessions hold; refused
    // (false) unless idle().
    bool flush_cache();
    // Session `id` was closed: a streaming session's last turn's KV stays in the prefix cache
    // as any finished request's (evictable), a session's references are dropped, and a turn
    // of it still running ends as an ordinary request. Nothing for an id that holds nothing.
    void release_session(const std::string& id);
    // Runs a step with no sequences that carries `command` to every rank (the expert
    // distribution recorder endpoints), after the steps in flight; its error, if any.
    Status run_expert_record(eplb::ExpertRecordCommand command);
    // /update_weights_from_disk. While admission is held no waiting request is admitted; the
    // running ones (and a prompt partly prefilled) go on, so the running batch drains.
    void hold_admission(bool hold) { admission_held_ = hold; }
    // No request holds KV for a step and no step is in flight (requests may wait).
    bool nothing_running() const;
    // Two steps as run_expert_record's: every rank loads its share of `source`'s weights
    // beside its own, then all swap them in when every pipeline stage loaded, else all drop
    // them; the first failure, if any.
    Status run_weight_update(const models::WeightsSource& source);
    // After new weights: drops the prefix cache, whose KV the old ones computed (waiting
    // requests match again when admitted). False, and nothing dropped, while a request runs
    // on part of it (paused in place).
    bool drop_cache_after_weight_update();
    // /release_memory_occupation (scheduler_update_weights_mixin.py release_memory_occupation):
    // refused unless idle(); drops the prefix cache when asked (the KV cache's release always
    // does). Then a step carries `release` to every rank. The weights come back through
    // run_weight_update of the served folder; the KV pool's pages as steps write them.
    Status run_memory_release(const models::MemoryRelease& release, bool drop_cache);

    SchedulerStats stats() const;
    const SchedulerConfig& config() const { return config_; }
    std::int64_t max_req_len() const { return max_req_len_; }
    // Verifies the KV accounting: no slot held twice, and
    // available + cached + Σ requests' own pages == capacity; and that each request's
    // in-flight bookkeeping matches the steps in flight. For tests and debug checks.
    Status check_invariants() const;
    int num_in_flight_steps() const { return static_cast<int>(in_flight_.size()); }

 private:
    struct PrefillItem {
        Req* req;
        std::int64_t extend_len;
        bool truncated;  // more chunks follow
    };
    // A launched step's sequence. The request is found again by rid and arrival: it may have
    // been aborted meanwhile, and its rid reused by a new request.
    struct InFlightSeq {
        std::string rid;
        std::uint64_t arrival = 0;
        bool need_token = false;
        bool truncated = false;  // prefill chunk with more chunks to follow
        bool decode = false;     // a decode token (a decode step, or mixed into a prefill step)
        std::int64_t start_pos = 0;  // the positions the step computes
        std::int64_t n_tokens = 0;
    };
    struct InFlightStep {
        StepKind kind = StepKind::kIdle;
        std::vector<InFlightSeq> seqs;
        Status launch_status;  // a failed launch is reported when the step is collected
    };

    // A step with no sequences carrying a command to every rank, after the steps in flight.
    StatusOr<std::vector<executor::SampledToken>> run_control_step(const executor::ForwardBatch& batch);
    // flush_cache's work, once the caller has checked that nothing runs on the cache.
    bool drop_prefix_cache();
    int in_flight_limit() const { return config_.overlap_schedule ? 2 : config_.max_in_flight_steps; }
    void merge_last_prefill();
    bool launch_next_batch();
    // The next prefill step's token budget: configured_chunk_budget(), bounded by
    // max_scored_rows_per_step while a request that scores its prompt waits or is prefilled.
    std::int64_t prefill_chunk_budget() const;
    // --chunked-prefill-size, or dynamic chunking's size for the next chunk (-1: no chunking).
    std::int64_t configured_chunk_budget() const;
    // With the prefill delayer: one agreement per pass (SGLang's PrefillDelayerSinglePassExecutor),
    // asked when a waiting request is about to be admitted, else at the end saying "nothing".
    std::vector<PrefillItem> get_new_batch_prefill();
    struct PrefillGate {
        double token_usage = 0.0;
        std::int64_t waiting = 0;  // the queue's length when the pass began
        std::optional<PrefillDecision> decision;
        bool fresh = false;        // agreed in this pass (else the last pass's, reused)
    };
    std::vector<PrefillItem> admit_prefill(PrefillGate* gate);
    PrefillDecision agree_on_prefill(const executor::BatchRunner::PrefillIntent& mine, bool* fresh);
    bool alloc_prefill_slots(std::vector<PrefillItem>& items, Req* old_chunked);
    // Priority preemption for `incoming` (extend_len tokens to compute) when the running batch
    // is full: frees the victims' KV and their reservations in `adder`, moves them to
    // `preempted`. False when no set of running requests qualifies, or when one that would
    // is in a step in flight (then preemption_waits_ holds decode launches until it is not).
    bool preempt_for(const Req& incoming, std::int64_t extend_len, PrefillAdder& adder, std::vector<Req*>& preempted);
    void requeue(Req& req);
    // Whether a request of `priority` may join the queue; may evict a worse waiting request.
    Status make_room_in_queue(std::int64_t priority);
    void launch_prefill(const std::vector<PrefillItem>& items, const std::vector<Req*>& decode);
    // --enable-return-routed-experts: the step's routing into routed_by_slot_, then each
    // request that asked gets the rows of its positions computed since its last token.
    void record_routed_experts(const InFlightStep& step, const std::vector<Req*>& reqs,
                               const std::vector<executor::SampledToken>& results);
    // The requests that can decode in the step being formed (decode_micro_batch over the
    // running ones and, with overlap scheduling, those whose last prompt chunk is in flight).
    std::vector<Req*> ready_to_decode() const;
    std::vector<Req*> mixed_decode_batch();
    void add_decode_seq(Req& r, executor::ForwardBatch& batch, InFlightStep& step);
    // Constrained decoding: the tokens `r` may sample in the step `seq` joins (a failure is kept
    // in r.constraint_error); and, when its token comes, the constraint told of it. False when
    // the request ended instead (the constraint failed or refused the token): its last event is out.
    void constrain(Req& r, executor::ForwardSequence& seq);
    bool take_constrained_token(Req& r, std::int32_t token);
    // A decode token's result; true when it finished the request.
    bool apply_decode_token(Req& r, const executor::SampledToken& tok);
    std::vector<Req*> update_running_batch();
    std::vector<Req*> decode_micro_batch(const std::vector<Req*>& reqs) const;
    bool check_decode_mem(const std::vector<Req*>& reqs);
    void retract_decode(std::vector<Req*>& batch);
    void launch_decode(const std::vector<Req*>& batch);
    void launch(executor::ForwardBatch& batch, InFlightStep step);
    StepKind collect_oldest();
    // Appends the prompt log-probabilities a prefill step computed for `r`.
    void record_input_logprobs(Req& r, const InFlightSeq& seq, const executor::SampledToken& result);
    void apply_prefill_results(const InFlightStep& step, const std::vector<Req*>& reqs,
                               const std::vector<executor::SampledToken>& tokens);
    void apply_decode_results(const std::vector<Req*>& reqs,
                              const std::vector<executor::SampledToken>& tokens);
    Req* find_live(const InFlightSeq& seq);
    void abort_batch(const std::vector<Req*>& reqs, const Status& status);

    kvcache::MatchResult match(const Req& req);
    void evict_if_needed(std::int64_t n_tokens);
    void trim_prefix_cache();
    bool alloc_slots(Req& req, std::int64_t n);
    void drop_uncomputed_tail(Req& req);
    void cache_finished_req(Req& req);
    // `chunked`: a chunk of a prompt still prefilling (its inserts do not count as hits).
    void cache_unfinished_req(Req& req, bool chunked = false);
    // Whether `req` matches and fills the prefix cache: always, but under --disable-radix-cache
    // only a turn of a streaming session.
    bool shares_prefixes(const Req& req) const {
        return !config_.disable_radix_cache || !req.streaming_session.empty();
    }
    // Locks `node` (the end of `tokens` tokens just cached) for streaming session `id`, instead
    // of its earlier turn's.
    void hold_for_session(const std::string& id, kvcache::NodeId node, std::int64_t tokens);
    // The KV pool is full and nothing running can free it: the oldest streaming session's hold
    // becomes an ordinary cache entry (its next turn computes it again) rather than the queue
    // waiting for ever (the deadlock SGLang's locked streaming sessions can reach). False when
    // no session holds anything.
    bool release_oldest_session_hold();
    void release_kv_no_insert(Req& req);
    void emit(Req& req, const executor::SampledToken* token, const executor::SampledToken* unsampled = nullptr);
    void finish(Req& req, FinishReason reason, std::string error);
    void drop_finished();

    std::int64_t num_used_tokens() const;
    void log_prefill(const PrefillAdder& adder, std::int64_t n_new_seqs, std::int64_t running_bs);
    void log_decode();
    void log_time_stats(const Req& r);  // --enable-request-time-stats-logging

    const SchedulerConfig config_;
    executor::BatchRunner& runner_;
    Clock clock_;
    std::optional<PrefillDelayer> delayer_;
    bool paused_ = false;
    bool admission_held_ = false;
    PrefillDecision last_delay_decision_;
    std::int64_t max_prefill_bs_ = 0;  // the most requests one prefill admitted (SGLang's max_prefill_bs)
    std::int64_t max_req_len_ = 0;
    std::int64_t max_req_input_len_ = 0;

    std::unique_ptr<kvcache::SlotAllocator> allocator_;
    std::unique_ptr<kvcache::PrefixCache> cache_;
    NewTokenRatio ratio_;
    PolicyRng rng_;

    std::unordered_map<std::string, std::unique_ptr<Req>> reqs_;  // every unfinished request
    std::vector<Req*> waiting_;       // policy-ordered queue; no KV held
    std::vector<Req*> running_;       // decoding; those awaiting a token sit out a step (see overlap_schedule)
    std::vector<Req*> last_prefill_;  // prefilled last step, join running_ next step
    std::vector<Req*> prefilling_;    // final prefill chunk in flight (count as running)
    Req* chunked_req_ = nullptr;      // partially prefilled, continued first next round
    bool preemption_waits_ = false;   // a preemption needs the steps in flight collected first
    bool batch_is_full_ = false;      // skip prefill until the running batch shrinks
    std::int64_t decode_steps_owed_ = 0;  // --prefill-decode-interval: decode steps before the next prefill
    std::deque<InFlightStep> in_flight_;  // launched, not yet collected; oldest first
    // --enable-return-routed-experts: I32 [KV slots, routed_experts_width], the experts of the
    // token whose K/V each slot holds (SGLang's routed-experts capturer's host buffer).
    std::vector<std::int32_t> routed_by_slot_;
    std::int64_t last_prefill_chunk_size_ = -1;
    std::vector<Req*> mixed_decode_;  // the running requests the prefill round being formed carries
    struct SessionHold {
        kvcache::NodeId node = 0;  // locked
        std::int64_t tokens = 0;
        std::uint64_t order = 0;   // when it was taken: the oldest gives way first
    };
    std::uint64_t next_hold_order_ = 0;
    std::unordered_map<std::string, SessionHold> session_holds_;  // streaming session id -> its last turn's KV
    // --enable-session-radix-cache: session id -> the nodes its finished turns reference.
    std::unordered_map<std::string, std::vector<kvcache::NodeId>> session_refs_;
    std::uint64_t next_arrival_ = 0;

    std::int64_t forward_ct_decode_ = 0;
    std::int64_t num_generated_since_log_ = 0;
    double last_decode_log_time_ = 0.0;
    double last_gen_throughput_ = 0.0;
    double last_cache_hit_rate_ = 0.0;
    std::int64_t last_num_retracted_ = 0;
    std::int64_t total_retracted_ = 0;
    std::int64_t total_preempted_ = 0;
    std::int64_t prompt_tokens_total_ = 0;
    std::int64_t cached_tokens_total_ = 0;
    std::int64_t generation_tokens_total_ = 0;
};

}  // namespace tessera::scheduler
