#include "scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

#include <fmt/core.h>

#include "base/check.h"
#include "base/logging.h"
#include "executor/future_tokens.h"
#include "scheduler/priority_preemption.h"

namespace tessera::scheduler {
namespace {

constexpr std::size_t kChunkedId = std::numeric_limits<std::size_t>::max();

// The adder's view of the pool: free slots plus what the cache could give back.
class PoolBudgetView final : public KvBudgetView {
 public:
    PoolBudgetView(const kvcache::SlotAllocator& alloc, kvcache::PrefixCache& cache)
        : alloc_(alloc), cache_(cache) {}
    std::int64_t available_and_evictable() const override {
        return alloc_.available() + cache_.evictable_size();
    }
    void inc_lock_ref(kvcache::NodeId node) override { cache_.inc_lock_ref(node); }
    void dec_lock_ref(kvcache::NodeId node) override { cache_.dec_lock_ref(node); }

 private:
    const kvcache::SlotAllocator& alloc_;
    kvcache::PrefixCache& cache_;
};

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void erase_ptr(std::vector<Req*>& v, const Req* r) { std::erase(v, r); }

}  // namespace

Status SchedulerConfig::validate() const {
    if (page_size < 1) return Status::InvalidArgument(fmt::format("page_size ({}) must be >= 1", page_size));
    if (max_total_num_tokens <= 0 || max_total_num_tokens % page_size != 0) {
        return Status::InvalidArgument(fmt::format(
            "max_total_num_tokens ({}) must be > 0 and a multiple of page_size ({})",
            max_total_num_tokens, page_size));
    }
    if (max_running_requests < 1)
        return Status::InvalidArgument(fmt::format("max_running_requests ({}) must be >= 1", max_running_requests));
    if (enable_session_radix_cache && disable_radix_cache)
        return Status::InvalidArgument("--enable-session-radix-cache references sessions' KV in the radix cache, which "
                                       "--disable-radix-cache turns off: drop one of the two");
    if (prefill_decode_interval < 0)
        return Status::InvalidArgument(
            fmt::format("prefill_decode_interval ({}) must be >= 0", prefill_decode_interval));
    if (max_prefill_tokens < 1)
        return Status::InvalidArgument(fmt::format("max_prefill_tokens ({}) must be >= 1", max_prefill_tokens));
    if (chunked_prefill_size != -1 && chunked_prefill_size < page_size) {
        return Status::InvalidArgument(fmt::format(
            "chunked_prefill_size ({}) must be -1 (off) or at least page_size ({})",
            chunked_prefill_size, page_size));
    }
    if (prefill_max_requests != -1 && prefill_max_requests < 1)
        return Status::InvalidArgument(fmt::format("prefill_max_requests ({}) must be -1 or >= 1", prefill_max_requests));
    if (new_token_ratio.schedule_conservativeness < 0)
        return Status::InvalidArgument(fmt::format("schedule_conservativeness ({}) must be >= 0",
                                                   new_token_ratio.schedule_conservativeness));
    if (decode_log_interval < 1)
        return Status::InvalidArgument(fmt::format("decode_log_interval ({}) must be >= 1", decode_log_interval));
    if (context_len < 0) return Status::InvalidArgument(fmt::format("context_len ({}) must be >= 0", context_len));
    if (max_cached_tokens < -1)
        return Status::InvalidArgument(fmt::format("max_cached_tokens ({}) must be -1 (no cap) or >= 0", max_cached_tokens));
    if (max_scored_rows_per_step != -1 &&
        (max_scored_rows_per_step < page_size || max_scored_rows_per_step % page_size != 0))
        return Status::InvalidArgument(fmt::format(
            "max_scored_rows_per_step ({}) must be -1 (no bound) or a positive multiple of page_size ({})",
            max_scored_rows_per_step, page_size));
    if (max_in_flight_steps < 1)
        return Status::InvalidArgument(fmt::format("max_in_flight_steps ({}) must be >= 1", max_in_flight_steps));
    if (max_micro_batch_size < 0)
        return Status::InvalidArgument(fmt::format("max_micro_batch_size ({}) must be >= 0", max_micro_batch_size));
    if (max_queued_requests < -1)
        return Status::InvalidArgument(fmt::format("max_queued_requests ({}) must be -1 (no cap) or >= 0",
                                                   max_queued_requests));
    if ((enable_priority_preemption || retract_by_priority) && !enable_priority_scheduling)
        return Status::InvalidArgument("priority preemption and retraction need enable_priority_scheduling");
    if (enable_priority_scheduling && schedule_policy != SchedulePolicy::kFcfs && schedule_policy != SchedulePolicy::kLof)
        return Status::InvalidArgument("priority scheduling orders the fcfs and lof policies only");
    if (enable_mixed_chunk && max_in_flight_steps > 1) {
        return Status::InvalidArgument("mixed chunks need one step in flight (no pipeline parallelism), got " +
                                       std::to_string(max_in_flight_steps));
    }
    if (overlap_schedule && max_in_flight_steps > 1) {
        return Status::InvalidArgument(
            "overlap scheduling needs one step in flight of its own (pipeline parallelism turns it off)");
    }
    if (dynamic_chunking && chunked_prefill_size <= 0) {
        return Status::InvalidArgument(fmt::format(
            "dynamic chunking needs chunked prefill: chunked_prefill_size ({}) must be > 0",
            chunked_prefill_size));
    }
    return Status::Ok();
}

Scheduler::Scheduler(const SchedulerConfig& config, executor::BatchRunner& runner, Clock clock)
    : config_(config),
      runner_(runner),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      ratio_(config.new_token_ratio),
      rng_(config.random_seed) {
    const Status s = config.validate();
    TSR_CHECK(s.ok()) << s.to_string();
    max_req_len_ = config.max_total_num_tokens - 1;
    if (config.context_len > 0) max_req_len_ = std::min(config.context_len - 1, max_req_len_);
    max_req_input_len_ = max_req_len_ - 1;
    allocator_ = std::make_unique<kvcache::SlotAllocator>(config.max_total_num_tokens, config.page_size);
    // Streaming sessions keep their KV in a radix tree even under --disable-radix-cache.
    cache_ = config.disable_radix_cache && !config.enable_streaming_session
                 ? kvcache::make_chunk_cache(*allocator_)
                 : kvcache::make_radix_cache(*allocator_, config.page_size, config.radix_eviction_policy);
    last_decode_log_time_ = clock_();
    if (config.prefill_delayer) {
        delayer_.emplace(*config.prefill_delayer);
        TSR_LOG_C(INFO, "sched", "{}", delayer_->describe());
    }
}

Scheduler::~Scheduler() = default;

// ---- requests in and out -------------------------------------------------------------------

Status Scheduler::add_request(Req req) {
    if (req.rid.empty()) return Status::InvalidArgument("request id must not be empty");
    if (reqs_.count(req.rid) != 0)
        return Status::InvalidArgument(fmt::format("duplicate request id '{}'", req.rid));
    if (req.input_ids.empty())
        return Status::InvalidArgument(fmt::format("request '{}' has an empty prompt", req.rid));
    const auto n_in = static_cast<std::int64_t>(req.input_ids.size());
    if (n_in > max_req_input_len_) {
        return Status::InvalidArgument(fmt::format(
            "Input length ({} tokens) exceeds the maximum allowed length ({} tokens). Use a "
            "shorter input or enable --allow-auto-truncate.",
            n_in, max_req_input_len_));
    }
    if (req.max_new_tokens < 0)
        return Status::InvalidArgument(fmt::format("max_new_tokens ({}) must be >= 0", req.max_new_tokens));
    // scheduler.py handle_generate_request's check, refused here rather than aborted later.
    if (req.logprob_start_len > n_in)
        return Status::InvalidArgument(fmt::format("logprob_start_len={} is higher than the number of input tokens "
                                                   "{}. Please use a smaller logprob_start_len.",
                                                   req.logprob_start_len, n_in));
    if (req.logprob_start_len < -1)
        return Status::InvalidArgument(fmt::format("logprob_start_len ({}) must be -1 or >= 0", req.logprob_start_len));
    TSR_RETURN_IF_ERROR(make_room_in_queue(req.priority));
    req.prefill_only = req.max_new_tokens == 0;
    // Same clamp as SGLang: input + output must fit one request's context.
    req.max_new_tokens = std::min(req.max_new_tokens, max_req_len_ - n_in - 1);
    req.output_ids.clear();
    req.input_logprobs.clear();
    req.input_top_logprobs_ready.clear();
    req.input_token_ids_logprobs_ready.clear();
    req.input_logprobs_sent = false;
    req.reasoning_tokens = 0;
    req.reasoning_over = false;
    req.slots.clear();
    req.prefix_len = 0;
    req.last_node = 0;
    req.state = ReqState::kWaiting;
    req.finish_reason = FinishReason::kNone;
    req.in_flight_steps = 0;
    req.pending_tokens = 0;
    req.arrival = next_arrival_++;
    req.queue_entry = req.arrival;
    req.queued_at = clock_();
    req.forward_at = -1.0;
    auto owned = std::make_unique<Req>(std::move(req));
    waiting_.push_back(owned.get());
    const std::string rid = owned->rid;
    reqs_.emplace(rid, std::move(owned));
    return Status::Ok();
}

Status Scheduler::make_room_in_queue(std::int64_t priority) {
    const std::int64_t cap = config_.max_queued_requests;
    if (cap < 0 || static_cast<std::int64_t>(waiting_.size()) < cap) return Status::Ok();
    if (config_.enable_priority_scheduling && !waiting_.empty()) {
        // The worst waiting request, the latest to join among equals.
        const std::int64_t sign = PriorityOrder{config_.schedule_low_priority_values_first}.sign();
        const auto key = [sign](const Req* r) { return std::pair(sign * r->priority, r->queue_entry); };
        Req* worst = *std::max_element(waiting_.begin(), waiting_.end(),
                                       [&](const Req* a, const Req* b) { return key(a) < key(b); });
        if (sign * priority < sign * worst->priority) {
            finish(*worst, FinishReason::kAbort, "The request is aborted by a higher priority request.");
            drop_finished();
            return Status::Ok();
        }
    }
    return Status(StatusCode::kUnavailable, "The request queue is full.");
}

bool Scheduler::abort(std::string_view rid, std::string_view error) {
    auto it = reqs_.find(std::string(rid));
    if (it == reqs_.end()) return false;
    Req& req = *it->second;
    if (req.state != ReqState::kWaiting) {
        if (req.in_flight_steps == 0) {
            // Its computed KV is valid: cache it like a finished request.
            cache_finished_req(req);
        } else {
            // A step still writing its KV may yet fail, so nothing is shared. Freeing the
            // slots now is safe: whoever gets them next writes them in a later step, and
            // every stage runs steps in launch order. The step's results are ignored.
            release_kv_no_insert(req);
        }
        batch_is_full_ = false;
    }
    if (chunked_req_ == &req) chunked_req_ = nullptr;
    finish(req, FinishReason::kAbort, std::string(error));
    drop_finished();
    return true;
}

int Scheduler::abort_prefixed(std::string_view prefix) {
    std::vector<std::string> matched;
    for (const auto& [rid, req] : reqs_)
        if (rid.starts_with(prefix)) matched.push_back(rid);
    for (const std::string& rid : matched) abort(rid, "");
    return static_cast<int>(matched.size());
}

void Scheduler::emit(Req& req, const executor::SampledToken* token, const executor::SampledToken* unsampled) {
    if (!req.sink) return;
    ReqEvent ev;
    ev.rid = req.rid;
    if (token != nullptr) ev.token = *token;
    if (unsampled != nullptr) ev.unsampled = *unsampled;
    ev.finished = req.finished();
    ev.finish_reason = req.finish_reason;
    ev.error = req.finish_error;
    ev.prompt_tokens = static_cast<std::int64_t>(req.input_ids.size());
    ev.cached_tokens = req.cached_tokens;
    ev.completion_tokens = static_cast<std::int64_t>(req.output_ids.size());
    ev.reasoning_tokens = req.reasoning_tokens;
    ev.routed_experts = std::move(req.routed_experts_ready);
    req.routed_experts_ready.clear();
    // The prompt's log-probabilities go with its first token, or the end of a request that
    // asked for none (max_new_tokens 0).
    const bool first_answer = token != nullptr || (req.finished() && req.finish_reason != FinishReason::kAbort);
    const bool send_input_logprobs = req.logprob_start_len >= 0 && !req.input_logprobs_sent && first_answer;
    if (send_input_logprobs) {
        ev.has_input_logprobs = true;
        ev.input_logprob_tokens = std::span(req.input_ids).subspan(static_cast<std::size_t>(req.logprob_start_len));
        ev.input_logprobs = req.input_logprobs;
        ev.input_top_logprobs = req.input_top_logprobs_ready;
        ev.input_token_ids_logprobs = req.input_token_ids_logprobs_ready;
    }
    req.sink(ev);
    if (send_input_logprobs) {
        req.input_logprobs_sent = true;
        req.input_logprobs = {};
        req.input_top_logprobs_ready = {};
        req.input_token_ids_logprobs_ready = {};
    }
}

void Scheduler::finish(Req& req, FinishReason reason, std::string error) {
    req.finish_reason = reason;
    req.finish_error = std::move(error);
    req.state = ReqState::kFinished;
    emit(req, nullptr);
}

void Scheduler::drop_finished() {
    const auto done = [](const Req* r) { return r->state == ReqState::kFinished; };
    std::erase_if(waiting_, done);
    std::erase_if(running_, done);
    std::erase_if(last_prefill_, done);
    std::erase_if(prefilling_, done);
    if (chunked_req_ != nullptr && done(chunked_req_)) chunked_req_ = nullptr;
    std::erase_if(reqs_, [this](const auto& kv) {
        if (kv.second->state != ReqState::kFinished) return false;
        if (config_.log_request_time_stats) log_time_stats(*kv.second);
        return true;
    });
}

bool Scheduler::idle() const {
    return waiting_.empty() && running_.empty() && last_prefill_.empty() && prefilling_.empty() &&
           chunked_req_ == nullptr && in_flight_.empty();
}

StatusOr<std::vector<executor::SampledToken>> Scheduler::run_control_step(const executor::ForwardBatch& batch) {
    // In launch order on every rank: collect what is in flight first.
    while (!in_flight_.empty()) collect_oldest();
    if (Status s = runner_.before_round(); !s.ok()) return s;
    return runner_.run(batch);
}

Status Scheduler::run_expert_record(eplb::ExpertRecordCommand command) {
    executor::ForwardBatch batch;
    batch.expert_record = command;
    return run_control_step(batch).status();
}

Status Scheduler::run_weight_update(const models::WeightsSource& source) {
    executor::ForwardBatch batch;
    batch.load_weights = source;
    batch.load_weights->phase = models::WeightsPhase::kLoad;
    StatusOr<std::vector<executor::SampledToken>> loaded = run_control_step(batch);
    // The leader's own failure comes as the step's error; a later pipeline stage's as a 0.
    Status verdict = loaded.status();
    if (verdict.ok() && !loaded->empty() && loaded->back().token == 0)
        verdict = Status::InvalidArgument(
            "a later pipeline stage could not load its share of the weights (its first rank's log says why)");
    if (!runner_.fatal_error().ok()) return verdict;  // the ranks cannot run steps together any more
    batch.load_weights->phase = verdict.ok() ? models::WeightsPhase::kCommit : models::WeightsPhase::kDiscard;
    const Status applied = run_control_step(batch).status();
    return verdict.ok() ? applied : verdict;
}

Status Scheduler::run_memory_release(const models::MemoryRelease& release, bool drop_cache) {
    while (!in_flight_.empty()) collect_oldest();
    if (!idle())
        return Status::InvalidArgument(fmt::format(
            "release_memory_occupation should be called only when server is idle: {} request(s) waiting, {} running; "
            "let them finish, or end them with /abort_request or /pause_generation (mode abort)",
            waiting_.size(), running_.size() + last_prefill_.size() + prefilling_.size()));
    if ((drop_cache || release.kv_cache) && !drop_prefix_cache())
        return Status::Internal("the prefix cache could not be dropped");
    if (!release.any()) return Status::Ok();
    executor::ForwardBatch batch;
    batch.release_memory = release;
    TSR_RETURN_IF_ERROR(run_control_step(batch).status());
    if (release.kv_cache) allocator_->forget_touched();
    return Status::Ok();
}

bool Scheduler::nothing_running() const {
    return running_.empty() && last_prefill_.empty() && prefilling_.empty() && chunked_req_ == nullptr &&
           in_flight_.empty();
}

bool Scheduler::drop_cache_after_weight_update() {
    if (!nothing_running()) {
        TSR_LOG_C(WARN, "sched",
                  "Cache not flushed after the weight update: {} request(s) still run on it (paused in place); "
                  "pass flush_cache false to keep it without this warning",
                  running_.size() + last_prefill_.size() + prefilling_.size());
        return false;
    }
    return drop_prefix_cache();
}

bool Scheduler::flush_cache() {
    if (!idle()) {
        TSR_LOG_C(WARN, "sched",
                  "Cache not flushed because there are pending requests. #queue-req: {}, "
                  "#running-req: {}",
                  waiting_.size(), running_.size() + last_prefill_.size());
        return false;
    }
    return drop_prefix_cache();
}

bool Scheduler::drop_prefix_cache() {
    if (!session_holds_.empty()) {
        // As SGLang's StreamingSession.reset: the sessions stay open, their next turns prefill anew.
        TSR_LOG_C(INFO, "sched", "Flushing the KV that {} streaming session(s) held", session_holds_.size());
        for (const auto& [id, hold] : session_holds_) cache_->dec_lock_ref(hold.node);
        session_holds_.clear();
    }
    session_refs_.clear();  // the tree they point into goes
    const bool ok = cache_->reset();
    if (ok) TSR_LOG_C(INFO, "sched", "Cache flushed successfully!");
    return ok;
}

void Scheduler::release_session(const std::string& id) {
    if (const auto it = session_holds_.find(id); it != session_holds_.end()) {
        cache_->dec_lock_ref(it->second.node);
        session_holds_.erase(it);
    }
    if (const auto it = session_refs_.find(id); it != session_refs_.end()) {
        for (const kvcache::NodeId node : it->second) cache_->dec_session_ref(node);
        session_refs_.erase(it);
    }
    for (auto& [rid, req] : reqs_) {
        if (req->streaming_session == id) req->streaming_session.clear();
        if (req->radix_session == id) req->radix_session.clear();
    }
    // Under --disable-radix-cache the tree holds sessions' KV only: what no session holds goes.
    if (config_.disable_radix_cache) cache_->evict(cache_->evictable_size());
}

void Scheduler::hold_for_session(const std::string& id, kvcache::NodeId node, std::int64_t tokens) {
    cache_->inc_lock_ref(node);
    auto [it, fresh] = session_holds_.try_emplace(id);
    if (!fresh) cache_->dec_lock_ref(it->second.node);
    it->second = {.node = node, .tokens = tokens, .order = next_hold_order_++};
}

bool Scheduler::release_oldest_session_hold() {
    if (session_holds_.empty()) return false;
    const auto oldest = std::min_element(session_holds_.begin(), session_holds_.end(),
                                         [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
    TSR_LOG_C(WARN, "sched",
              "KV pool full: the {} tokens streaming session '{}' held are released (its next turn computes them "
              "again); more memory (--mem-fraction-static) or a session timeout keeps them",
              oldest->second.tokens, oldest->first);
    cache_->dec_lock_ref(oldest->second.node);
    session_holds_.erase(oldest);
    return true;
}

// ---- KV bookkeeping ------------------------------------------------------------------------

kvcache::MatchResult Scheduler::match(const Req& req) {
    // At least the last token is recomputed: its logits give the next token. A request for
    // prompt log-probabilities recomputes its positions from logprob_start_len on
    // (schedule_batch.py Req._compute_max_prefix_len).
    std::int64_t end = req.fill_len() - 1;
    if (const auto [first, last] = req.input_logprob_rows(); first < last) end = std::min(end, first);
    return cache_->match_prefix(req.fill_ids(0, end));
}

void Scheduler::evict_if_needed(std::int64_t n_tokens) {
    // As SGLang: when short, evict n_tokens (not just the shortfall).
    if (allocator_->available() < n_tokens) cache_->evict(n_tokens);
}

void Scheduler::trim_prefix_cache() {
    if (config_.max_cached_tokens < 0) return;
    const std::int64_t over = cache_->evictable_size() - config_.max_cached_tokens;
    if (over > 0) cache_->evict(over);
}

bool Scheduler::alloc_slots(Req& req, std::int64_t n) {
    const std::int32_t last = req.slots.empty() ? -1 : req.slots.back();
    auto fresh = allocator_->alloc(n, last);
    if (!fresh) return false;
    req.slots.insert(req.slots.end(), fresh->begin(), fresh->end());
    return true;
}

void Scheduler::drop_uncomputed_tail(Req& req) {
    // Overlap: the decode step after the one that finished the request is in flight and
    // writes the slot of a token past its end. Freeing it now is safe: that step runs before
    // any later step that might reuse the slot, and its result is dropped.
    const std::int64_t computed = req.fill_len() - 1;
    if (req.kv_len() <= computed) return;
    allocator_->free(std::vector<std::int32_t>(req.slots.begin() + computed, req.slots.end()));
    req.slots.resize(static_cast<std::size_t>(computed));
}

void Scheduler::cache_finished_req(Req& req) {
    // --strip-thinking-cache (SGLang's Req._cache_commit_len): a request that reasoned leaves
    // only its prompt in the tree; the KV of its thinking and answer is freed.
    const std::int64_t kv = config_.strip_thinking_cache && req.reasoning_tokens > 0
                                ? std::min(req.kv_len(), static_cast<std::int64_t>(req.input_ids.size()))
                                : req.kv_len();
    const std::int64_t aligned = kv / config_.page_size * config_.page_size;
    if (!shares_prefixes(req)) {
        release_kv_no_insert(req);
        return;
    }
    // The tree takes the whole pages (returning duplicates); the partial tail page is ours.
    const kvcache::NodeId end = cache_->insert(req.fill_ids(0, aligned),
                                               std::span(req.slots).first(static_cast<std::size_t>(aligned)),
                                               {.priority = req.priority});
    allocator_->free(std::vector<std::int32_t>(req.slots.begin() + aligned, req.slots.end()));
    // A turn that ended well (not aborted, nor failed) is what the session's next turn continues.
    const bool ended_well = req.finish_reason == FinishReason::kStop || req.finish_reason == FinishReason::kLength;
    if (!req.streaming_session.empty() && ended_well) hold_for_session(req.streaming_session, end, aligned);
    if (config_.enable_session_radix_cache && !req.radix_session.empty() && ended_well) {
        cache_->inc_session_ref(end);
        session_refs_[req.radix_session].push_back(end);
    }
    cache_->dec_lock_ref(req.last_node);
    req.slots.clear();
    req.prefix_len = 0;
    req.last_node = 0;
}

void Scheduler::cache_unfinished_req(Req& req, bool chunked) {
    // Without a radix tree there is nothing to share; the request keeps its slots.
    if (config_.disable_radix_cache) return;
    // Only positions whose K/V is computed: with overlap a decode step may already be in
    // flight past the prompt.
    const std::int64_t computed = std::min(req.kv_len(), req.fill_len() - 1);
    const std::int64_t aligned = computed / config_.page_size * config_.page_size;
    const std::vector<std::int32_t> tokens = req.fill_ids(0, aligned);
    cache_->insert(tokens, std::span(req.slots).first(static_cast<std::size_t>(aligned)),
                   {.priority = req.priority, .chunked = chunked});
    // Duplicates were freed by insert: switch to the tree's slots and lock the new end.
    kvcache::MatchResult m = cache_->match_prefix(tokens);
    TSR_CHECK_EQ(static_cast<std::int64_t>(m.slots.size()), aligned);
    std::copy(m.slots.begin(), m.slots.end(), req.slots.begin());
    cache_->inc_lock_ref(m.last_node);
    cache_->dec_lock_ref(req.last_node);
    req.last_node = m.last_node;
    req.prefix_len = aligned;
}

void Scheduler::release_kv_no_insert(Req& req) {
    allocator_->free(std::vector<std::int32_t>(req.slots.begin() + req.prefix_len, req.slots.end()));
    cache_->dec_lock_ref(req.last_node);
    req.slots.clear();
    req.prefix_len = 0;
    req.last_node = 0;
}

std::int64_t Scheduler::num_used_tokens() const {
    return config_.max_total_num_tokens - (allocator_->available() + cache_->evictable_size());
}

Status Scheduler::check_invariants() const {
    const std::int64_t P = config_.page_size;
    std::unordered_set<std::int32_t> owned;
    std::int64_t own_pages = 0;
    for (const auto& [rid, r] : reqs_) {
        if (r->state == ReqState::kWaiting && !r->slots.empty())
            return Status::Internal(fmt::format("waiting request '{}' holds {} slots", rid, r->slots.size()));
        if (r->prefix_len % P != 0 || r->prefix_len > r->kv_len())
            return Status::Internal(fmt::format("request '{}': prefix_len {} vs kv_len {}", rid, r->prefix_len, r->kv_len()));
        for (std::int64_t pos = r->prefix_len; pos < r->kv_len(); ++pos) {
            const std::int32_t s = r->slots[pos];
            if (s < P || s >= config_.max_total_num_tokens + P || s % P != pos % P)
                return Status::Internal(fmt::format("request '{}': bad slot {} at position {}", rid, s, pos));
            if (!owned.insert(s).second)
                return Status::Internal(fmt::format("slot {} is held by two requests (one is '{}')", s, rid));
        }
        own_pages += (r->kv_len() + P - 1) / P - r->prefix_len / P;
    }
    // Each live request's in-flight steps, and the token it awaits, match the step records.
    std::unordered_map<const Req*, std::pair<int, int>> launched;  // (steps, token steps)
    for (const InFlightStep& st : in_flight_) {
        for (const InFlightSeq& seq : st.seqs) {
            const auto it = reqs_.find(seq.rid);
            if (it == reqs_.end() || it->second->arrival != seq.arrival) continue;
            auto& [steps, token_steps] = launched[it->second.get()];
            if (token_steps > (config_.overlap_schedule ? 1 : 0))
                return Status::Internal(fmt::format("request '{}' launched again while awaiting its token", seq.rid));
            ++steps;
            token_steps += seq.need_token ? 1 : 0;
        }
    }
    for (const auto& [rid, r] : reqs_) {
        const auto it = launched.find(r.get());
        const auto [steps, token_steps] = it == launched.end() ? std::pair{0, 0} : it->second;
        if (steps != r->in_flight_steps || token_steps != r->pending_tokens) {
            return Status::Internal(fmt::format(
                "request '{}': {} steps in flight ({} sampling) but in_flight_steps {}, pending_tokens {}",
                rid, steps, token_steps, r->in_flight_steps, r->pending_tokens));
        }
    }
    const std::int64_t sum = allocator_->available() + cache_->total_size() + own_pages * P;
    if (sum != allocator_->capacity()) {
        return Status::Internal(fmt::format(
            "KV accounting broken: available {} + cached {} + requests' own {} != capacity {}",
            allocator_->available(), cache_->total_size(), own_pages * P, allocator_->capacity()));
    }
    return Status::Ok();
}

// ---- the loop ----------------------------------------------------------------------------

StepKind Scheduler::step() {
    merge_last_prefill();
    trim_prefix_cache();  // an abort between steps may have cached its request
    while (!paused_ && static_cast<int>(in_flight_.size()) < in_flight_limit()) {
        if (!launch_next_batch()) break;
    }
    if (in_flight_.empty()) {
        ratio_.on_idle();
        return StepKind::kIdle;
    }
    const StepKind kind = collect_oldest();
    trim_prefix_cache();
    return kind;
}

void Scheduler::pause(bool retract) {
    paused_ = true;
    while (!in_flight_.empty()) collect_oldest();
    merge_last_prefill();
    if (!retract) return;
    std::vector<Req*> retracted = std::move(running_);
    running_.clear();
    if (chunked_req_ != nullptr) retracted.push_back(std::exchange(chunked_req_, nullptr));
    for (Req* r : retracted) {
        release_kv_no_insert(*r);
        ++r->n_retracted;
        requeue(*r);
    }
    batch_is_full_ = false;
    total_retracted_ += static_cast<std::int64_t>(retracted.size());
    trim_prefix_cache();
    TSR_LOG_C(INFO, "sched", "Generation paused: {} running request(s) retracted to the queue", retracted.size());
}

void Scheduler::merge_last_prefill() {
    running_.insert(running_.end(), last_prefill_.begin(), last_prefill_.end());
    last_prefill_.clear();
}

bool Scheduler::launch_next_batch() {
    // --prefill-decode-interval (SGLang's _should_defer_prefill, armed by every extend step:
    // here at its launch, and at collect_oldest for a round another DP group prefilled in):
    // while decode steps are owed, the running requests decode and the queue waits.
    const bool defer_prefill = decode_steps_owed_ > 0;
    if (!defer_prefill) {
        std::vector<PrefillItem> items = get_new_batch_prefill();
        if (!items.empty()) {
            launch_prefill(items, mixed_decode_batch());
            decode_steps_owed_ = config_.prefill_decode_interval;
            return true;
        }
    }
    // A preemption waits for the steps in flight that hold its victims; launching another
    // decode step would keep them in flight.
    if (preemption_waits_ && !in_flight_.empty()) return false;
    const std::vector<Req*> decode = update_running_batch();
    if (decode.empty()) {
        // Nothing decodes now. A prompt's last chunk in flight brings its request to decode:
        // wait for it. Otherwise the owed steps lapse (SGLang's loop spends them on idle
        // rounds) and the queue is served, so a long prompt's chunks (pipelined under PP) do
        // not wait on a decode that nobody needs.
        if (!defer_prefill || !prefilling_.empty()) return false;
        decode_steps_owed_ = 0;
        return launch_next_batch();
    }
    if (defer_prefill) --decode_steps_owed_;
    launch_decode(decode);
    return true;
}

std::int64_t Scheduler::prefill_chunk_budget() const {
    const std::int64_t chunk = configured_chunk_budget();
    const std::int64_t cap = config_.max_scored_rows_per_step;
    if (cap <= 0) return chunk;
    const auto scores_prompt = [](const Req* r) {
        const auto [first, last] = r->input_logprob_rows();
        return first < last;
    };
    if ((chunked_req_ == nullptr || !scores_prompt(chunked_req_)) &&
        std::none_of(waiting_.begin(), waiting_.end(), scores_prompt))
        return chunk;
    return chunk > 0 ? std::min(chunk, cap) : cap;
}

std::int64_t Scheduler::configured_chunk_budget() const {
    if (!config_.dynamic_chunking) return config_.chunked_prefill_size;
    // Sized for the continued chunked request's prefix (reference §7); a round of fresh
    // requests uses the size of a first chunk.
    const std::int64_t history = chunked_req_ != nullptr ? chunked_req_->kv_len() : 0;
    return config_.dynamic_chunking->next_chunk(history).value_or(config_.chunked_prefill_size);
}

std::vector<Scheduler::PrefillItem> Scheduler::get_new_batch_prefill() {
    if (!delayer_) return admit_prefill(nullptr);
    PrefillGate gate{.token_usage = static_cast<double>(num_used_tokens()) /
                                    static_cast<double>(config_.max_total_num_tokens),
                     .waiting = static_cast<std::int64_t>(waiting_.size())};
    std::vector<PrefillItem> items = admit_prefill(&gate);
    if (!gate.decision) gate.decision = agree_on_prefill({}, &gate.fresh);
    if (gate.fresh) delayer_->record(*gate.decision, !items.empty());
    return items;
}

PrefillDecision Scheduler::agree_on_prefill(const executor::BatchRunner::PrefillIntent& mine, bool* fresh) {
    StatusOr<executor::BatchRunner::PrefillAgreement> agreed = runner_.agree_prefill(mine);
    if (!agreed.ok()) {
        // The groups are broken (the runner's fatal error ends the server); admit as without it.
        TSR_LOG_C(WARN, "sched", "prefill delayer: {}", agreed.status().message());
        *fresh = false;
        return PrefillDecision{};
    }
    *fresh = agreed->fresh;
    if (agreed->fresh) last_delay_decision_ = delayer_->decide(agreed->groups, config_.max_running_requests, clock_());
    return last_delay_decision_;
}

std::vector<Scheduler::PrefillItem> Scheduler::admit_prefill(PrefillGate* gate) {
    mixed_decode_.clear();
    preemption_waits_ = false;
    // A full batch may make room by preemption: every round looks (SGLang resets batch_is_full).
    const bool preemption = config_.enable_priority_preemption;
    if (preemption) batch_is_full_ = false;
    if ((batch_is_full_ || waiting_.empty() || admission_held_) && chunked_req_ == nullptr) return {};
    // Requests whose final chunk is in flight join the running batch when it is collected;
    // admission counts them already, as their KV reservation is already real.
    const auto running_bs = static_cast<std::int64_t>(running_.size() + prefilling_.size());
    const std::int64_t allocatable = config_.max_running_requests - running_bs;
    if (allocatable <= 0 && chunked_req_ == nullptr && !preemption) {
        batch_is_full_ = true;
        return {};
    }
    // SGLang's min_free_slots_delayer.py: with requests running, new ones wait for enough free
    // slots to be admitted together (each admission costs a prefill pass of its own).
    if (config_.min_free_slots > 0 && chunked_req_ == nullptr && running_bs > 0 && allocatable < config_.min_free_slots)
        return {};

    // Order the queue (in place, as SGLang: the order persists across rounds).
    const bool radix = !config_.disable_radix_cache;
    const SchedulePolicy policy = effective_policy(config_.schedule_policy, waiting_.size(), radix);
    if (policy != SchedulePolicy::kFcfs || config_.enable_priority_scheduling) {
        std::vector<WaitingReqView> views;
        views.reserve(waiting_.size());
        for (const Req* r : waiting_) {
            const std::int64_t prefix =
                policy == SchedulePolicy::kLpm ? static_cast<std::int64_t>(match(*r).slots.size()) : 0;
            views.push_back({.queue_entry = r->queue_entry, .prefix_len = prefix,
                             .max_new_tokens = r->max_new_tokens, .priority = r->priority});
        }
        const auto order = order_waiting_queue(
            policy, views,
            {.radix_cache_enabled = radix,
             .low_priority_values_first = config_.schedule_low_priority_values_first,
             .priority_scheduling = config_.enable_priority_scheduling},
            rng_);
        std::vector<Req*> sorted;
        sorted.reserve(waiting_.size());
        for (const std::size_t i : order) sorted.push_back(waiting_[i]);
        waiting_ = std::move(sorted);
    }

    std::vector<RunningReqView> running_views;
    running_views.reserve(static_cast<std::size_t>(running_bs));
    for (const std::vector<Req*>* group : {&running_, &prefilling_})
        for (const Req* r : *group)
            running_views.push_back({.max_new_tokens = r->max_new_tokens,
                                     .output_len = static_cast<std::int64_t>(r->output_ids.size())});
    const std::int64_t chunk_size = prefill_chunk_budget();
    // The round carries the decode tokens of every request ready for one, while they leave
    // room for a chunk (SGLang would go on with a budget of nothing).
    if (config_.enable_mixed_chunk && chunk_size > 0) {
        mixed_decode_ = ready_to_decode();
        if (static_cast<std::int64_t>(mixed_decode_.size()) + config_.page_size > chunk_size) mixed_decode_.clear();
    }
    PoolBudgetView view(*allocator_, *cache_);
    PrefillAdder adder({.page_size = config_.page_size,
                        .max_prefill_tokens = config_.max_prefill_tokens,
                        .chunked_prefill_size = chunk_size,
                        .new_token_ratio = ratio_.value(),
                        .max_new_reqs = std::max<std::int64_t>(allocatable, 0),
                        .prefill_max_requests = config_.prefill_max_requests,
                        .clip_max_new_tokens = config_.clip_max_new_tokens,
                        .mixed_decode_tokens = static_cast<std::int64_t>(mixed_decode_.size())},
                       running_views, view);

    Req* const old_chunked = chunked_req_;
    if (old_chunked != nullptr) {
        adder.add_chunked_req({.id = kChunkedId,
                               .prefix_len = old_chunked->kv_len(),
                               .extend_input_len = old_chunked->fill_len() - old_chunked->kv_len(),
                               .max_new_tokens = old_chunked->max_new_tokens,
                               .last_node = old_chunked->last_node});
    }
    std::unordered_map<std::size_t, kvcache::MatchResult> admitted_matches;
    std::vector<Req*> preempted;
    AddReqResult last_result = AddReqResult::kContinue;
    for (std::size_t i = 0; i < (admission_held_ ? 0 : waiting_.size()); ++i) {
        const Req& r = *waiting_[i];
        kvcache::MatchResult m = shares_prefixes(r) ? match(r) : kvcache::MatchResult{};
        const auto prefix = static_cast<std::int64_t>(m.slots.size());
        const PrefillCandidate candidate{.id = i,
                                         .prefix_len = prefix,
                                         .extend_input_len = r.fill_len() - prefix,
                                         .max_new_tokens = r.max_new_tokens,
                                         .last_node = m.last_node};
        if (gate != nullptr && !gate->decision) {
            gate->decision = agree_on_prefill(
                delayer_->intent(true, gate->token_usage, running_bs, max_prefill_bs_, gate->waiting), &gate->fresh);
        }
        if (gate != nullptr && !gate->decision->allow) {
            last_result = AddReqResult::kOther;
            break;
        }
        const std::size_t before = adder.can_run().size();
        AddReqResult res = adder.add_one_req(candidate);
        // Only a full running batch makes room by preemption, not a full KV pool (SGLang's
        // scheduler.py _get_new_batch_prefill_raw).
        if (res == AddReqResult::kReqLimit && preemption && preempt_for(r, candidate.extend_input_len, adder, preempted))
            res = adder.add_one_req(candidate);
        if (adder.can_run().size() > before) admitted_matches.emplace(i, std::move(m));
        last_result = res;
        if (res != AddReqResult::kContinue) {
            if (res == AddReqResult::kNoToken || res == AddReqResult::kReqLimit) batch_is_full_ = true;
            break;
        }
    }
    for (Req* r : preempted) requeue(*r);
    if (adder.can_run().empty()) {
        // Nothing runs or is in flight that could free KV: held sessions give way.
        if (last_result == AddReqResult::kNoToken && running_bs == 0 && in_flight_.empty())
            release_oldest_session_hold();
        return {};
    }
    max_prefill_bs_ = std::max(max_prefill_bs_, static_cast<std::int64_t>(adder.can_run().size()));

    // Admitted requests take their matched prefix (the adder holds its lock for them).
    std::vector<PrefillItem> items;
    std::unordered_set<const Req*> admitted;
    for (const AdmittedPrefill& a : adder.can_run()) {
        Req* req = a.id == kChunkedId ? old_chunked : waiting_[a.id];
        if (a.id != kChunkedId) {
            kvcache::MatchResult& m = admitted_matches.at(a.id);
            req->slots = std::move(m.slots);
            req->prefix_len = req->kv_len();
            req->last_node = m.last_node;
            req->state = ReqState::kRunning;
            if (!req->admitted_once) {
                req->admitted_once = true;
                req->forward_at = clock_();
                req->cached_tokens = req->prefix_len;
                prompt_tokens_total_ += static_cast<std::int64_t>(req->input_ids.size());
                cached_tokens_total_ += req->prefix_len;
            }
            admitted.insert(req);
        }
        items.push_back({.req = req, .extend_len = a.extend_len, .truncated = a.truncated});
    }
    std::erase_if(waiting_, [&](const Req* r) { return admitted.count(r) != 0; });
    chunked_req_ = nullptr;
    for (const PrefillItem& it : items)
        if (it.truncated) chunked_req_ = it.req;

    log_prefill(adder, static_cast<std::int64_t>(items.size()), running_bs);
    if (!alloc_prefill_slots(items, old_chunked)) return {};
    last_prefill_chunk_size_ = chunk_size;
    return items;
}

bool Scheduler::preempt_for(const Req& incoming, std::int64_t extend_len, PrefillAdder& adder,
                            std::vector<Req*>& preempted) {
    const std::int64_t clip = config_.clip_max_new_tokens;
    const auto remaining = [clip](const Req& r) {
        return std::min(r.max_new_tokens - static_cast<std::int64_t>(r.output_ids.size()), clip);
    };
    std::vector<PreemptionCandidate> candidates;
    candidates.reserve(running_.size());
    for (const Req* r : running_)
        candidates.push_back({.priority = r->priority, .queue_entry = r->queue_entry, .remaining_tokens = remaining(*r)});
    const double needed = static_cast<double>(extend_len + std::min(incoming.max_new_tokens, clip)) -
                          adder.rem_total_tokens();
    const PriorityOrder order{config_.schedule_low_priority_values_first};
    const std::vector<std::size_t> chosen = choose_preemption({.priority = incoming.priority, .tokens_needed = needed},
                                                              candidates, order, config_.priority_preemption_threshold,
                                                              ratio_.value());
    if (chosen.empty()) return false;
    std::vector<Req*> victims;
    for (const std::size_t i : chosen) victims.push_back(running_[i]);
    // A victim's KV may be written or read by a step in flight: wait for it to be collected.
    if (std::any_of(victims.begin(), victims.end(), [](const Req* r) { return r->in_flight_steps > 0; })) {
        preemption_waits_ = true;
        return false;
    }
    for (Req* victim : victims) {
        adder.release_running(static_cast<double>(remaining(*victim)) * ratio_.value());
        erase_ptr(running_, victim);
        erase_ptr(mixed_decode_, victim);
        release_kv_no_insert(*victim);
        ++victim->n_retracted;
        preempted.push_back(victim);
    }
    total_preempted_ += static_cast<std::int64_t>(victims.size());
    std::string names;
    for (const Req* r : victims) names += fmt::format("{}'{}' (priority {})", names.empty() ? "" : ", ", r->rid, r->priority);
    TSR_LOG_C(INFO, "sched", "Preempted {} running request(s) for request '{}' (priority {}): {}", victims.size(),
              incoming.rid, incoming.priority, names);
    return true;
}

void Scheduler::requeue(Req& req) {
    req.state = ReqState::kWaiting;
    req.queue_entry = next_arrival_++;
    waiting_.push_back(&req);
}

bool Scheduler::alloc_prefill_slots(std::vector<PrefillItem>& items, Req* old_chunked) {
    const std::int64_t P = config_.page_size;
    std::int64_t needed = 0;
    for (const PrefillItem& it : items) {
        const std::int64_t kv = it.req->kv_len();
        needed += ((kv + it.extend_len + P - 1) / P - (kv + P - 1) / P) * P;
    }
    evict_if_needed(needed);
    std::vector<std::int64_t> kv_before;
    for (const PrefillItem& it : items) kv_before.push_back(it.req->kv_len());
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (alloc_slots(*items[i].req, items[i].extend_len)) continue;
        // Admission said it fits; if it still does not, undo this round and retry later
        // rather than fail requests.
        TSR_LOG_C(ERROR, "sched",
                  "Prefill out of memory: {} slots needed, {} available; the batch is put back",
                  needed, allocator_->available());
        std::vector<Req*> back;
        for (std::size_t j = 0; j < items.size(); ++j) {
            Req& r = *items[j].req;
            if (j < i) {
                allocator_->free(std::vector<std::int32_t>(r.slots.begin() + kv_before[j], r.slots.end()));
                r.slots.resize(static_cast<std::size_t>(kv_before[j]));
            }
            if (&r == old_chunked) continue;
            cache_->dec_lock_ref(r.last_node);
            r.slots.clear();
            r.prefix_len = 0;
            r.last_node = 0;
            r.state = ReqState::kWaiting;
            back.push_back(&r);
        }
        waiting_.insert(waiting_.begin(), back.begin(), back.end());
        chunked_req_ = old_chunked;
        batch_is_full_ = true;
        return false;
    }
    return true;
}

void Scheduler::launch_prefill(const std::vector<PrefillItem>& items, const std::vector<Req*>& decode) {
    executor::ForwardBatch batch;
    InFlightStep step{.kind = StepKind::kPrefill};
    batch.seqs.reserve(items.size() + decode.size());
    step.seqs.reserve(items.size() + decode.size());
    for (const PrefillItem& it : items) {
        Req& r = *it.req;
        const std::int64_t start = r.kv_len() - it.extend_len;
        batch.seqs.push_back({.rid = r.rid,
                              .tokens = r.fill_ids(start, r.kv_len()),
                              .start_pos = start,
                              .slots = r.slots,
                              .need_token = !it.truncated,
                              .sampling = r.sampling,
                              .output_ids = r.output_ids});
        // Rows of the prompt's log-probabilities: each predicts the prompt token after it.
        if (const auto [first, last] = r.input_logprob_rows(); std::max(first, start) < std::min(last, r.kv_len())) {
            executor::ForwardSequence& seq = batch.seqs.back();
            const std::int64_t begin = std::max(first, start), end = std::min(last, r.kv_len());
            seq.input_logprob_row = begin - start;
            seq.input_logprob_targets = r.fill_ids(begin + 1, end + 1);
            seq.input_top_logprobs = r.input_top_logprobs;
        }
        if (!it.truncated || !batch.seqs.back().input_logprob_targets.empty())
            batch.seqs.back().logprob_token_ids = r.logprob_token_ids;
        step.seqs.push_back({.rid = r.rid, .arrival = r.arrival, .need_token = !it.truncated,
                             .truncated = it.truncated, .start_pos = start, .n_tokens = it.extend_len});
        ++r.in_flight_steps;
        if (!it.truncated) {
            constrain(r, batch.seqs.back());
            ++r.pending_tokens;
            prefilling_.push_back(&r);
        }
    }
    for (Req* r : decode) add_decode_seq(*r, batch, step);
    launch(batch, std::move(step));
}

std::vector<Req*> Scheduler::mixed_decode_batch() {
    std::vector<Req*> batch = std::exchange(mixed_decode_, {});
    // If the pool has their next slots; otherwise they decode alone next round, where
    // update_running_batch retracts as it must.
    if (batch.empty() || !check_decode_mem(batch)) return {};
    return batch;
}

bool Scheduler::check_decode_mem(const std::vector<Req*>& reqs) {
    // Each request whose last page is full needs a new page for its next token.
    std::int64_t new_pages = 0;
    for (const Req* r : reqs)
        if (r->kv_len() % config_.page_size == 0) ++new_pages;
    const std::int64_t needed = new_pages * config_.page_size;
    evict_if_needed(needed);
    return allocator_->available() >= needed;
}

std::vector<Req*> Scheduler::ready_to_decode() const {
    // Overlap: the requests whose last prompt chunk is in flight decode in the next step too,
    // fed the token that chunk samples (SGLang's overlap loop merges the last prefill batch
    // into the running batch before its result is processed). Without overlap scheduling
    // they await their token, and decode_micro_batch would skip them anyway.
    if (!config_.overlap_schedule || prefilling_.empty()) return decode_micro_batch(running_);
    std::vector<Req*> candidates = running_;
    candidates.insert(candidates.end(), prefilling_.begin(), prefilling_.end());
    return decode_micro_batch(candidates);
}

std::vector<Req*> Scheduler::update_running_batch() {
    if (running_.empty() && (!config_.overlap_schedule || prefilling_.empty())) {
        batch_is_full_ = false;
        return {};
    }
    std::vector<Req*> batch = ready_to_decode();
    if (batch.empty()) return {};
    const std::size_t initial = running_.size();
    bool fits = check_decode_mem(batch);
    // Steps in flight will finish requests and free KV; else held sessions give way before
    // any running request is retracted.
    while (!fits && in_flight_.empty() && release_oldest_session_hold()) fits = check_decode_mem(batch);
    if (!fits) {
        if (!in_flight_.empty()) return {};
        retract_decode(batch);
    } else {
        ratio_.on_decode_step();
    }
    if (running_.size() < initial) batch_is_full_ = false;
    return batch;
}

std::vector<Req*> Scheduler::decode_micro_batch(const std::vector<Req*>& reqs) const {
    // Running requests whose last token is known, in order, up to the cap. Under PP the
    // running requests are also spread over the in-flight slots (SGLang keeps one running
    // batch per micro-batch slot), so that every stage has a micro-batch to decode rather than
    // one stage holding them all while the others wait.
    std::int64_t cap = config_.max_micro_batch_size;
    if (config_.max_in_flight_steps > 1) {
        const std::int64_t slots = config_.max_in_flight_steps;
        const std::int64_t even = (static_cast<std::int64_t>(reqs.size()) + slots - 1) / slots;
        cap = cap > 0 ? std::min(cap, even) : even;
    }
    std::vector<Req*> batch;
    for (Req* r : reqs) {
        // Overlap: the one step in flight samples its token, which this step is fed; unless
        // that token is its last by length (a stop token is only known when it comes).
        // A constrained request (or one whose reasoning is filtered) never follows: its next mask
        // depends on the token in flight.
        const bool can_follow = config_.overlap_schedule && r->pending_tokens == 1 && !r->constraint &&
                                !r->thinking_filtered_now() &&
                                static_cast<std::int64_t>(r->output_ids.size()) + 1 < r->max_new_tokens;
        if (r->pending_tokens > 0 && !can_follow) continue;
        batch.push_back(r);
        if (cap > 0 && static_cast<std::int64_t>(batch.size()) == cap) break;
    }
    return batch;
}

void Scheduler::retract_decode(std::vector<Req*>& batch) {
    // Nothing is in flight, so any running request may give up its KV, not only the
    // micro-batch's: a capped micro-batch of one would otherwise be aborted while others
    // hold the memory.
    TSR_CHECK(in_flight_.empty());
    std::vector<RetractCandidate> cands;
    cands.reserve(running_.size());
    for (const Req* r : running_)
        cands.push_back({.output_len = static_cast<std::int64_t>(r->output_ids.size()),
                         .input_len = static_cast<std::int64_t>(r->input_ids.size()),
                         .priority = r->priority});
    const std::vector<std::size_t> order =
        retraction_order(cands, config_.retract_by_priority
                                    ? std::optional<PriorityOrder>(PriorityOrder{config_.schedule_low_priority_values_first})
                                    : std::nullopt);
    std::vector<Req*> remaining = running_;
    std::vector<Req*> retracted;
    std::size_t next = 0;
    bool first = true;
    while (first || !check_decode_mem(decode_micro_batch(remaining))) {
        if (remaining.size() == 1) {
            // Even one request does not fit: abort it rather than stall the loop.
            Req& last = *remaining.front();
            release_kv_no_insert(last);
            finish(last, FinishReason::kAbort,
                   fmt::format("decode out of memory: KV pool of {} tokens cannot hold request "
                               "'{}' ({} tokens); try a larger --mem-fraction-static",
                               config_.max_total_num_tokens, last.rid, last.fill_len()));
            remaining.clear();
            break;
        }
        first = false;
        Req* victim = running_[order[next++]];
        erase_ptr(remaining, victim);
        release_kv_no_insert(*victim);
        // Use the memory freed by the release at once; keep room for a few steps of the rest.
        evict_if_needed(static_cast<std::int64_t>(remaining.size()) * config_.retract_decode_steps);
        ++victim->n_retracted;
        retracted.push_back(victim);
    }
    running_ = remaining;
    batch = decode_micro_batch(running_);

    std::int64_t decoded = 0;
    std::int64_t max_new = 0;
    for (const Req* r : running_) {
        decoded += static_cast<std::int64_t>(r->output_ids.size());
        max_new += r->max_new_tokens;
    }
    const double old_ratio = ratio_.value();
    ratio_.set_after_retraction(ratio_after_retraction(
        decoded, max_new, static_cast<std::int64_t>(running_.size()), config_.retract_decode_steps));
    last_num_retracted_ = static_cast<std::int64_t>(retracted.size());
    total_retracted_ += last_num_retracted_;
    TSR_LOG_C(INFO, "sched",
              "KV cache pool is full. Retract requests. #retracted_reqs: {}, #new_token_ratio: "
              "{:.4f} -> {:.4f}",
              retracted.size(), old_ratio, ratio_.value());
    for (Req* r : retracted) requeue(*r);
    drop_finished();
}

void Scheduler::launch_decode(const std::vector<Req*>& reqs) {
    executor::ForwardBatch batch;
    InFlightStep step{.kind = StepKind::kDecode};
    batch.seqs.reserve(reqs.size());
    step.seqs.reserve(reqs.size());
    for (Req* r : reqs) add_decode_seq(*r, batch, step);
    launch(batch, std::move(step));
}

void Scheduler::add_decode_seq(Req& r, executor::ForwardBatch& batch, InFlightStep& step) {
    const std::int64_t pos = r.kv_len();
    TSR_CHECK(alloc_slots(r, 1)) << "decode slot allocation failed after check_decode_mem";
    // Past the known tokens: the one the step in flight samples (overlap scheduling).
    const std::int32_t token = pos < r.fill_len() ? r.fill_id(pos) : executor::kFutureToken;
    batch.seqs.push_back({.rid = r.rid,
                          .tokens = {token},
                          .start_pos = pos,
                          .slots = r.slots,
                          .need_token = true,
                          .sampling = r.sampling,
                          .output_ids = r.output_ids,
                          .logprob_token_ids = r.logprob_token_ids});
    constrain(r, batch.seqs.back());
    step.seqs.push_back({.rid = r.rid, .arrival = r.arrival, .need_token = true, .decode = true, .start_pos = pos,
                         .n_tokens = 1});
    ++r.in_flight_steps;
    ++r.pending_tokens;
}

void Scheduler::launch(executor::ForwardBatch& batch, InFlightStep step) {
    batch.record_routed_experts = config_.routed_experts_width > 0;
    // Recorded first: the runner may run the step inside launch() and look at our state.
    in_flight_.push_back(std::move(step));
    // A lockstep runner pairs the groups' prefill agreements with rounds (before_round()).
    if (Status s = runner_.before_round(); !s.ok()) TSR_LOG_C(WARN, "sched", "prefill delayer: {}", s.message());
    in_flight_.back().launch_status = runner_.launch(batch);
}

void Scheduler::record_routed_experts(const InFlightStep& step, const std::vector<Req*>& reqs,
                                      const std::vector<executor::SampledToken>& results) {
    const std::int64_t width = config_.routed_experts_width;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        Req* r = reqs[i];
        const InFlightSeq& seq = step.seqs[i];
        const std::vector<std::int32_t>& rows = results[i].routed_experts;
        if (r == nullptr || static_cast<std::int64_t>(rows.size()) != seq.n_tokens * width ||
            seq.start_pos + seq.n_tokens > static_cast<std::int64_t>(r->slots.size()))
            continue;
        for (std::int64_t t = 0; t < seq.n_tokens; ++t) {
            const auto slot = static_cast<std::size_t>(r->slots[static_cast<std::size_t>(seq.start_pos + t)]);
            if ((slot + 1) * width > routed_by_slot_.size()) routed_by_slot_.resize((slot + 1) * width);
            std::copy_n(rows.begin() + t * width, width, routed_by_slot_.begin() + slot * width);
        }
        if (!r->return_routed_experts || !seq.need_token) continue;
        // The token this step samples comes after every position computed so far; some of
        // them may be a cached prefix, recorded when another request computed it.
        const std::int64_t end = seq.start_pos + seq.n_tokens;
        if (r->routed_experts_sent < 0) r->routed_experts_sent = r->routed_experts_start_len;
        for (std::int64_t pos = r->routed_experts_sent; pos < end; ++pos) {
            const auto slot = static_cast<std::size_t>(r->slots[static_cast<std::size_t>(pos)]);
            if ((slot + 1) * width > routed_by_slot_.size()) routed_by_slot_.resize((slot + 1) * width);
            const auto first = routed_by_slot_.begin() + static_cast<std::ptrdiff_t>(slot * width);
            r->routed_experts_ready.insert(r->routed_experts_ready.end(), first, first + width);
        }
        r->routed_experts_sent = std::max(r->routed_experts_sent, end);
    }
}

Req* Scheduler::find_live(const InFlightSeq& seq) {
    const auto it = reqs_.find(seq.rid);
    if (it == reqs_.end() || it->second->arrival != seq.arrival) return nullptr;
    return it->second.get();
}

StepKind Scheduler::collect_oldest() {
    // A step whose launch failed never reached the runner: it has nothing to collect.
    const Status& launched = in_flight_.front().launch_status;
    StatusOr<std::vector<executor::SampledToken>> result =
        launched.ok() ? runner_.collect() : StatusOr<std::vector<executor::SampledToken>>(launched);
    const InFlightStep step = std::move(in_flight_.front());
    in_flight_.pop_front();
    // nullptr: finished meanwhile (aborted); its results are dropped.
    std::vector<Req*> reqs;
    reqs.reserve(step.seqs.size());
    for (const InFlightSeq& seq : step.seqs) {
        Req* r = find_live(seq);
        if (r != nullptr) {
            --r->in_flight_steps;
            if (seq.need_token) --r->pending_tokens;
        }
        reqs.push_back(r);
    }
    if (!result.ok()) {
        std::vector<Req*> live;
        for (Req* r : reqs)
            if (r != nullptr) live.push_back(r);
        abort_batch(live, result.status());
        return step.kind;
    }
    TSR_CHECK_EQ(result->size(), step.seqs.size());
    // Under DP-attention a decode step of this group may have run beside another group's
    // prefill: SGLang arms the interval on such a round too (_arm_prefill_decode_interval reads
    // the batch's is_extend_in_batch, which all groups agree on).
    if (step.kind == StepKind::kDecode && runner_.last_round_extended())
        decode_steps_owed_ = config_.prefill_decode_interval;
    if (config_.routed_experts_width > 0) record_routed_experts(step, reqs, *result);
    if (step.kind == StepKind::kPrefill) {
        apply_prefill_results(step, reqs, *result);
    } else {
        apply_decode_results(reqs, *result);
    }
    return step.kind;
}

void Scheduler::apply_prefill_results(const InFlightStep& step, const std::vector<Req*>& reqs,
                                      const std::vector<executor::SampledToken>& tokens) {
    bool any_decode = false, any_finished = false;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == nullptr) continue;
        Req& r = *reqs[i];
        if (step.seqs[i].decode) {
            any_decode = true;
            any_finished = apply_decode_token(r, tokens[i]) || any_finished;
            continue;
        }
        record_input_logprobs(r, step.seqs[i], tokens[i]);
        if (step.seqs[i].truncated) {
            // Share the finished chunks through the tree; the next chunk starts from them.
            // Not while a later chunk is in flight: kv_len already covers its positions, so
            // the insert would publish K/V that chunk has not written (nor will, if it
            // fails), and a swap to the tree's slots would move its slots under it. The last
            // chunk inserts the whole prompt anyway.
            if (r.in_flight_steps == 0) cache_unfinished_req(r, /*chunked=*/true);
            continue;
        }
        erase_ptr(prefilling_, &r);
        const executor::SampledToken& tok = tokens[i];
        const bool prefill_only = !tok.embedding.empty() || r.prefill_only;
        if (prefill_only) {
            // An embedding request, or one of max_new_tokens 0 (SGLang's is_prefill_only),
            // ends with its prompt, as SGLang's FINISH_LENGTH(length=0).
            r.finish_reason = FinishReason::kLength;
        } else if (!take_constrained_token(r, tok.token)) {
            any_finished = true;
            continue;
        } else {
            r.output_ids.push_back(tok.token);
            r.count_reasoning(tok.token);
            r.check_finished();
        }
        if (r.finished()) {
            drop_uncomputed_tail(r);
            cache_finished_req(r);
            r.state = ReqState::kFinished;
        } else {
            cache_unfinished_req(r);  // others can match this prompt right away
            last_prefill_.push_back(&r);
        }
        if (prefill_only && tok.embedding.empty())
            emit(r, nullptr, &tok);
        else
            emit(r, &tok);
    }
    if (any_finished) batch_is_full_ = false;
    drop_finished();
    if (any_decode && ++forward_ct_decode_ % config_.decode_log_interval == 0) log_decode();
}

