#pragma once
// scheduler/request.h — Req: one generation request as the scheduler tracks it, from arrival
// (waiting) through prefill chunks and decode (running) to finished, plus the event the
// loop emits for it (new token / finish). The caller fills the request part; the Scheduler
// owns the Req after add_request and is the only one to touch the bookkeeping part.
// Not thread-safe: lives on the scheduler thread; the event sink is called on that thread.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "executor/forward_batch.h"
#include "kvcache/prefix_cache.h"
#include "scheduler/token_constraint.h"

namespace tessera::scheduler {

enum class ReqState { kWaiting, kRunning, kFinished };

// SGLang's finish reasons as the API reports them: "stop" (eos / stop token), "length"
// (max_new_tokens), "abort" (client abort, error, or out of memory).
enum class FinishReason { kNone, kStop, kLength, kAbort };
std::string_view finish_reason_name(FinishReason reason);

// What the loop tells the request's owner after a step. `token` is set when a new output
// token was produced; `finished` on the request's last event (then `finish_reason`, and
// `error` for an abort with a cause). Counters are totals so far.
struct ReqEvent {
    std::string_view rid;
    std::optional<executor::SampledToken> token;
    bool finished = false;
    FinishReason finish_reason = FinishReason::kNone;
    std::string_view error;
    std::int64_t prompt_tokens = 0;
    std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
    std::int64_t completion_tokens = 0;
    std::int64_t reasoning_tokens = 0;  // of them, up to the think-end token (Req::think_end_id)
    // Req::return_routed_experts: I32 [positions, num_hidden_layers, top_k], the positions
    // computed since the previous event.
    std::vector<std::int32_t> routed_experts;
    // Req::logprob_start_len, with the request's first answer (its first token, or its end):
    // the prompt's tokens from there on, the log-probability of each after the first, and
    // [those × input_top_logprobs] best ones. Unset otherwise.
    bool has_input_logprobs = false;
    std::span<const std::int32_t> input_logprob_tokens;
    std::span<const float> input_logprobs;
    std::span<const std::pair<std::int32_t, float>> input_top_logprobs;
    std::span<const float> input_token_ids_logprobs;  // [those × Req::logprob_token_ids]
    // A request of max_new_tokens 0, with its end: the row at the prompt's last position, whose
    // sampled token is not output (its best ones and token_ids values still answer, as SGLang's
    // one row of output_top_logprobs / output_token_ids_logprobs).
    std::optional<executor::SampledToken> unsampled;
};
using ReqEventSink = std::function<void(const ReqEvent&)>;

struct Req {
    // ---- set by the caller ------------------------------------------------------------
    std::string rid;
    std::vector<std::int32_t> input_ids;   // I32 [n_input], non-empty
    std::int64_t max_new_tokens = 128;     // clamped at add_request to the context budget
    std::vector<std::int32_t> stop_token_ids;  // user's stop ids
    std::vector<std::int32_t> eos_token_ids;   // the model's eos ids
    bool ignore_eos = false;                   // disables both lists above (SGLang semantics)
    executor::SequenceSampling sampling;
    // --enable-priority-scheduling and --schedule-policy priority: better first (higher values,
    // or lower under --schedule-low-priority-values-first). The front fills in a default.
    std::int64_t priority = 0;
    // The reasoning parser's think-end token, for a request whose output begins with its
    // reasoning (SGLang's require_reasoning): its output tokens up to and with that token count
    // as reasoning_tokens.
    std::optional<std::int32_t> think_end_id;
    // --enable-strict-thinking (SGLang's ReasonerGrammarObject): until the think-end token the
    // output may only hold these tokens (bit t of word t / 32), and once thinking_budget
    // reasoning tokens are written (if >= 0) only the think-end token.
    std::shared_ptr<const std::vector<std::uint32_t>> thinking_allowed;
    std::int64_t thinking_budget = -1;
    // return_routed_experts (with --enable-return-routed-experts): the token events carry the
    // routing of positions [routed_experts_start_len, prompt + output - 1), in order.
    bool return_routed_experts = false;
    std::int64_t routed_experts_start_len = 0;
    // Constrained decoding (a regex or JSON schema the output must match); null: none. With
    // think_end_id it applies from the token after the think-end token (SGLang's
    // ReasonerGrammarBackend).
    std::shared_ptr<TokenConstraint> constraint;
    // Prompt log-probabilities (SGLang's logprob_start_len with return_logprob): the first
    // token's event carries, for each prompt position after this one, the log-probability of
    // its token given the ones before it (of the raw logits), with the best
    // input_top_logprobs of each; -1: none. The prefix cache serves no position from it on.
    std::int64_t logprob_start_len = -1;
    int input_top_logprobs = 0;
    // SGLang's token_ids_logprob: every output token, and every prompt position scored, also
    // reports the log-probabilities of these tokens.
    std::vector<std::int32_t> logprob_token_ids;
    // The streaming session this request is a turn of ("": none; see
    // SchedulerConfig::enable_streaming_session).
    std::string streaming_session;
    // The session whose references this request's cached KV joins once it ends well ("":
    // none; see SchedulerConfig::enable_session_radix_cache).
    std::string radix_session;
    ReqEventSink sink;       // may be empty (no events)

