#pragma once
// bench/bench_serving.h — `tessera bench serve`: an online serving benchmark against any
// OpenAI-compatible server (or tessera's / SGLang's native /generate), after SGLang's
// bench_serving: requests arrive as a Poisson process at --request-rate (or all at once),
// at most --max-concurrency are in flight, each streams its tokens; per request TTFT, ITL,
// TPOT and end-to-end latency; a summary of throughput and latency percentiles.
// run_benchmark() is called from one thread; it starts one thread per in-flight request
// and joins them all before returning. send_request() is reentrant.

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/latency_stats.h"
#include "bench/prompt_generator.h"
#include "net/http_client.h"

namespace tessera::bench {

using net::BodySink;
using net::ChunkedDecoder;
using net::http_call;
using net::http_fetch;
using net::HttpEndpoint;
using net::HttpRequest;
using net::HttpResponse;
using net::HttpResponseHead;
using net::parse_http_url;
using net::SseParser;

enum class ApiBackend {
    kOpenAi,         // POST /v1/completions, "prompt"
    kOpenAiChat,     // POST /v1/chat/completions, one user message
    kTesseraNative,  // POST /generate, "text" + "sampling_params" (SGLang's native API)
};

StatusOr<ApiBackend> parse_api_backend(const std::string& name);
const char* api_backend_name(ApiBackend backend);

// What every request of a run shares.
struct RequestConfig {
    ApiBackend backend = ApiBackend::kOpenAi;
    HttpEndpoint endpoint;
    std::string model;       // the "model" field ("" leaves it out)
    bool ignore_eos = true;  // ask the server to generate exactly output_len tokens
    // Merged into every request body (its keys win); for the native backend a
    // "sampling_params" object is merged into the request's sampling_params.
    nlohmann::json extra_body = nlohmann::json::object();
    std::chrono::milliseconds timeout{600'000};
};

// One request as the client saw it. Times in seconds.
struct RequestResult {
    bool success = false;
    std::string error;                         // when !success
    double start_s = 0.0;                      // send time, from the start of the run
    double ttft_s = 0.0;                       // send → first token
    double latency_s = 0.0;                    // send → end of the stream
    std::vector<double> itl_s;                 // gaps between consecutive token chunks
    std::int64_t prompt_len = 0;               // the dataset's count (tokenizer) of the prompt
    std::int64_t output_tokens = 0;            // from usage / meta_info when sent, else chunks counted
    std::int64_t reported_prompt_tokens = -1;  // usage.prompt_tokens (-1: not reported)
    bool output_tokens_from_usage = false;
};

// Sends one streaming request and times it. Never throws; failures are in the result.
// `run_start`: the time origin of start_s.
RequestResult send_request(const RequestConfig& config, const BenchPrompt& prompt,
                           std::chrono::steady_clock::time_point run_start);

// Arrival offsets in seconds from the start of the run: exponential gaps of mean 1/rate
// drawn from `seed` (the first request also waits one gap, as SGLang); all 0 when rate is
// infinite.
std::vector<double> poisson_arrival_offsets(int n, double rate, std::uint64_t seed);

struct BenchServeOptions {
    RequestConfig request;
    std::string base_url;                                           // as given (reported)
    std::string dataset = "random";                                 // reported
    double request_rate = std::numeric_limits<double>::infinity();  // requests/s
    int max_concurrency = 0;                                        // 0: no cap
    std::uint64_t seed = 1;
    int warmup_requests = 1;    // sent (and awaited) before the timed run, not counted
    bool show_progress = true;  // a progress bar on stderr
    // Only reported in the JSON line (the prompts are made by the caller).
    std::int64_t random_input_len = 0;
    std::int64_t random_output_len = 0;
    double random_range_ratio = 0.0;
};

struct BenchServeMetrics {
    int completed = 0;
    int failed = 0;
    std::vector<std::string> errors;  // the first few distinct failure messages
    double duration_s = 0.0;
    std::int64_t total_input_tokens = 0;           // of completed requests (dataset counts)
    std::int64_t total_output_tokens = 0;          // of completed requests
    std::int64_t total_input_tokens_reported = 0;  // Σ usage.prompt_tokens (-1 when none reported)
    double request_throughput = 0.0;               // completed / duration
    double input_throughput = 0.0;                 // tok/s
    double output_throughput = 0.0;                // tok/s
    double total_throughput = 0.0;                 // (input + output) tok/s
    double concurrency = 0.0;                      // Σ e2e latency / duration: mean requests in flight
    int max_in_flight = 0;                         // the most requests in flight at once (client side)
    LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_latency_ms;
};

struct BenchServeResult {
    BenchServeMetrics metrics;
    std::vector<RequestResult> requests;  // in prompt order
};

// Aggregates per-request results over a run of `duration_s` seconds.
BenchServeMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s);

// Runs the warm-up, then the timed run over `prompts`. Fails only when every warm-up
// request fails (the server is unusable); failed timed requests are counted instead.
StatusOr<BenchServeResult> run_benchmark(const BenchServeOptions& options, const std::vector<BenchPrompt>& prompts);

// The model id the server lists first under GET /v1/models.
StatusOr<std::string> fetch_served_model(const HttpEndpoint& endpoint, std::chrono::milliseconds timeout);
// The tokenizer_path and model_path GET /get_server_info reports (SGLang and tessera both do),
// in that order, those present: where a benchmark on the same host finds the tokenizer.
StatusOr<std::vector<std::string>> fetch_server_paths(const HttpEndpoint& endpoint, std::chrono::milliseconds timeout);

// One JSON object (no newline) with the run's config and metrics: the line appended to
// --output-file. request_rate is "inf" for an unlimited rate; max_concurrency null when unset.
std::string metrics_json_line(const BenchServeOptions& options, int num_prompts, const BenchServeMetrics& metrics);

// The human-readable summary (SGLang's layout).
std::string format_summary(const BenchServeOptions& options, const BenchServeMetrics& metrics);

}  // namespace tessera::bench
