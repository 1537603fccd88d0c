#include "bench/bench_serving.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/env.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double seconds_since(Clock::time_point t0, Clock::time_point t) {
    return std::chrono::duration<double>(t - t0).count();
}

// Keys of `extra` overwrite those of `body`; a "sampling_params" object is merged one level.
void merge_extra(Json& body, const Json& extra) {
    if (!extra.is_object()) return;
    for (auto it = extra.begin(); it != extra.end(); ++it) {
        if (it.key() == "sampling_params" && it->is_object() && body.contains("sampling_params") &&
            body["sampling_params"].is_object()) {
            for (auto sp = it->begin(); sp != it->end(); ++sp) body["sampling_params"][sp.key()] = *sp;
        } else {
            body[it.key()] = *it;
        }
    }
}

std::string request_path(ApiBackend b) {
    switch (b) {
        case ApiBackend::kOpenAi:
            return "/v1/completions";
        case ApiBackend::kOpenAiChat:
            return "/v1/chat/completions";
        case ApiBackend::kTesseraNative:
            return "/generate";
    }
    return "/";
}

Json request_body(const RequestConfig& c, const BenchPrompt& p) {
    Json body = Json::object();
    if (c.backend == ApiBackend::kTesseraNative) {
        body["text"] = p.text;
        Json sp = {{"max_new_tokens", p.output_len}, {"temperature", 0.0}};
        if (c.ignore_eos) sp["ignore_eos"] = true;
        body["sampling_params"] = std::move(sp);
        body["stream"] = true;
    } else {
        if (!c.model.empty()) body["model"] = c.model;
        if (c.backend == ApiBackend::kOpenAi) {
            body["prompt"] = p.text;
        } else {
            body["messages"] = Json::array({Json{{"role", "user"}, {"content", p.text}}});
        }
        body["max_tokens"] = p.output_len;
        body["temperature"] = 0.0;
        body["stream"] = true;
        body["stream_options"] = Json{{"include_usage", true}};
        if (c.ignore_eos) body["ignore_eos"] = true;
    }
    merge_extra(body, c.extra_body);
    return body;
}

std::string error_text(const Json& j) {
    if (j.contains("error")) {
        const Json& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
        return e.dump();
    }
    return j.dump();
}

std::string clip(std::string s, std::size_t n = 300) {
    if (s.size() > n) s = s.substr(0, n) + "...";
    return s;
}

// Per-stream state while parsing the SSE chunks of one request.
struct StreamState {
    Clock::time_point sent;
    Clock::time_point last_token;
    bool got_token = false;
    bool done = false;          // [DONE] or a final native chunk
    std::int64_t n_chunks = 0;  // chunks that carried new tokens
    std::int64_t native_tokens = 0;
    std::size_t native_text_len = 0;
    std::optional<std::int64_t> usage_completion;
    std::optional<std::int64_t> usage_prompt;
    std::string error;
};

void on_token_chunk(StreamState& s, RequestResult& r, Clock::time_point now) {
    if (!s.got_token) {
        r.ttft_s = seconds_since(s.sent, now);
        s.got_token = true;
    } else {
        r.itl_s.push_back(seconds_since(s.last_token, now));
    }
    s.last_token = now;
    ++s.n_chunks;
}