void Scheduler::record_input_logprobs(Req& r, const InFlightSeq& seq, const executor::SampledToken& result) {
    const auto [first, last] = r.input_logprob_rows();
    const std::int64_t begin = std::max(first, seq.start_pos);
    if (begin >= std::min(last, seq.start_pos + seq.n_tokens)) return;
    // Entries of the positions before this step's; more were kept when a retracted request
    // computes its prompt again.
    const std::int64_t before = begin - first;
    if (static_cast<std::int64_t>(r.input_logprobs.size()) < before) {
        // Served from the prefix cache, which match() keeps them out of: unknown (null).
        TSR_LOG_C(ERROR, "sched", "request '{}': prompt log-probabilities of positions {}..{} were not computed",
                  r.rid, first + static_cast<std::int64_t>(r.input_logprobs.size()) + 1, begin);
    }
    r.input_logprobs.resize(static_cast<std::size_t>(before), NAN);
    r.input_top_logprobs_ready.resize(static_cast<std::size_t>(before * r.input_top_logprobs), {-1, NAN});
    r.input_token_ids_logprobs_ready.resize(static_cast<std::size_t>(before) * r.logprob_token_ids.size(), NAN);
    r.input_token_ids_logprobs_ready.insert(r.input_token_ids_logprobs_ready.end(),
                                            result.input_token_ids_logprobs.begin(),
                                            result.input_token_ids_logprobs.end());
    r.input_logprobs.insert(r.input_logprobs.end(), result.input_logprobs.begin(), result.input_logprobs.end());
    r.input_top_logprobs_ready.insert(r.input_top_logprobs_ready.end(), result.input_top_logprobs.begin(),
                                      result.input_top_logprobs.end());
}