    // ---- owned by the scheduler -------------------------------------------------------
    std::vector<std::int32_t> output_ids;  // I32 [n_output] generated so far
    // I32 [kv_len]: KV slot of every position computed so far. slots[0, prefix_len) belong
    // to the prefix cache (held by the lock on last_node); the rest belong to this request.
    std::vector<std::int32_t> slots;
    std::int64_t prefix_len = 0;            // multiple of page_size
    kvcache::NodeId last_node = 0;          // locked radix node ending at prefix_len; 0 = root
    ReqState state = ReqState::kWaiting;
    FinishReason finish_reason = FinishReason::kNone;
    std::string finish_error;               // cause of an abort, empty otherwise
    std::uint64_t arrival = 0;              // order of add_request (fcfs key)
    std::uint64_t queue_entry = 0;          // order of (re)joining the waiting queue
    std::int64_t cached_tokens = 0;         // prefix-cache hit of the first admission
    std::int64_t n_retracted = 0;           // times retracted under KV pressure or preempted
    bool admitted_once = false;
    std::int64_t reasoning_tokens = 0;
    bool reasoning_over = false;  // the think-end token came
    // The constraint could not give the mask of a step in flight: the request ends with this
    // error when that step's token comes.
    std::string constraint_error;
    std::int64_t routed_experts_sent = -1;           // positions whose routing went out (-1: none yet)
    std::vector<std::int32_t> routed_experts_ready;  // for the next event
    // Prompt log-probabilities of positions logprob_start_len + 1 on, as far as computed, and
    // [that many × input_top_logprobs] best ones; sent with the first token's event.
    std::vector<float> input_logprobs;
    std::vector<std::pair<std::int32_t, float>> input_top_logprobs_ready;
    std::vector<float> input_token_ids_logprobs_ready;  // [that many × logprob_token_ids]
    bool input_logprobs_sent = false;
    // Asked for max_new_tokens 0 (SGLang's is_prefill_only): it ends with its prompt. Not one
    // that add_request's clamp to the context brought to 0, which still gets one token.
    bool prefill_only = false;
    // Scheduler clock (seconds): when it was queued, and first put in a batch (-1: not yet).
    double queued_at = 0.0;
    double forward_at = -1.0;
    // Launched steps with this request not yet collected. Several only for the chunks of one
    // prompt (chunked pipeline prefill); a step that samples a token is always the last.
    int in_flight_steps = 0;
    // Launched steps that sample a token for it (decode steps or the final prefill chunk), not
    // yet collected. Without overlap scheduling at most one: it may join no other batch until
    // that step is collected, since the token is the next step's input. With overlap one more
    // decode step may follow, fed the future token (executor/future_tokens.h).
    int pending_tokens = 0;

    std::int64_t kv_len() const { return static_cast<std::int64_t>(slots.size()); }
    // Input followed by output: what the KV must hold. In decode, kv_len == fill_len() - 1
    // (the last sampled token is fed next step).
    std::int64_t fill_len() const {
        return static_cast<std::int64_t>(input_ids.size() + output_ids.size());
    }
    std::int32_t fill_id(std::int64_t i) const {
        const auto n_in = static_cast<std::int64_t>(input_ids.size());
        return i < n_in ? input_ids[i] : output_ids[i - n_in];
    }
    std::vector<std::int32_t> fill_ids(std::int64_t begin, std::int64_t end) const;
    bool finished() const { return finish_reason != FinishReason::kNone; }

    // Sets finish_reason after a token was appended, in SGLang's order: length first, then a
    // completed constraint, then eos / stop ids unless ignore_eos.
    void check_finished();
    // Counts an appended output token as reasoning until the think-end token, that one
    // included (SGLang's Req.update_reasoning_tokens).
    void count_reasoning(std::int32_t token);
    // The constraint applies to the next output token (it has one, and any reasoning is over).
    bool constrained_now() const { return constraint && (!think_end_id || reasoning_over); }
    // Strict thinking filters the next output token.
    bool thinking_filtered_now() const { return thinking_allowed && think_end_id && !reasoning_over; }
    // The prompt positions whose logits give a prompt log-probability still to send:
    // [logprob_start_len, n_input - 1); empty ({0, 0}) once sent or when none was asked for.
    std::pair<std::int64_t, std::int64_t> input_logprob_rows() const {
        if (logprob_start_len < 0 || input_logprobs_sent) return {0, 0};
        return {logprob_start_len, std::max(logprob_start_len, static_cast<std::int64_t>(input_ids.size()) - 1)};
    }
};

}  // namespace tessera::scheduler
