#pragma once
// server/openai_protocol.h — the JSON side of the HTTP API: validates request bodies of
// POST /v1/chat/completions, /v1/completions, /generate, and of an embedding server's
// /v1/embeddings and /encode, into GenerationRequests, and
// builds the response bodies and SSE chunks (OpenAI schema; SGLang's native /generate).
// No I/O and no Beast: everything here is pure and unit-tested without sockets.
// Thread-safety: free functions are reentrant; a ResponseBuilder belongs to one request
// and is used by one thread (the connection's strand) at a time.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "server/backend.h"
#include "server/completion_template.h"
#include "server/json_limits.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace tessera::server {

// kEmbedding: POST /v1/embeddings (OpenAI); kEncode: SGLang's native POST /encode.
enum class ApiKind { kChatCompletion, kCompletion, kGenerate, kEmbedding, kEncode, kScore };


// An error answered to the client: HTTP status plus OpenAI's error object
// {"error": {"message", "type", "param", "code"}}; empty param / code are sent as null.
struct ApiError {
    int http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;
    std::string code;

    std::string to_json() const;
    // InvalidArgument / OutOfRange / Unimplemented → 400, NotFound → 404,
    // ResourceExhausted / Unavailable → 503, DeadlineExceeded → 504, others → 500.
    static ApiError from_status(const Status& status);
};

// --preferred-sampling-params: a JSON object of SGLang's sampling_params that /generate
// requests start from (a request's own keys win: SGLang's TokenizerManager
// _create_tokenized_object merges {**preferred, **request}).
struct PreferredSampling {
    std::string json;         // as given, echoed by /model_info
    GenerationParams params;  // the object read over /generate's defaults
    int n = 1;
};


// --is-embedding: what the embedding routes check a request against.
struct EmbeddingOptions {
    std::string model_path;  // answered as the response's model, named in errors (as SGLang)
    std::int64_t hidden_size = 0;
    // config.json's: `dimensions` is refused unless is_matryoshka, and must be one of these
    // when they are listed.
    bool is_matryoshka = false;
    std::vector<std::int64_t> matryoshka_dimensions;
};

struct ProtocolOptions {
    std::string served_model_name;
    std::int64_t max_model_len = 0;  // 0: unknown (max_tokens is then capped at 2^31 - 1)
    int max_n = 128;                 // OpenAI's limit on n
    int max_top_logprobs = 20;       // OpenAI's limit on top_logprobs
    // --reasoning-parser (unset: chat content is the whole output), and whether the chat
    // template itself opens the think block.
    std::optional<ReasoningFormat> reasoning;
    bool template_opens_reasoning = false;
    // A conversation template (--chat-template NAME or FILE.json) renders chat requests: its stop
    // strings come before a request's own unless it ignores EOS, and with a reasoning parser a
    // reasoning request's prompt ends with "<think>" (serving_chat.py _apply_conversation_template).
    std::vector<std::string> conversation_stop;
    bool conversation_opens_think = false;
    std::optional<ToolCallFormat> tool_calls;  // --tool-call-parser
    // --sampling-defaults model: the model's recommended values for the chat fields a request
    // leaves out (SGLang's ChatCompletionRequest.to_sampling_params); completions and
    // /generate keep OpenAI's defaults, as in SGLang.
    std::optional<float> chat_temperature, chat_top_p, chat_min_p;
    std::optional<int> chat_top_k;
    // --stream-response-default-include-usage: streamed responses end with usage unless the
    // request's stream_options.include_usage says otherwise.
    bool stream_include_usage = false;
    // --default-chat-template-kwargs: a JSON object every chat request starts from ("" for none).
    std::string default_chat_template_kwargs;
    // The OpenAI routes fill every sampling field they know (SGLang's to_sampling_params), so
    // of these only stream_interval reaches them.
    std::optional<PreferredSampling> preferred_sampling;
    // --skip-tokenizer-init: no tokenizer, so only /generate with input_ids, no stop strings,
    // and responses carry output_ids without text (SGLang's BatchTokenIDOutput path).
    bool skip_tokenizer_init = false;
    // --incremental-streaming-output: a streamed /generate chunk carries only the text and
    // output_ids new since the previous one (SGLang's default repeats all of them).
    bool incremental_streaming_output = false;
    // --completion-template: a completion's non-empty suffix makes a fill-in-the-middle prompt
    // (without it a suffix is refused).
    std::optional<CompletionTemplate> completion_template;
    // --is-embedding: only /v1/embeddings and /encode are served (unset: they are refused).
    std::optional<EmbeddingOptions> embedding;
};