// Handles one `data:` payload.
void on_event(ApiBackend backend, const std::string& data, StreamState& s, RequestResult& r, Clock::time_point now) {
    if (data == "[DONE]") {
        s.done = true;
        return;
    }
    const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        if (s.error.empty()) s.error = "unparsable stream chunk: " + clip(data, 120);
        return;
    }
    if (j.contains("error") && !j["error"].is_null()) {
        if (s.error.empty()) s.error = "error in stream: " + clip(error_text(j));
        return;
    }
    if (backend == ApiBackend::kTesseraNative) {
        const Json meta = j.value("meta_info", Json::object());
        const std::int64_t tokens = meta.value("completion_tokens", std::int64_t{-1});
        const std::size_t text_len =
            j.contains("text") && j["text"].is_string() ? j["text"].get_ref<const std::string&>().size() : 0;
        const bool progressed = tokens >= 0 ? tokens > s.native_tokens : text_len > s.native_text_len;
        if (progressed) on_token_chunk(s, r, now);
        if (tokens >= 0) {
            s.native_tokens = std::max(s.native_tokens, tokens);
            s.usage_completion = s.native_tokens;
        }
        if (meta.contains("prompt_tokens") && meta["prompt_tokens"].is_number_integer())
            s.usage_prompt = meta["prompt_tokens"].get<std::int64_t>();
        s.native_text_len = std::max(s.native_text_len, text_len);
        if (meta.contains("finish_reason") && !meta["finish_reason"].is_null()) s.done = true;
        return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
        const Json& u = j["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
            s.usage_completion = u["completion_tokens"].get<std::int64_t>();
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
            s.usage_prompt = u["prompt_tokens"].get<std::int64_t>();
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const Json& choice = j["choices"][0];
    std::string text;
    if (backend == ApiBackend::kOpenAi) {
        if (choice.contains("text") && choice["text"].is_string()) text = choice["text"].get<std::string>();
    } else if (choice.contains("delta") && choice["delta"].is_object()) {
        const Json& d = choice["delta"];
        for (const char* key : {"content", "reasoning_content"})
            if (d.contains(key) && d[key].is_string()) text += d[key].get<std::string>();
    }
    if (!text.empty()) on_token_chunk(s, r, now);
}

// Draws the progress bar on stderr: "[#####     ] 12/100 3.1s".
class ProgressBar {
 public:
    ProgressBar(int total, bool enabled, const char* label) : total_(total), enabled_(enabled), label_(label) {
        start_ = Clock::now();
        draw(0);
    }
    void tick() {
        std::lock_guard<std::mutex> lock(mu_);
        draw(++done_);
    }
    void finish() {
        if (enabled_ && total_ > 0) std::fputc('\n', stderr);
    }

 private:
    void draw(int done) {
        if (!enabled_ || total_ <= 0) return;
        constexpr int kWidth = 40;
        const int fill = done * kWidth / total_;
        const std::string bar = std::string(static_cast<std::size_t>(fill), '#') +
                                std::string(static_cast<std::size_t>(kWidth - fill), ' ');
        std::fprintf(stderr, "\r%s [%s] %d/%d %.1fs", label_, bar.c_str(), done, total_,
                     seconds_since(start_, Clock::now()));
        std::fflush(stderr);
    }
    std::mutex mu_;
    const int total_;
    const bool enabled_;
    const char* label_;
    int done_ = 0;  // GUARDED_BY(mu_)
    Clock::time_point start_;
};

// A counting semaphore whose limit may be "none" (0).
class ConcurrencyGate {
 public:
    explicit ConcurrencyGate(int limit) : limit_(limit) {}
    void acquire() {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return limit_ <= 0 || in_flight_ < limit_; });
        ++in_flight_;
        max_in_flight_ = std::max(max_in_flight_, in_flight_);
    }
    void release() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            --in_flight_;
        }
        cv_.notify_one();
    }
    int max_in_flight() {
        std::lock_guard<std::mutex> lock(mu_);
        return max_in_flight_;
    }

 private:
    std::mutex mu_;
    std::condition_variable cv_;
    const int limit_;
    int in_flight_ = 0;      // GUARDED_BY(mu_)
    int max_in_flight_ = 0;  // GUARDED_BY(mu_)
};

// Sends prompts[i] at run_start + offsets[i], at most `gate`'s limit at once; fills results.
void dispatch(const RequestConfig& config, const std::vector<BenchPrompt>& prompts, const std::vector<double>& offsets,
              ConcurrencyGate& gate, ProgressBar& progress, Clock::time_point run_start,
              std::vector<RequestResult>& results) {
    std::vector<std::thread> threads;
    threads.reserve(prompts.size());
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        std::this_thread::sleep_until(
            run_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offsets[i])));
        gate.acquire();
        threads.emplace_back([&, i] {
            results[i] = send_request(config, prompts[i], run_start);
            gate.release();
            progress.tick();
        });
    }
    for (auto& t : threads) t.join();
}

std::string rate_text(double rate) { return std::isinf(rate) ? "inf" : fmt::format("{:.2f}", rate); }

}  // namespace

