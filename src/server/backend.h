#pragma once
// server/backend.h — what the HTTP server needs from the engine, and nothing more: submit a
// generation, stream its events back, abort it, and read server state. The engine side
// (tokenizer manager + scheduler) implements it; tests use a fake with a known schedule.
// Implementations are thread-safe; event callbacks run on an engine thread and must not
// block (the HTTP layer posts them to the connection's strand).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/logging.h"
#include "base/status.h"

namespace tessera::server {

// return_hidden_states (SGLang's request field): false; "last", the state that predicted the
// last output token; or true (full), the prompt's rows and then one per output token.
enum class HiddenStatesMode { kNone, kLast, kFull };

// Constrained decoding (SGLang's regex, json_schema, ebnf and structural_tag sampling
// parameters, and the OpenAI response_format): the output must match the regex, be an instance
// of the JSON schema, be a sentence of the grammar's root rule, or be free text whose triggers
// open the structures of the structural tag.
struct OutputConstraint {
    enum class Kind { kRegex, kJsonSchema, kEbnf, kStructuralTag } kind = Kind::kRegex;
    std::string text;  // the regex, the schema's JSON text, the grammar, or the structural tag's JSON
};

// SGLang's session_params (io_struct.py SessionParams): continue request `rid` of the open
// session `id` (see front/sessions.h).
struct SessionParams {
    std::string id;
    std::optional<std::string> rid;    // none: the request starts a new branch of the session
    std::optional<std::int64_t> offset;  // cut of the earlier request's tokens (Python slice end)
    bool replace = false;                // drop what followed `rid` (or, without it, everything)
    bool drop_previous_output = false;   // continue from `rid`'s prompt, without its output
};

// /open_session's body (io_struct.py OpenSessionReqInput).
struct OpenSessionParams {
    std::int64_t capacity_of_str_len = 0;  // required by SGLang, enforced by neither
    std::optional<std::string> session_id;  // none: a new random id
    bool streaming = false;                 // SGLang's --enable-streaming-session sessions
    std::optional<double> timeout_s;        // closed after this long without a request
};

struct GenerationParams {
    std::int64_t max_new_tokens = 16;  // < 0: up to the context length (chat without max_tokens)
    float temperature = 1.0f;
    float top_p = 1.0f;
    int top_k = -1;
    float min_p = 0.0f;
    std::optional<std::uint64_t> seed;
    std::vector<std::string> stop;             // stop strings (not included in the output)
    std::vector<std::int32_t> stop_token_ids;  // extra end tokens
    bool ignore_eos = false;
    bool skip_special_tokens = true;
    float frequency_penalty = 0.0f;
    float presence_penalty = 0.0f;
    bool logprobs = false;
    int top_logprobs = 0;
    // SGLang's logprob_start_len: with logprobs, the prompt's log-probabilities from this
    // position on come with the first event (-1: none; at most the prompt's length).
    std::int64_t logprob_start_len = -1;
    // SGLang's token_ids_logprob: with logprobs, each entry also gives these tokens'.
    std::vector<std::int32_t> token_ids_logprob;
    // OpenAI's echo: the first event carries the prompt's text (GenerationEvent::prompt_text).
    bool echo = false;
    // OpenAI's logit_bias: added to the token's logit before sampling (-100 bans, +100 forces).
    std::vector<std::pair<std::int32_t, float>> logit_bias;
    // Output tokens per event while streaming (SGLang's sampling_params.stream_interval);
    // 0: the server's --stream-interval.
    int stream_interval = 0;
    // The request's "priority" (SGLang's request field), when it gives one: what
    // --enable-priority-scheduling (and --schedule-policy priority) order and preempt by.
    std::optional<std::int32_t> priority;
    // The output begins with the model's reasoning (SGLang's require_reasoning): with a
    // --reasoning-parser, its tokens up to the think-end token are counted as reasoning_tokens.
    bool require_reasoning = false;
    // custom_params.thinking_budget: with --enable-strict-thinking, after this many reasoning
    // tokens only the think-end token may come (negative: no budget).
    std::optional<std::int64_t> thinking_budget;
    HiddenStatesMode return_hidden_states = HiddenStatesMode::kNone;
    // return_routed_experts (with --enable-return-routed-experts): the experts of positions
    // [routed_experts_start_len, prompt + output - 1) come with the last event.
    bool return_routed_experts = false;
    std::int64_t routed_experts_start_len = 0;
    std::optional<OutputConstraint> constraint;
    std::optional<SessionParams> session;  // /generate's session_params
};

struct GenerationInput {
    // Exactly one of: text (completions, /generate), input_ids, or a chat request
    // ({"messages": [...], "tools": [...], and template flags such as "enable_thinking"},
    // key order preserved).
    std::optional<std::string> text;
    std::optional<std::vector<std::int32_t>> input_ids;
    std::optional<std::string> chat_json;  // serialized ordered JSON object
    std::string chat_prompt_suffix;        // text after the rendered chat prompt ("<think>")
    // A chat whose last message is the assistant's: continue that message (else it is sent as
    // the user's, as SGLang's serving_chat.py _handle_last_assistant_message does).
    bool continue_final_message = false;
};

struct GenerationRequest {
    std::string request_id;
    GenerationInput input;
    GenerationParams params;
};

struct TokenLogprob {
    std::int32_t token = 0;
    std::string text;
    float logprob = 0.0f;
    std::vector<std::pair<std::string, float>> top;  // top_logprobs: (token text, logprob)
    std::vector<std::int32_t> top_ids;               // their token ids
    // GenerationParams::token_ids_logprob: (token text, logprob) of each, in that order.
    std::vector<std::pair<std::string, float>> chosen;
    std::vector<std::int32_t> chosen_ids;
};

// One entry of meta_info.hidden_states: the final-normed hidden state at the position that
// predicted an output token, f32 [hidden_size]; for the first token of a full request every row
// of its last prefill pass, f32 [rows, hidden_size], as one two-dimensional entry (SGLang's
// batch_result_processor.py _append_prefill_hidden_states).
struct HiddenStates {
    std::vector<float> values;
    std::int64_t rows = 1;
    bool prompt = false;  // the two-dimensional first entry
};

struct Usage {
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    std::int64_t cached_tokens = 0;
    std::int64_t reasoning_tokens = 0;  // of completion_tokens, up to the think-end token
};

// One step of a request's output. The last event of a request has finish_reason set
// ("stop", "length" or "abort") or error set; no event follows it.
struct GenerationEvent {
    std::string text;                     // new text since the previous event (UTF-8 complete)
    std::vector<std::int32_t> token_ids;  // tokens since the previous event
    std::vector<TokenLogprob> logprobs;   // one per token when requested
    // max_new_tokens 0 with log-probabilities, on the last event: the distribution at the
    // prompt's end, whose token is not output; its best ones and token_ids values are answered.
    std::optional<TokenLogprob> unsampled_logprobs;
    // GenerationParams::logprob_start_len, with the first event: one entry per prompt token
    // from there on; the first has no log-probability (NaN: nothing before it is in the range).
    std::optional<std::vector<TokenLogprob>> input_logprobs;
    std::optional<std::string> prompt_text;  // GenerationParams::echo, with the first event
    std::optional<std::string> finish_reason;
    std::optional<std::string> matched_stop;  // the stop string or token that ended it
    std::vector<float> embedding;              // an embedding server's answer (its last event)
    std::vector<HiddenStates> hidden_states;   // one per token when requested
    // GenerationParams::return_routed_experts, on the last event: I32 [positions,
    // num_hidden_layers, top_k] logical expert ids (0 for dense layers).
    std::optional<std::vector<std::int32_t>> routed_experts;
    Usage usage;                               // cumulative
    std::optional<Status> error;               // InvalidArgument → 400, ResourceExhausted → 503 ...
};

using EventCallback = std::function<void(GenerationEvent)>;

class Backend {
 public:
    virtual ~Backend() = default;
    // Validates and queues the request. A non-OK status means it was rejected before
    // queuing (bad input → InvalidArgument, full queue → ResourceExhausted, over a length
    // limit → OutOfRange) and no event will follow.
    virtual Status submit(GenerationRequest request, EventCallback on_event) = 0;
    // Stops a request (client gone); its KV is freed; a final "abort" event follows.
    virtual void abort(const std::string& request_id) = 0;
    // /v1/tokenize and /v1/detokenize: the tokenizer's ids of a text, and the text of ids
    // (InvalidArgument for ids outside the vocabulary, or a server without a tokenizer).
    virtual StatusOr<std::vector<std::int32_t>> tokenize(const std::string&, bool /*add_special_tokens*/) const {
        return Status::InvalidArgument("this server has no tokenizer");
    }
    virtual StatusOr<std::string> detokenize(const std::vector<std::int32_t>&, bool /*skip_special_tokens*/) const {
        return Status::InvalidArgument("this server has no tokenizer");
    }
    // /abort_request: stops every request whose id starts with `prefix` ("" for all), as
    // SGLang's scheduler matches (scheduler.py abort_request: req.rid.startswith(rid)).
    virtual void abort_prefixed(const std::string& prefix) = 0;
    // /pause_generation and /continue_generation (SGLang's, for RL weight updates): while
    // paused no step is scheduled and new requests wait in the queue. kAbort first ends every
    // request with finish_reason abort; kRetract frees the running requests' KV and queues them
    // again (their output so far kept, recomputed on continue); kInPlace keeps everything.
    enum class PauseMode { kAbort, kRetract, kInPlace };
    virtual Status pause_generation(PauseMode) { return Status::Unimplemented("this server cannot pause"); }
    virtual Status continue_generation() { return Status::Unimplemented("this server cannot pause"); }
    // /update_weights_from_disk (SGLang's, for RL): after the running requests finish (at once
    // when paused; new ones wait meanwhile), every rank loads its share of another folder of the
    // same model. The weights change only if every rank loaded its share; the error says why
    // not. On success the prefix cache is dropped (flush_cache). `done` is called once, on a
    // backend thread (it may wait for long requests: it must not block an HTTP thread).
    struct WeightUpdate {
        std::string model_path;
        std::string load_format;           // auto or safetensors; "": the launch's --load-format
        bool abort_all_requests = false;   // end every request first (finish_reason abort)
        bool flush_cache = true;
    };
    virtual void update_weights_from_disk(const WeightUpdate&, std::function<void(Status)> done) {
        done(Status::Unimplemented("this server cannot update its weights"));
    }
    // /release_memory_occupation and /resume_memory_occupation (SGLang's, for RL: a trainer on
    // the same machine takes the memory between rollouts). The regions SGLang's tags name;
    // `done` is called once, on a backend thread (a resume loads the weights again).
    struct MemoryRegions {
        bool weights = false;
        bool kv_cache = false;
        bool cuda_graph = false;  // nothing on CPU
    };
    virtual void release_memory_occupation(const MemoryRegions&, std::function<void(Status)> done) {
        done(Status::Unimplemented("this server cannot release its memory"));
    }
    virtual void resume_memory_occupation(const MemoryRegions&, std::function<void(Status)> done) {
        done(Status::Unimplemented("this server cannot release its memory"));
    }

