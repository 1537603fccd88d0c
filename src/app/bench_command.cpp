// `tessera bench serve` (online serving benchmark against a running server) and
// `tessera bench one-batch` (one static batch in process): the flags, then bench/ does the work.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/logging.h"
#include "bench/bench_one_batch.h"
#include "bench/bench_serving.h"
#include "bench/prompt_generator.h"
#include "server/server_args.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

namespace {

struct ServeBenchFlags {
    std::string backend = "openai";
    std::string base_url;
    std::string host = "127.0.0.1";
    int port = 0;
    std::string model;       // the API's model name (default: from GET /v1/models)
    std::string model_path;  // a local model folder to read the tokenizer from
    std::string tokenizer;   // a tokenizer folder (wins over --model-path)
    std::string dataset = "random";
    int num_prompts = 1000;
    std::string request_rate = "inf";
    int max_concurrency = 0;
    std::int64_t random_input_len = 1024;
    std::int64_t random_output_len = 1024;
    double random_range_ratio = 0.0;
    std::uint64_t seed = 1;
    int warmup_requests = 1;
    std::string extra_request_body;
    std::string output_file;
    bool disable_ignore_eos = false;
    bool disable_progress = false;
    double request_timeout_s = 600.0;
};

struct OneBatchFlags {
    int batch_size = 1;
    std::int64_t input_len = 1024;
    std::int64_t output_len = 16;
    std::uint64_t seed = 1;
    bool no_warmup = false;
    std::string output_file;
};

int fail(const Status& s, int code = 1) {
    TSR_LOG(ERROR, "{}", s.message());
    return code;
}

void set_log_level(const std::string& level) {
    using logging::Level;
    if (level == "debug") logging::set_min_level(Level::kDebug);
    if (level == "info") logging::set_min_level(Level::kInfo);
    if (level == "warn" || level == "warning") logging::set_min_level(Level::kWarn);
    if (level == "error") logging::set_min_level(Level::kError);
}

Status append_line(const std::string& path, const std::string& line) {
    std::ofstream out(path, std::ios::app);
    if (!out) return Status::NotFound("cannot open --output-file '" + path + "' for appending");
    out << line << '\n';
    out.flush();
    if (!out) return Status::Internal("writing to --output-file '" + path + "' failed");
    return Status::Ok();
}

bool has_tokenizer(const std::string& dir) {
    std::error_code ec;
    return !dir.empty() && std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json", ec);
}

// --tokenizer, else --model-path, else the served model id when it names a local folder
// (SGLang serves a model under its path by default), else the tokenizer or model path the
// server reports in /get_server_info when it is a local folder (a server on this host). Null
// when none is found.
StatusOr<std::unique_ptr<tokenizer::Tokenizer>> find_tokenizer(const ServeBenchFlags& f, const std::string& served,
                                                               const std::vector<std::string>& server_paths) {
    std::string dir;
    if (!f.tokenizer.empty()) {
        dir = f.tokenizer;
    } else if (!f.model_path.empty()) {
        dir = f.model_path;
    } else if (has_tokenizer(served)) {
        dir = served;
        TSR_LOG(INFO, "tokenizer: the served model's folder {}", served);
    } else {
        for (const std::string& path : server_paths) {
            if (!has_tokenizer(path)) continue;
            dir = path;
            TSR_LOG(INFO, "tokenizer: {}, from the server's /get_server_info", path);
            break;
        }
        if (dir.empty()) return std::unique_ptr<tokenizer::Tokenizer>();
    }
    auto tok = tokenizer::Tokenizer::load(dir);
    if (!tok.ok())
        return Status::InvalidArgument("cannot load the tokenizer from '" + dir + "': " + tok.status().message());
    return std::move(tok).value();
}

int run_serve_bench(const ServeBenchFlags& f) {
    bench::BenchServeOptions o;
    auto backend = bench::parse_api_backend(f.backend);
    if (!backend.ok()) return fail(backend.status(), 2);
    o.request.backend = *backend;
    o.base_url = !f.base_url.empty() ? f.base_url : "http://" + f.host + ":" + std::to_string(f.port);
    if (f.base_url.empty() && f.port == 0)
        return fail(Status::InvalidArgument("give the server as --base-url http://HOST:PORT (or --host and --port)"),
                    2);
    auto endpoint = bench::parse_http_url(o.base_url);
    if (!endpoint.ok()) return fail(endpoint.status(), 2);
    o.request.endpoint = *endpoint;
    o.request.ignore_eos = !f.disable_ignore_eos;
    o.request.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(f.request_timeout_s * 1000.0));
    if (f.request_rate == "inf" || f.request_rate == "infinity") {
        o.request_rate = std::numeric_limits<double>::infinity();
    } else {
        char* end = nullptr;
        o.request_rate = std::strtod(f.request_rate.c_str(), &end);
        if (end == f.request_rate.c_str() || *end != '\0' || !(o.request_rate > 0.0))
            return fail(
                Status::InvalidArgument("--request-rate must be a positive number of requests/s or 'inf', got '" +
                                        f.request_rate + "'"),
                2);
    }
    if (!f.extra_request_body.empty()) {
        o.request.extra_body = nlohmann::json::parse(f.extra_request_body, nullptr, false);
        if (!o.request.extra_body.is_object())
            return fail(Status::InvalidArgument("--extra-request-body must be a JSON object, e.g. "
                                                "'{\"ignore_eos\": true}', got '" +
                                                f.extra_request_body + "'"),
                        2);
    }
    o.max_concurrency = f.max_concurrency;
    o.seed = f.seed;
    o.warmup_requests = f.warmup_requests;
    o.show_progress = !f.disable_progress;
    o.random_input_len = f.random_input_len;
    o.random_output_len = f.random_output_len;
    o.random_range_ratio = f.random_range_ratio;
    o.dataset = f.dataset;