// Reads --preferred-sampling-params: an object whose keys are /generate's sampling_params
// fields, each checked as a request's would be; any other key is refused (SGLang fails the
// first request on it instead).
StatusOr<PreferredSampling> parse_preferred_sampling_params(std::string_view json,
                                                            const ProtocolOptions& options);

// A validated request: one GenerationRequest per choice (n > 1 → ids "<id>-<i>").
struct ParsedRequest {
    ApiKind kind = ApiKind::kChatCompletion;
    std::string id;     // response id: "chatcmpl-…", "cmpl-…", or the native rid
    std::string model;  // echoed in responses (the served name)
    std::int64_t created = 0;  // unix seconds
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    // The OpenAI routes' logprobs / top_logprobs, copied to every request's params.
    bool logprobs = false;
    int top_logprobs = 0;
    // A completion with echo and logprobs scores its prompt from 0; -1: no prompt scoring.
    // (/generate's log-probability fields are per input, in each request's params.)
    std::int64_t logprob_start_len = -1;
    bool return_text_in_logprobs = true;  // /generate's: its logprob entries carry token text
    bool echo = false;                    // completions: each choice's text starts with the prompt
    bool token_ids_only = false;  // --skip-tokenizer-init: /generate answers output_ids, no text
    bool incremental = false;     // --incremental-streaming-output: /generate chunks carry what is new
    // Chat with --reasoning-parser and the request's separate_reasoning (default true): how
    // each choice's output splits into reasoning_content and content.
    std::optional<ReasoningFormat> reasoning;
    bool force_reasoning = false;  // the output starts inside the reasoning
    bool stream_reasoning = true;  // the request's stream_reasoning
    // Chat with --tool-call-parser and tools (tool_choice not "none"): the functions a call
    // may name; empty when calls are not parsed.
    std::optional<ToolCallFormat> tool_calls;
    std::vector<std::string> tool_names;
    int earlier_tool_calls = 0;  // the tool_calls of the request's assistant messages
    // Embedding routes: the request's `dimensions` (the vectors' first entries, scaled to unit
    // length again) and OpenAI's encoding_format "base64" (little-endian f32 bytes).
    std::optional<std::int64_t> dimensions;
    bool base64 = false;
    // /encode or /generate was given a list of inputs: it answers a list, even of one.
    bool batched_input = false;
    // /v1/score: each item's label probabilities normalised over the labels.
    bool apply_softmax = false;
    std::vector<GenerationRequest> requests;
};

struct ParseOutcome {
    std::optional<ApiError> error;
    ParsedRequest request;
    bool ok() const { return !error.has_value(); }
};

// Validates `body` (raw bytes of the HTTP body) for the route `kind`. `id` is the response
// id to use (the server makes it unique); /generate uses "rid" from the body instead when
// given. Errors name the offending field in ApiError::param.
ParseOutcome parse_request(ApiKind kind, std::string_view body, const ProtocolOptions& options,
                           std::string id);

// /open_session's body (SGLang's OpenSessionReqInput: capacity_of_str_len required,
// session_id, streaming, timeout), or the error to answer.
struct OpenSessionOutcome {
    OpenSessionParams params;
    std::optional<ApiError> error;
};
OpenSessionOutcome parse_open_session(std::string_view body);
// /close_session's body: its session_id, or the error to answer.
std::variant<std::string, ApiError> parse_close_session(std::string_view body);

