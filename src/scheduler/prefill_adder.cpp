#include "scheduler/prefill_adder.h"

#include <algorithm>

#include "base/check.h"

namespace tessera::scheduler {

PrefillAdder::PrefillAdder(const PrefillBudget& budget, std::span<const RunningReqView> running,
                           KvBudgetView& kv)
    : budget_(budget), kv_(kv), rem_input_tokens_(budget.max_prefill_tokens - budget.mixed_decode_tokens) {
    if (budget.chunked_prefill_size > 0) rem_chunk_tokens_ = budget.chunked_prefill_size - budget.mixed_decode_tokens;
    // Running requests will keep decoding: reserve the part of their remaining budget the
    // current ratio expects them to use (clipped, the stop condition itself is not).
    for (const auto& r : running) {
        const auto left = std::min(r.max_new_tokens - r.output_len, budget.clip_max_new_tokens);
        rem_total_token_offset_ += static_cast<double>(left) * budget.new_token_ratio;
    }
}

void PrefillAdder::release_running(double reserved) {
    rem_total_token_offset_ -= reserved;
    ++budget_.max_new_reqs;
}

std::int64_t PrefillAdder::ceil_paged(std::int64_t n) const {
    return (n + budget_.page_size - 1) / budget_.page_size * budget_.page_size;
}

double PrefillAdder::rem_total_tokens() const {
    return static_cast<double>(kv_.available_and_evictable()) - rem_total_token_offset_;
}

std::optional<std::size_t> PrefillAdder::chunked_id() const {
    for (const auto& a : can_run_)
        if (a.truncated) return a.id;
    return std::nullopt;
}

AddReqResult PrefillAdder::budget_state() const {
    const auto cur_rem = kv_.available_and_evictable() - cur_rem_token_offset_;
    if (rem_total_tokens() <= 0 || cur_rem <= 0) return AddReqResult::kNoToken;
    if (rem_input_tokens_ <= 0 || (rem_chunk_tokens_ && *rem_chunk_tokens_ <= 0))
        return AddReqResult::kOther;
    return AddReqResult::kContinue;
}

void PrefillAdder::update_budget(std::int64_t prefix_len, std::int64_t extend_len,
                                 std::int64_t max_new) {
    const std::int64_t paged = ceil_paged(extend_len);
    rem_total_token_offset_ += static_cast<double>(paged + max_new);
    cur_rem_token_offset_ += paged;
    rem_input_tokens_ -= paged;
    if (rem_chunk_tokens_) *rem_chunk_tokens_ -= paged;
    log_hit_tokens_ += prefix_len;
    log_input_tokens_ += paged;
}

void PrefillAdder::add_chunked_req(const PrefillCandidate& req) {
    TSR_CHECK(rem_chunk_tokens_.has_value()) << "a chunked request exists with chunking off";
    std::int64_t rem = std::min<std::int64_t>(*rem_chunk_tokens_,
                                              static_cast<std::int64_t>(rem_total_tokens()));
    // The request must be admitted (its KV is held; dropping it would leak), so a spent KV
    // budget falls back to the chunk budget and allocation decides.
    if (rem <= 0) rem = *rem_chunk_tokens_;
    const bool truncated = req.extend_input_len > rem;
    std::int64_t extend = req.extend_input_len;
    if (truncated) {
        // Whole pages keep the chunk boundary page-aligned, so the partial KV can be cached
        // in the radix tree; at least one page so the request makes progress.
        extend = std::max(rem / budget_.page_size * budget_.page_size, budget_.page_size);
        extend = std::min(extend, req.extend_input_len);
    }
    const bool still_chunked = extend < req.extend_input_len;
    can_run_.push_back({.id = req.id, .prefix_len = req.prefix_len, .extend_len = extend,
                        .truncated = still_chunked});
    update_budget(0, extend,
                  still_chunked ? 0 : std::min(req.max_new_tokens, budget_.clip_max_new_tokens));
}

AddReqResult PrefillAdder::add_one_req(const PrefillCandidate& req) {
    if (static_cast<std::int64_t>(can_run_.size()) >= budget_.max_new_reqs)
        return AddReqResult::kReqLimit;
    if (budget_.prefill_max_requests >= 0 &&
        static_cast<std::int64_t>(can_run_.size()) >= budget_.prefill_max_requests)
        return AddReqResult::kOther;

    const auto total_tokens =
        static_cast<double>(req.extend_input_len + std::min(req.max_new_tokens, budget_.clip_max_new_tokens));
    const std::int64_t input_tokens = ceil_paged(req.extend_input_len);
    if (total_tokens >= rem_total_tokens()) return AddReqResult::kNoToken;
    if (input_tokens >= rem_input_tokens_ && !can_run_.empty()) return AddReqResult::kOther;

    kv_.inc_lock_ref(req.last_node);
    // Locking took the prefix out of the evictable pool: check again.
    if (total_tokens >= rem_total_tokens()) {
        kv_.dec_lock_ref(req.last_node);
        return AddReqResult::kNoToken;
    }
    if (!rem_chunk_tokens_ || input_tokens <= *rem_chunk_tokens_) {
        can_run_.push_back({.id = req.id, .prefix_len = req.prefix_len,
                            .extend_len = req.extend_input_len, .truncated = false});
        update_budget(req.prefix_len, req.extend_input_len,
                      std::min(req.max_new_tokens, budget_.clip_max_new_tokens));
    } else {
        const std::int64_t trunc = *rem_chunk_tokens_ / budget_.page_size * budget_.page_size;
        // One chunked request at a time: a continuing chunk truncated by the KV budget
        // already holds that role this round.
        if (trunc <= 0 || chunked_id().has_value()) {
            kv_.dec_lock_ref(req.last_node);
            return AddReqResult::kOther;
        }
        can_run_.push_back({.id = req.id, .prefix_len = req.prefix_len, .extend_len = trunc,
                            .truncated = true});
        update_budget(req.prefix_len, trunc, 0);
    }
    return budget_state();
}

}  // namespace tessera::scheduler