void Scheduler::apply_decode_results(const std::vector<Req*>& reqs,
                                     const std::vector<executor::SampledToken>& tokens) {
    bool any_finished = false;
    for (std::size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i] != nullptr) any_finished = apply_decode_token(*reqs[i], tokens[i]) || any_finished;
    if (any_finished) batch_is_full_ = false;
    drop_finished();
    if (++forward_ct_decode_ % config_.decode_log_interval == 0) log_decode();
}

void Scheduler::constrain(Req& r, executor::ForwardSequence& seq) {
    if (r.thinking_filtered_now()) {
        if (r.thinking_budget < 0 || r.reasoning_tokens < r.thinking_budget) {
            seq.sampling.allowed_tokens = r.thinking_allowed;
        } else {
            auto only_end = std::make_shared<std::vector<std::uint32_t>>(r.thinking_allowed->size(), 0u);
            const auto end = static_cast<std::uint32_t>(*r.think_end_id);
            if (end / 32 < only_end->size()) (*only_end)[end / 32] |= 1u << (end % 32);
            seq.sampling.allowed_tokens = std::move(only_end);
        }
        return;
    }
    if (!r.constrained_now() || !r.constraint_error.empty()) return;
    auto allowed = r.constraint->allowed_tokens();
    if (allowed.ok()) {
        seq.sampling.allowed_tokens = std::move(allowed.value());
    } else {
        r.constraint_error = allowed.status().message();
    }
}