    // /configure_logging (SGLang's): request logging and the log level changed while serving;
    // an unset field stays as it is.
    struct LoggingChange {
        std::optional<bool> log_requests;
        std::optional<int> log_requests_level;          // 0-3
        std::optional<bool> log_requests_json;          // log_requests_format "json" (else "text")
        std::optional<logging::Level> log_level;
    };
    virtual Status configure_logging(const LoggingChange&) {
        return Status::Unimplemented("this server cannot change its logging");
    }

    virtual std::string served_model_name() const = 0;
    virtual std::int64_t max_model_len() const = 0;
    virtual bool ready() const = 0;  // false while starting or draining
    virtual nlohmann::json server_info() const = 0;  // /get_server_info body
    // /model_info's fields about the model: model_path, tokenizer_path, is_generation,
    // model_type, architectures, has_image_understanding, has_audio_understanding.
    virtual nlohmann::json model_info() const = 0;
    virtual std::string metrics_text() const = 0;     // Prometheus text format
    virtual Status flush_cache() = 0;
    // /open_session: the new session's id; /close_session (an unknown id is not an error).
    virtual StatusOr<std::string> open_session(const OpenSessionParams&) {
        return Status::Unimplemented("this server keeps no sessions");
    }
    virtual void close_session(const std::string&) {}
    // /start_expert_distribution_record, /stop_..., /dump_...: applied on every rank.
    enum class ExpertRecordAction { kStart, kStop, kDump };
    virtual Status expert_record(ExpertRecordAction action) = 0;
    // Stop accepting, finish what is in flight, then return (SIGTERM).
    virtual void drain() = 0;
};

}  // namespace tessera::server