StatusOr<ApiBackend> parse_api_backend(const std::string& name) {
    if (name == "openai" || name == "sglang-oai" || name == "vllm") return ApiBackend::kOpenAi;
    if (name == "openai-chat" || name == "sglang-oai-chat") return ApiBackend::kOpenAiChat;
    if (name == "tessera-native" || name == "sglang" || name == "sglang-native") return ApiBackend::kTesseraNative;
    return Status::InvalidArgument("unknown --backend '" + name + "'; expected openai, openai-chat or tessera-native");
}

const char* api_backend_name(ApiBackend backend) {
    switch (backend) {
        case ApiBackend::kOpenAi:
            return "openai";
        case ApiBackend::kOpenAiChat:
            return "openai-chat";
        case ApiBackend::kTesseraNative:
            return "tessera-native";
    }
    return "?";
}

// A server started with --api-key wants the key on every request (OPENAI_API_KEY).
void add_auth(HttpRequest& req) {
    if (!env().openai_api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + env().openai_api_key);
}

RequestResult send_request(const RequestConfig& config, const BenchPrompt& prompt, Clock::time_point run_start) {
    RequestResult r;
    r.prompt_len = prompt.prompt_len;
    HttpRequest req;
    req.method = "POST";
    req.path = request_path(config.backend);
    req.body = request_body(config, prompt).dump();
    req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
    add_auth(req);
    req.timeout = config.timeout;

    StreamState s;
    SseParser sse;
    std::string error_body;  // a non-2xx body
    HttpResponseHead head;   // http_call fills it before the first call of the sink
    s.sent = Clock::now();
    r.start_s = seconds_since(run_start, s.sent);
    Status st = http_call(config.endpoint, req, &head, [&](std::string_view bytes) {
        const Clock::time_point now = Clock::now();
        if (head.status < 200 || head.status >= 300) {
            if (error_body.size() < 4096) error_body.append(bytes);
            return true;
        }
        for (const std::string& data : sse.feed(bytes)) on_event(config.backend, data, s, r, now);
        return !s.done;
    });
    const Clock::time_point end = Clock::now();
    r.latency_s = seconds_since(s.sent, end);
    if (!st.ok()) {
        r.error = st.message();
        return r;
    }
    if (head.status < 200 || head.status >= 300) {
        r.error = "HTTP " + std::to_string(head.status) + ": " + clip(error_body);
        return r;
    }
    if (!s.error.empty()) {
        r.error = s.error;
        return r;
    }
    if (!s.got_token) {
        r.error = "the stream ended without any generated token";
        return r;
    }
    r.output_tokens = s.usage_completion.value_or(s.n_chunks);
    r.output_tokens_from_usage = s.usage_completion.has_value();
    if (s.usage_prompt) r.reported_prompt_tokens = *s.usage_prompt;
    r.success = true;
    return r;
}

std::vector<double> poisson_arrival_offsets(int n, double rate, std::uint64_t seed) {
    std::vector<double> offsets(static_cast<std::size_t>(std::max(0, n)), 0.0);
    if (std::isinf(rate) || rate <= 0.0) return offsets;
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(rate);
    double t = 0.0;
    for (double& o : offsets) {
        t += gap(rng);
        o = t;
    }
    return offsets;
}

BenchServeMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s) {
    BenchServeMetrics m;
    m.duration_s = duration_s;
    std::vector<double> ttft, tpot, itl, e2e;
    bool any_reported = false;
    for (const RequestResult& r : results) {
        if (!r.success) {
            ++m.failed;
            if (m.errors.size() < 5 && std::find(m.errors.begin(), m.errors.end(), r.error) == m.errors.end())
                m.errors.push_back(r.error);
            continue;
        }
        ++m.completed;
        const std::int64_t in = r.prompt_len > 0 ? r.prompt_len : std::max<std::int64_t>(0, r.reported_prompt_tokens);
        m.total_input_tokens += in;
        m.total_output_tokens += r.output_tokens;
        if (r.reported_prompt_tokens >= 0) {
            any_reported = true;
            m.total_input_tokens_reported += r.reported_prompt_tokens;
        }
        ttft.push_back(r.ttft_s * 1e3);
        e2e.push_back(r.latency_s * 1e3);
        if (r.output_tokens > 1)
            tpot.push_back((r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1) * 1e3);
        for (double g : r.itl_s) itl.push_back(g * 1e3);
    }
    if (!any_reported) m.total_input_tokens_reported = -1;
    if (duration_s > 0.0) {
        m.request_throughput = m.completed / duration_s;
        m.input_throughput = static_cast<double>(m.total_input_tokens) / duration_s;
        m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
        m.total_throughput = m.input_throughput + m.output_throughput;
        double sum_e2e = 0.0;
        for (double v : e2e) sum_e2e += v / 1e3;
        m.concurrency = sum_e2e / duration_s;
    }
    m.ttft_ms = summarize(std::move(ttft));
    m.tpot_ms = summarize(std::move(tpot));
    m.itl_ms = summarize(std::move(itl));
    m.e2e_latency_ms = summarize(std::move(e2e));
    return m;
}