bool Scheduler::take_constrained_token(Req& r, std::int32_t token) {
    std::string error = r.constraint_error;
    if (error.empty() && r.constrained_now() && !r.constraint->accept(token))
        error = fmt::format("token {} is not allowed by the request's grammar", token);
    if (error.empty()) return true;
    drop_uncomputed_tail(r);
    cache_finished_req(r);
    finish(r, FinishReason::kAbort, "constrained decoding failed: " + error);
    return false;
}

bool Scheduler::apply_decode_token(Req& r, const executor::SampledToken& tok) {
    if (!take_constrained_token(r, tok.token)) return true;
    r.output_ids.push_back(tok.token);
    r.count_reasoning(tok.token);
    ++generation_tokens_total_;
    ++num_generated_since_log_;
    r.check_finished();
    const bool finished = r.finished();
    if (finished) {
        drop_uncomputed_tail(r);
        cache_finished_req(r);
        r.state = ReqState::kFinished;
    }
    emit(r, &tok);
    return finished;
}

void Scheduler::abort_batch(const std::vector<Req*>& reqs, const Status& status) {
    TSR_LOG_C(ERROR, "sched", "batch of {} requests failed: {}", reqs.size(), status.to_string());
    for (Req* r : reqs) {
        // The step's K/V may be half written: free it, do not cache it.
        release_kv_no_insert(*r);
        finish(*r, FinishReason::kAbort, status.to_string());
    }
    batch_is_full_ = false;
    drop_finished();
}