    // The model name: --model, else what the server lists.
    std::string served;
    auto listed = bench::fetch_served_model(o.request.endpoint, std::chrono::milliseconds(30'000));
    if (listed.ok()) served = *listed;
    o.request.model = !f.model.empty() ? f.model : served;
    if (o.request.model.empty() && o.request.backend != bench::ApiBackend::kTesseraNative)
        TSR_LOG(WARN, "no model name ({}); requests go without \"model\" (pass --model NAME)",
                listed.ok() ? "empty id" : listed.status().message());

    std::vector<std::string> server_paths;
    if (f.tokenizer.empty() && f.model_path.empty() && !has_tokenizer(served)) {
        auto paths = bench::fetch_server_paths(o.request.endpoint, std::chrono::milliseconds(30'000));
        if (paths.ok()) server_paths = std::move(paths).value();
    }
    auto tok = find_tokenizer(f, served, server_paths);
    if (!tok.ok()) return fail(tok.status(), 2);

    std::vector<bench::BenchPrompt> prompts;
    if (f.dataset == "random") {
        if (!*tok)
            return fail(Status::InvalidArgument(
                            "the random dataset needs the served model's tokenizer to make prompts of exactly "
                            "--random-input-len tokens: pass --model-path DIR or --tokenizer DIR"),
                        2);
        bench::RandomDatasetOptions r{f.num_prompts, f.random_input_len, f.random_output_len, f.random_range_ratio,
                                      f.seed};
        auto made = bench::make_random_dataset(**tok, r);
        if (!made.ok()) return fail(made.status());
        prompts = std::move(made).value();
    } else if (f.dataset.rfind("jsonl:", 0) == 0) {
        auto loaded = bench::load_jsonl_dataset(f.dataset.substr(6), tok->get(), f.num_prompts, f.random_output_len);
        if (!loaded.ok()) return fail(loaded.status(), 2);
        prompts = std::move(loaded).value();
    } else {
        return fail(Status::InvalidArgument("unknown --dataset '" + f.dataset + "'; expected random or jsonl:FILE"), 2);
    }
    TSR_LOG(INFO, "bench serve: {} prompts to {} ({}), request rate {}, max concurrency {}", prompts.size(), o.base_url,
            bench::api_backend_name(o.request.backend), f.request_rate,
            f.max_concurrency > 0 ? std::to_string(f.max_concurrency) : "not set");

    auto result = bench::run_benchmark(o, prompts);
    if (!result.ok()) return fail(result.status());
    const bench::BenchServeMetrics& m = result->metrics;
    std::fputs(bench::format_summary(o, m).c_str(), stdout);
    std::fflush(stdout);
    if (!f.output_file.empty()) {
        Status s = append_line(f.output_file, bench::metrics_json_line(o, static_cast<int>(prompts.size()), m));
        if (!s.ok()) return fail(s);
    }
    return m.completed > 0 ? 0 : 1;
}

int run_one_batch_bench(const server::ServerArgs& args, const OneBatchFlags& f) {
    bench::OneBatchOptions o;
    o.model_path = args.model_path;
    o.dtype = args.dtype;
    o.quantization = args.quantization;
    o.load_format = args.load_format;
    o.threads = args.threads_per_rank;
    o.tp_size = args.tp_size;
    o.pp_size = args.pp_size;
    o.batch_size = f.batch_size;
    o.input_len = f.input_len;
    o.output_len = f.output_len;
    o.seed = f.seed;
    o.warmup = !f.no_warmup;
    o.batch_invariant = args.enable_deterministic_inference;
    auto r = bench::run_one_batch(o);
    if (!r.ok())
        return fail(r.status(),
                    r.status().code() == StatusCode::kInvalidArgument || r.status().code() == StatusCode::kUnimplemented
                        ? 2
                        : 1);
    std::fputs(bench::format_one_batch(*r).c_str(), stdout);
    const std::string line = bench::one_batch_json_line(*r);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (!f.output_file.empty()) {
        Status s = append_line(f.output_file, line);
        if (!s.ok()) return fail(s);
    }
    return 0;
}

}  // namespace

int run_bench(int argc, char** argv) {
    CLI::App app{"tessera bench: serving and batch benchmarks"};
    app.name("tessera bench");
    app.require_subcommand(1);
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "debug, info, warn or error")
        ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}));

    ServeBenchFlags sf;
    auto* serve =
        app.add_subcommand("serve",
                           "online benchmark of a running server (OpenAI-compatible or native): Poisson arrivals, "
                           "streaming requests, TTFT / ITL / TPOT / E2E latency and throughput");
    serve
        ->add_option("--backend", sf.backend,
                     "openai (/v1/completions), openai-chat (/v1/chat/completions) or "
                     "tessera-native (/generate)")
        ->check(CLI::IsMember(
            {"openai", "openai-chat", "tessera-native", "sglang", "sglang-oai", "sglang-oai-chat", "vllm"}))
        ->capture_default_str();
    serve->add_option("--base-url", sf.base_url, "the server, http://HOST:PORT");
    serve->add_option("--host", sf.host, "server host when --base-url is not given")->capture_default_str();
    serve->add_option("--port", sf.port, "server port when --base-url is not given");
    serve->add_option("--model", sf.model, "model name in requests (default: the first of GET /v1/models)");
    serve->add_option("--model-path", sf.model_path, "local model folder to read the tokenizer from");
    serve->add_option("--tokenizer", sf.tokenizer,
                      "tokenizer folder (default: --model-path, else the served model "
                      "id when it is a local folder)");
    serve
        ->add_option("--dataset", sf.dataset,
                     "random, or jsonl:FILE (one {\"prompt\": ..., \"output_len\": N} per "
                     "line)")
        ->capture_default_str();
    serve->add_option("--num-prompts", sf.num_prompts, "requests to send")
        ->check(CLI::Range(1, 1 << 24))
        ->capture_default_str();
    serve->add_option("--request-rate", sf.request_rate, "requests per second (Poisson arrivals), or inf: all at once")
        ->capture_default_str();
    serve->add_option("--max-concurrency", sf.max_concurrency, "most requests in flight at once (0: no cap)")
        ->check(CLI::Range(0, 1 << 20));
    serve->add_option("--random-input-len", sf.random_input_len, "prompt tokens (random dataset)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->capture_default_str();
    serve->add_option("--random-output-len", sf.random_output_len, "tokens to generate per request")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->capture_default_str();
    serve
        ->add_option("--random-range-ratio", sf.random_range_ratio,
                     "lengths drawn uniformly from [len x ratio, len]; 1 gives exact lengths")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    serve->add_option("--seed", sf.seed, "seed of the prompts and of the arrival times")->capture_default_str();
    serve->add_option("--warmup-requests", sf.warmup_requests, "untimed requests sent first")
        ->check(CLI::Range(0, 1 << 16))
        ->capture_default_str();
    serve->add_option("--extra-request-body", sf.extra_request_body,
                      "a JSON object merged into every request body, e.g. '{\"logit_bias\": {...}}'");
    serve->add_option("--output-file", sf.output_file, "append one JSON line with the run's config and metrics");
    serve->add_flag("--disable-ignore-eos", sf.disable_ignore_eos,
                    "do not send ignore_eos (output tokens are then counted from usage / the stream)");
    serve->add_flag("--disable-tqdm,--no-progress", sf.disable_progress, "no progress bar on stderr");
    serve->add_option("--request-timeout", sf.request_timeout_s, "seconds before a silent request fails")
        ->check(CLI::Range(0.001, 1e6))
        ->capture_default_str();

    OneBatchFlags of;
    server::ServerArgs one_args;
    auto* one = app.add_subcommand("one-batch",
                                   "one static batch in process: prefill latency and throughput, "
                                   "decode latency per step and throughput");
    server::FlagTable one_flags(*one, one_args, server::FlagTable::Mode::kGenerate);
    one->add_option("--batch-size", of.batch_size, "sequences in the batch")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    one->add_option("--input-len", of.input_len, "prompt tokens per sequence")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->capture_default_str();
    one->add_option("--output-len", of.output_len,
                    "tokens generated per sequence (1 prefill + output_len - 1 decode "
                    "steps)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
        ->capture_default_str();
    one->add_option("--seed", of.seed, "seed of the random prompt tokens")->capture_default_str();
    one->add_flag("--no-warmup", of.no_warmup, "skip the untimed warm-up run");
    one->add_option("--output-file,--result-filename", of.output_file, "append one JSON line with the results");

    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "one-batch") {
        auto read = one_flags.read_command_line({args.begin() + 1, args.end()});
        if (!read.ok()) return fail(read.status(), 2);
        args.resize(1);
        args.insert(args.end(), read.value().begin(), read.value().end());
    }
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    set_log_level(log_level);
    if (serve->parsed()) return run_serve_bench(sf);
    if (one->parsed()) {
        if (Status s = one_flags.resolve(); !s.ok()) return fail(s, 2);
        return run_one_batch_bench(one_args, of);
    }
    return 1;
}

}  // namespace tessera::app