StatusOr<BenchServeResult> run_benchmark(const BenchServeOptions& options, const std::vector<BenchPrompt>& prompts) {
    if (prompts.empty()) return Status::InvalidArgument("no prompts to send (--num-prompts must be >= 1)");
    if (options.warmup_requests > 0) {
        const int n = options.warmup_requests;
        std::vector<BenchPrompt> warm(static_cast<std::size_t>(n), prompts.front());
        std::vector<RequestResult> results(warm.size());
        ConcurrencyGate gate(options.max_concurrency);
        ProgressBar progress(n, false, "warmup");
        dispatch(options.request, warm, std::vector<double>(warm.size(), 0.0), gate, progress, Clock::now(), results);
        const auto ok = std::count_if(results.begin(), results.end(), [](const RequestResult& r) { return r.success; });
        if (ok == 0)
            return Status(StatusCode::kUnavailable,
                          "every warm-up request to " + options.base_url + " failed; first error: " + results[0].error);
    }

    BenchServeResult out;
    out.requests.resize(prompts.size());
    const std::vector<double> offsets =
        poisson_arrival_offsets(static_cast<int>(prompts.size()), options.request_rate, options.seed);
    ConcurrencyGate gate(options.max_concurrency);
    ProgressBar progress(static_cast<int>(prompts.size()), options.show_progress, "bench serve");
    const Clock::time_point start = Clock::now();
    dispatch(options.request, prompts, offsets, gate, progress, start, out.requests);
    const double duration = seconds_since(start, Clock::now());
    progress.finish();
    out.metrics = compute_metrics(out.requests, duration);
    out.metrics.max_in_flight = gate.max_in_flight();
    return out;
}

namespace {

// GET `path` with the bench's auth; the body of a 200, else Unavailable naming the status.
StatusOr<std::string> get_ok(const HttpEndpoint& endpoint, const std::string& path, std::chrono::milliseconds timeout) {
    HttpRequest req;
    req.path = path;
    add_auth(req);
    req.timeout = timeout;
    TSR_ASSIGN_OR_RETURN(HttpResponse resp, http_fetch(endpoint, req));
    if (resp.status != 200)
        return Status(StatusCode::kUnavailable,
                      "GET " + path + " answered HTTP " + std::to_string(resp.status) + ": " + clip(resp.body));
    return std::move(resp.body);
}

}  // namespace

StatusOr<std::string> fetch_served_model(const HttpEndpoint& endpoint, std::chrono::milliseconds timeout) {
    TSR_ASSIGN_OR_RETURN(std::string body, get_ok(endpoint, "/v1/models", timeout));
    const Json j = Json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string())
        return j["data"][0]["id"].get<std::string>();
    return Status::DataLoss("GET /v1/models: no model id in '" + clip(body) + "'; pass --model NAME");
}

StatusOr<std::vector<std::string>> fetch_server_paths(const HttpEndpoint& endpoint, std::chrono::milliseconds timeout) {
    TSR_ASSIGN_OR_RETURN(std::string body, get_ok(endpoint, "/get_server_info", timeout));
    const Json j = Json::parse(body, nullptr, false);
    std::vector<std::string> paths;
    for (const char* key : {"tokenizer_path", "model_path"})
        if (j.is_object() && j.contains(key) && j[key].is_string()) paths.push_back(j[key].get<std::string>());
    return paths;
}