// /abort_request's body (io_struct.py AbortReq): rid ("" by default) and abort_all (false);
// SGLang's other fields (finished_reason, abort_message) are read past.
struct AbortSelection {
    std::string rid;
    bool all = false;
};
std::variant<AbortSelection, ApiError> parse_abort_request(std::string_view body);

// /pause_generation's body (io_struct.py PauseGenerationReqInput): mode, "abort" (the
// default), "retract" or "in_place". /continue_generation's torch_empty_cache is read past.
std::variant<Backend::PauseMode, ApiError> parse_pause_generation(std::string_view body);

// /update_weights_from_disk's body (io_struct.py UpdateWeightFromDiskReqInput): model_path
// (required), load_format (null: the launch's, left empty here), abort_all_requests (false),
// weight_version (null: unchanged) and flush_cache (true). SGLang's is_async, keep_pause,
// token_step and manifest (which it never reads) and torch_empty_cache and
// recapture_cuda_graph (GPU memory only) are checked for their type and read past.
struct WeightUpdateInput {
    Backend::WeightUpdate update;
    std::optional<std::string> weight_version;
};
std::variant<WeightUpdateInput, ApiError> parse_update_weights_from_disk(std::string_view body);

// /release_memory_occupation's and /resume_memory_occupation's body (io_struct.py
// ReleaseMemoryOccupationReqInput): tags, a list of "weights", "kv_cache" and "cuda_graph"
// (null, missing or empty: all of them, constants.py GPU_MEMORY_ALL_TYPES). An empty body is {}.
std::variant<Backend::MemoryRegions, ApiError> parse_memory_occupation(std::string_view body);

// /update_weight_version's body (io_struct.py UpdateWeightVersionReqInput): new_version
// (required) and abort_all_requests (true).
struct WeightVersionInput {
    std::string new_version;
    bool abort_all_requests = true;
};
std::variant<WeightVersionInput, ApiError> parse_update_weight_version(std::string_view body);

// /configure_logging's body (io_struct.py ConfigureLoggingReq): log_requests,
// log_requests_level (0-3), log_requests_format (text or json) and log_level; null or missing
// fields stay as they are. crash_dump_folder (launch only) and SGLang's request dumps
// (dump_requests_folder, dump_requests_threshold, dump_requests_exclude_meta_keys) are refused.
std::variant<Backend::LoggingChange, ApiError> parse_configure_logging(std::string_view body);

// SGLang's text-parsing routes (http_server.py separate_reasoning_request and
// parse_function_call_request): the parsers run on a text the client sends, no model; the
// answer body, or why not.
// /separate_reasoning: {text, reasoning_parser, return_blocks (false)} → {reasoning_text,
// text} (with return_blocks also reasoning_blocks, text_blocks and blocks).
std::variant<std::string, ApiError> separate_reasoning_answer(std::string_view body);
// /parse_function_call: {text, tools, tool_call_parser (the launch's --tool-call-parser when
// null)} → {normal_text, calls: [{tool_index, name, parameters}]}, tool_index the tool's place
// in `tools`. Without tools the text is all normal_text.
std::variant<std::string, ApiError> parse_function_call_answer(std::string_view body,
                                                                const std::optional<ToolCallFormat>& launch_format);

// /v1/tokenize's body (protocol.py TokenizeRequest): prompt, a string or a list of them (one
// answer each), and add_special_tokens (true); "model" is read past.
struct TokenizeInput {
    std::vector<std::string> prompts;
    bool batched = false;  // prompt was a list: tokens and count are lists too
    bool add_special_tokens = true;
};
std::variant<TokenizeInput, ApiError> parse_tokenize_request(std::string_view body);
// /v1/detokenize's body (DetokenizeRequest): tokens, a list of ids or a list of such lists,
// and skip_special_tokens (true).
struct DetokenizeInput {
    std::vector<std::vector<std::int32_t>> sequences;
    bool batched = false;
    bool skip_special_tokens = true;
};
std::variant<DetokenizeInput, ApiError> parse_detokenize_request(std::string_view body);

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid.
std::size_t find_invalid_utf8(std::string_view text);