// ---- logs and stats -----------------------------------------------------------------------

void Scheduler::log_prefill(const PrefillAdder& adder, std::int64_t n_new_seqs,
                            std::int64_t running_bs) {
    const std::int64_t hit = adder.log_hit_tokens();
    const std::int64_t input = adder.log_input_tokens();
    last_cache_hit_rate_ = hit + input > 0 ? static_cast<double>(hit) / static_cast<double>(hit + input) : 0.0;
    TSR_LOG_C(INFO, "sched",
              "Prefill batch. #new-seq: {}, #new-token: {}, #cached-token: {}, token usage: {:.2f}, "
              "#running-req: {}, #queue-req: {}",
              n_new_seqs, input, hit,
              static_cast<double>(num_used_tokens()) / static_cast<double>(config_.max_total_num_tokens),
              running_bs, waiting_.size());
}

void Scheduler::log_time_stats(const Req& r) {
    const double now = clock_();
    const double forward_at = r.forward_at < 0 ? now : r.forward_at;
    TSR_LOG_C(INFO, "sched",
              "ReqTimeStats(rid={}, input_len={}, cached_input_len={}, output_len={}, type=unified): "
              "queue_duration={:.2f}ms, forward_duration={:.2f}ms, start_time={:.3f}",
              r.rid, r.input_ids.size(), r.cached_tokens, r.output_ids.size(), (forward_at - r.queued_at) * 1e3,
              (now - forward_at) * 1e3, r.queued_at);
}