std::string metrics_json_line(const BenchServeOptions& o, int num_prompts, const BenchServeMetrics& m) {
    nlohmann::ordered_json j;
    j["backend"] = api_backend_name(o.request.backend);
    j["base_url"] = o.base_url;
    j["model"] = o.request.model;
    j["dataset"] = o.dataset;
    j["num_prompts"] = num_prompts;
    if (std::isinf(o.request_rate)) {
        j["request_rate"] = "inf";
    } else {
        j["request_rate"] = o.request_rate;
    }
    j["max_concurrency"] = o.max_concurrency > 0 ? nlohmann::ordered_json(o.max_concurrency) : nlohmann::ordered_json();
    j["random_input_len"] = o.random_input_len;
    j["random_output_len"] = o.random_output_len;
    j["random_range_ratio"] = o.random_range_ratio;
    j["seed"] = o.seed;
    j["warmup_requests"] = o.warmup_requests;
    j["extra_request_body"] = o.request.extra_body;
    j["completed"] = m.completed;
    j["failed"] = m.failed;
    j["errors"] = m.errors;
    j["duration_s"] = m.duration_s;
    j["request_throughput"] = m.request_throughput;
    j["input_throughput"] = m.input_throughput;
    j["output_throughput"] = m.output_throughput;
    j["total_throughput"] = m.total_throughput;
    j["total_input_tokens"] = m.total_input_tokens;
    j["total_output_tokens"] = m.total_output_tokens;
    j["total_input_tokens_reported"] = m.total_input_tokens_reported;
    j["concurrency"] = m.concurrency;
    j["max_in_flight"] = m.max_in_flight;
    auto put = [&](const char* name, const LatencySummary& s) {
        j[fmt::format("mean_{}", name)] = s.mean;
        j[fmt::format("median_{}", name)] = s.median;
        j[fmt::format("p90_{}", name)] = s.p90;
        j[fmt::format("p99_{}", name)] = s.p99;
        j[fmt::format("max_{}", name)] = s.max;
        j[fmt::format("std_{}", name)] = s.std;
    };
    put("ttft_ms", m.ttft_ms);
    put("tpot_ms", m.tpot_ms);
    put("itl_ms", m.itl_ms);
    put("e2e_latency_ms", m.e2e_latency_ms);
    return j.dump();
}

std::string format_summary(const BenchServeOptions& o, const BenchServeMetrics& m) {
    std::string s;
    auto title = [&](const char* t) { s += fmt::format("{:-^50}\n", t); };
    auto row = [&](const char* label, const std::string& value) { s += fmt::format("{:<40} {:<10}\n", label, value); };
    auto num = [](double v) { return fmt::format("{:.2f}", v); };
    s += fmt::format("{:=^50}\n", " Serving Benchmark Result ");
    row("Backend:", api_backend_name(o.request.backend));
    row("Traffic request rate:", rate_text(o.request_rate));
    row("Max request concurrency:", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "not set");
    row("Successful requests:", std::to_string(m.completed));
    row("Failed requests:", std::to_string(m.failed));
    row("Benchmark duration (s):", num(m.duration_s));
    row("Total input tokens:", std::to_string(m.total_input_tokens));
    row("Total generated tokens:", std::to_string(m.total_output_tokens));
    row("Request throughput (req/s):", num(m.request_throughput));
    row("Input token throughput (tok/s):", num(m.input_throughput));
    row("Output token throughput (tok/s):", num(m.output_throughput));
    row("Total token throughput (tok/s):", num(m.total_throughput));
    row("Concurrency:", num(m.concurrency));
    auto block = [&](const char* heading, const char* name, const LatencySummary& l) {
        title(heading);
        row(fmt::format("Mean {} (ms):", name).c_str(), num(l.mean));
        row(fmt::format("Median {} (ms):", name).c_str(), num(l.median));
        row(fmt::format("P90 {} (ms):", name).c_str(), num(l.p90));
        row(fmt::format("P99 {} (ms):", name).c_str(), num(l.p99));
    };
    block("End-to-End Latency", "E2E Latency", m.e2e_latency_ms);
    block("Time to First Token", "TTFT", m.ttft_ms);
    block("Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
    block("Inter-Token Latency", "ITL", m.itl_ms);
    if (!m.errors.empty()) {
        title("Errors");
        for (const std::string& e : m.errors) s += "  " + e + "\n";
    }
    s += std::string(50, '=') + "\n";
    return s;
}

}  // namespace tessera::bench