// A fresh 32-hex-digit id (like SGLang's uuid4().hex).
std::string random_hex_id();

// Maps a backend finish reason to the OpenAI one ("stop", "length", "abort" pass through).
std::string openai_finish_reason(const std::string& backend_reason);

// Collects the events of the n choices of one request and renders what the client sees.
// Streaming: add_event() returns the SSE bytes ("data: {…}\n\n"…) to send now; after the
// last final event it also returns the usage chunk (when asked) and "data: [DONE]\n\n".
// Non-streaming: add_event() returns "" and body() / error() give the result once
// finished().
class ResponseBuilder {
 public:
    explicit ResponseBuilder(const ParsedRequest& request);

    std::string add_event(std::size_t index, const GenerationEvent& event);
    bool finished() const { return n_finished_ == choices_.size(); }
    // Non-streaming: the first error event seen, if any (answered instead of body()).
    const std::optional<ApiError>& error() const { return error_; }
    std::string body() const;

 private:
    struct Choice {
        std::string text;
        std::vector<std::int32_t> output_ids;
        // What the choice's request asked for: log-probabilities, how many best ones, and
        // token_ids_logprob's (a batched /generate may ask per input).
        bool wants_logprobs = false;
        int top_logprobs = 0;
        bool wants_token_ids_logprobs = false;
        std::vector<TokenLogprob> logprobs;
        std::optional<TokenLogprob> unsampled_logprobs;  // max_new_tokens 0: GenerationEvent's
        std::optional<std::vector<TokenLogprob>> input_logprobs;  // the prompt's, once they came
        std::optional<std::string> finish_reason;
        std::optional<std::string> matched_stop;
        Usage usage;
        bool finished = false;
        bool sent_role = false;            // chat streaming: the role delta went out
        std::size_t text_offset = 0;       // completions logprobs: offset of the next token
        std::chrono::steady_clock::time_point finished_at;
        std::optional<ReasoningDetector> reasoning;  // streaming chat with a reasoning parser
        std::optional<ToolCallDetector> tools;       // streaming chat with a tool-call parser
        int n_tool_calls = 0;                        // sent so far (streaming)
        std::vector<float> embedding;                // embedding routes
        std::vector<HiddenStates> hidden_states;     // return_hidden_states: meta_info's entries so far
        std::optional<std::vector<std::int32_t>> routed_experts;  // return_routed_experts, once finished
    };

    std::string stream_chunk(std::size_t index, const GenerationEvent& event);
    std::string embedding_body() const;  // kEmbedding and kEncode (embedding_protocol.cpp)
    std::string score_body() const;      // kScore (score_protocol.cpp)
    std::string stream_end() const;
    std::string usage_json_dump() const;

    ApiKind kind_;
    std::string id_;
    std::string model_;
    std::int64_t created_;
    bool stream_;
    bool include_usage_;
    bool text_in_logprobs_;
    bool echo_;
    HiddenStatesMode hidden_states_;
    bool token_ids_only_;
    bool incremental_;
    std::optional<std::int64_t> dimensions_;
    bool base64_;
    bool batched_input_;
    bool apply_softmax_;
    std::optional<ReasoningFormat> reasoning_;
    bool force_reasoning_;
    std::optional<ToolCallFormat> tool_calls_;
    std::vector<std::string> tool_names_;
    int earlier_tool_calls_;
    std::vector<std::string> request_ids_;
    std::chrono::steady_clock::time_point start_;
    std::vector<Choice> choices_;
    std::size_t n_finished_ = 0;
    std::optional<ApiError> error_;
};

}  // namespace tessera::server