void Scheduler::log_decode() {
    const double now = clock_();
    const double gap = now - last_decode_log_time_;
    last_gen_throughput_ = gap > 0 ? static_cast<double>(num_generated_since_log_) / gap : 0.0;
    last_decode_log_time_ = now;
    num_generated_since_log_ = 0;
    const std::int64_t used = num_used_tokens();
    TSR_LOG_C(INFO, "sched",
              "Decode batch. #running-req: {}, #token: {}, token usage: {:.2f}, gen throughput "
              "(token/s): {:.2f}, #queue-req: {}",
              running_.size(), used,
              static_cast<double>(used) / static_cast<double>(config_.max_total_num_tokens),
              last_gen_throughput_, waiting_.size());
}

SchedulerStats Scheduler::stats() const {
    SchedulerStats s;
    s.num_running_reqs = static_cast<std::int64_t>(running_.size() + last_prefill_.size() + prefilling_.size());
    s.num_queue_reqs = static_cast<std::int64_t>(waiting_.size());
    s.max_total_num_tokens = config_.max_total_num_tokens;
    s.available_tokens = allocator_->available();
    s.evictable_tokens = cache_->evictable_size();
    s.touched_tokens = allocator_->touched();
    s.num_used_tokens = num_used_tokens();
    s.token_usage = static_cast<double>(s.num_used_tokens) / static_cast<double>(s.max_total_num_tokens);
    s.cache_hit_rate = last_cache_hit_rate_;
    s.gen_throughput = last_gen_throughput_;
    s.new_token_ratio = ratio_.value();
    s.num_retracted_reqs = last_num_retracted_;
    s.total_retracted_reqs = total_retracted_;
    s.total_preempted_reqs = total_preempted_;
    s.prompt_tokens_total = prompt_tokens_total_;
    s.cached_tokens_total = cached_tokens_total_;
    s.generation_tokens_total = generation_tokens_total_;
    s.prefill_chunk_size = last_prefill_chunk_size_;
    s.num_streaming_sessions = static_cast<std::int64_t>(session_holds_.size());
    for (const auto& [id, hold] : session_holds_) s.streaming_session_held_tokens += hold.tokens;
    s.num_referencing_sessions = static_cast<std::int64_t>(session_refs_.size());
    if (delayer_) s.prefill_delayer = delayer_->stats();
    return s;
}

}  // namespace tessera::scheduler
