#pragma once
// scheduler/prefill_adder.h — which waiting requests join the next prefill batch, and how
// much of each (SGLang's PrefillAdder, reference §9.2). Budgets:
//   * rem_input_tokens = max_prefill_tokens, rem_chunk_tokens = chunked_prefill_size
//     (-1: no chunking), both charged the page-ceiled extend length;
//   * total KV = available + evictable − Σ_running min(max_new − out_len, clip) · ratio,
//     each admitted request charged its page-ceiled extend + min(max_new, clip) reserve;
//   * request caps: max_running_requests − running, prefill_max_requests.
// A request that does not fit the chunk budget is truncated to it (whole pages) and becomes
// the chunked request, continued first in the next round.
// No I/O, no model: the KV view is an interface (tests pass a fake). Used by one thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvcache/prefix_cache.h"

namespace tessera::scheduler {

constexpr std::int64_t kClipMaxNewTokens = 4096;  // env: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION

// What admission needs to know about the KV pool. Locking a request's matched prefix while
// it is checked (and keeping the lock when admitted) makes that prefix unevictable, which
// is why the budget is re-read after inc_lock_ref.
class KvBudgetView {
 public:
    virtual ~KvBudgetView() = default;
    virtual std::int64_t available_and_evictable() const = 0;
    virtual void inc_lock_ref(kvcache::NodeId node) = 0;
    virtual void dec_lock_ref(kvcache::NodeId node) = 0;
};

struct PrefillBudget {
    std::int64_t page_size = 1;
    std::int64_t max_prefill_tokens = 16384;
    std::int64_t chunked_prefill_size = -1;  // -1: no chunking
    double new_token_ratio = 0.7;
    std::int64_t max_new_reqs = 0;           // max_running_requests − running requests
    std::int64_t prefill_max_requests = -1;  // -1: no cap
    std::int64_t clip_max_new_tokens = kClipMaxNewTokens;
    // --enable-mixed-chunk: the running requests' decode tokens share this forward, one each,
    // so both token budgets start that much lower (SGLang's num_mixed_decode_tokens).
    std::int64_t mixed_decode_tokens = 0;
};

struct RunningReqView {
    std::int64_t max_new_tokens = 0;
    std::int64_t output_len = 0;
};

struct PrefillCandidate {
    std::size_t id = 0;                // caller's handle, echoed back
    std::int64_t prefix_len = 0;       // tokens already in KV (cache hit or earlier chunks)
    std::int64_t extend_input_len = 0; // tokens left to compute
    std::int64_t max_new_tokens = 0;
    kvcache::NodeId last_node = 0;     // node to lock for the matched prefix
};

struct AdmittedPrefill {
    std::size_t id = 0;
    std::int64_t prefix_len = 0;
    std::int64_t extend_len = 0;  // tokens computed this round (≤ extend_input_len)
    bool truncated = false;       // this is the chunked request: more chunks follow
};

// kNoToken: out of KV (stop, batch is full); kOther: a token or request budget is spent
// (stop); kReqLimit: max_running_requests reached (stop, batch is full).
enum class AddReqResult { kContinue, kNoToken, kOther, kReqLimit };

class PrefillAdder {
 public:
    PrefillAdder(const PrefillBudget& budget, std::span<const RunningReqView> running,
                 KvBudgetView& kv);

    // The request whose previous chunk ran last round. Always admitted (its KV is already
    // held), truncated to the remaining chunk / KV budget in whole pages.
    void add_chunked_req(const PrefillCandidate& req);
    // A waiting request in policy order. On admission its last_node stays locked (the
    // caller unlocks it when the request releases its KV).
    AddReqResult add_one_req(const PrefillCandidate& req);

    // A running request was preempted for a waiting one (SGLang's preempt_to_schedule): its
    // slot and its reservation of future tokens (`reserved`, as counted at construction) are
    // free. The caller frees its KV.
    void release_running(double reserved);

    const std::vector<AdmittedPrefill>& can_run() const { return can_run_; }
    // The admitted request that is truncated (chunked), if any.
    std::optional<std::size_t> chunked_id() const;
    std::int64_t log_input_tokens() const { return log_input_tokens_; }
    std::int64_t log_hit_tokens() const { return log_hit_tokens_; }
    double rem_total_tokens() const;

 private:
    std::int64_t ceil_paged(std::int64_t n) const;
    AddReqResult budget_state() const;
    void update_budget(std::int64_t prefix_len, std::int64_t extend_len, std::int64_t max_new);

    PrefillBudget budget_;
    KvBudgetView& kv_;
    std::int64_t rem_input_tokens_;
    std::optional<std::int64_t> rem_chunk_tokens_;  // nullopt: chunking off
    double rem_total_token_offset_ = 0.0;  // running reserve + admitted charges
    std::int64_t cur_rem_token_offset_ = 0;  // admitted extends only
    std::vector<AdmittedPrefill> can_run_;
    std::int64_t log_input_tokens_ = 0;
    std::int64_t log_hit_tokens_ = 0;
};

}  // namespace tessera::scheduler
