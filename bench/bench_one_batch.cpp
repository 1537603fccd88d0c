#include "bench/bench_one_batch.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "bench/latency_stats.h"
#include "executor/model_runner.h"
#include "kernels/batch_invariance.h"
#include "kernels/isa.h"
#include "kvcache/kv_cache.h"
#include "models/model.h"
#include "tensor/dtype.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct RunTimes {
    double prefill_s = 0.0;
    std::vector<double> decode_s;
};

// One prefill step over the whole batch, then `n_decode` decode steps; greedy, and the
// sampled token is fed back whatever it is (the run never stops early at an EOS). The warm-up
// and the timed run share `cache`, as SGLang's bench_one_batch.py reuses its model runner's
// pool: the timed prefill then writes KV pages already touched, as a serving rank does, and
// does not count the kernel zeroing them on first touch.
StatusOr<RunTimes> run_batch(models::Model& model, ThreadPool& pool, kvcache::KvCache& cache,
                             const OneBatchOptions& o, std::int64_t n_decode, std::uint64_t seed) {
    const std::int64_t rows_per_seq = o.input_len + o.output_len;
    executor::ModelRunner runner(model, cache.view(), &pool);
    const std::int64_t vocab = model.config().vocab_size;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));

    executor::ForwardBatch batch;
    for (int b = 0; b < o.batch_size; ++b) {
        executor::ForwardSequence seq;
        seq.rid = "one-batch-" + std::to_string(b);
        for (std::int64_t i = 0; i < o.input_len; ++i) seq.tokens.push_back(token(rng));
        for (std::int64_t i = 0; i < o.input_len; ++i)
            seq.slots.push_back(static_cast<std::int32_t>(b * rows_per_seq + i));
        seq.start_pos = 0;
        seq.need_token = true;
        batch.seqs.push_back(std::move(seq));
    }
    RunTimes times;
    auto t0 = Clock::now();
    TSR_ASSIGN_OR_RETURN(std::vector<executor::SampledToken> next, runner.run(batch));
    times.prefill_s = since(t0);
    for (std::int64_t step = 0; step < n_decode; ++step) {
        for (int b = 0; b < o.batch_size; ++b) {
            executor::ForwardSequence& seq = batch.seqs[static_cast<std::size_t>(b)];
            seq.start_pos += static_cast<std::int64_t>(seq.tokens.size());
            seq.output_ids.push_back(next[static_cast<std::size_t>(b)].token);
            seq.tokens.assign(1, next[static_cast<std::size_t>(b)].token);
            seq.slots.push_back(static_cast<std::int32_t>(b * rows_per_seq + seq.start_pos));
        }
        t0 = Clock::now();
        TSR_ASSIGN_OR_RETURN(next, runner.run(batch));
        times.decode_s.push_back(since(t0));
    }
    return times;
}

}  // namespace

Status OneBatchOptions::validate() const {
    if (model_path.empty()) return Status::InvalidArgument("--model-path is required");
    if (tp_size > 1)
        return Status::Unimplemented("bench one-batch does not support tensor parallelism yet (--tp " +
                                     std::to_string(tp_size) +
                                     "); run it with --tp 1, or measure a TP setup "
                                     "with `tessera serve --tp N` and `tessera bench serve`");
    if (pp_size > 1)
        return Status::Unimplemented("bench one-batch does not support pipeline parallelism yet (--pp-size " +
                                     std::to_string(pp_size) +
                                     "); measure a PP setup with `tessera generate --pp-size N --json` (ttft_s) "
                                     "or `tessera serve --pp-size N` and `tessera bench serve`");
    if (batch_size < 1) return Status::InvalidArgument("--batch-size must be >= 1, got " + std::to_string(batch_size));
    if (input_len < 1) return Status::InvalidArgument("--input-len must be >= 1, got " + std::to_string(input_len));
    if (output_len < 1) return Status::InvalidArgument("--output-len must be >= 1, got " + std::to_string(output_len));
    const std::int64_t rows = static_cast<std::int64_t>(batch_size) * (input_len + output_len);
    if (rows >= (std::int64_t{1} << 31))
        return Status::InvalidArgument("batch_size x (input_len + output_len) = " + std::to_string(rows) +
                                       " KV rows exceeds the 2^31 slot limit");
    return Status::Ok();
}

StatusOr<OneBatchResult> run_one_batch(const OneBatchOptions& o) {
    TSR_RETURN_IF_ERROR(o.validate());
    kernels::set_batch_invariant(o.batch_invariant);
    const auto t_load = Clock::now();
    models::LoadOptions load;
    load.model_path = o.model_path;
    load.dtype = o.dtype;
    load.quantization = o.quantization;
    load.load_format = o.load_format;
    TSR_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model, models::load_model(load));
    const std::int64_t max_len = model->config().max_position_embeddings;
    if (max_len > 0 && o.input_len + o.output_len > max_len)
        return Status::InvalidArgument("input_len + output_len = " + std::to_string(o.input_len + o.output_len) +
                                       " exceeds the model's max_position_embeddings (" + std::to_string(max_len) +
                                       ")");
    OneBatchResult r;
    r.load_s = since(t_load);
    r.threads = o.threads > 0 ? o.threads : default_thread_count();
    ThreadPool pool(r.threads);
    r.model = o.model_path;
    r.dtype = std::string(dtype_name(model->compute_dtype()));
    r.kernels = std::string(kernels::isa_name(kernels::active_isa())) + (o.batch_invariant ? " batch-invariant" : "");
    r.weight_mb = static_cast<double>(model->weight_bytes()) / 1e6;
    r.batch_size = o.batch_size;
    r.input_len = o.input_len;
    r.output_len = o.output_len;
    const double kv_mb = static_cast<double>(model->kv_cache_shape().bytes_per_token()) *
                         static_cast<double>(o.batch_size * (o.input_len + o.output_len)) / 1e6;
    TSR_LOG(INFO, "bench one-batch: {} ({} weights, {:.1f} MB), {} threads, {} kernels; KV cache {:.1f} MB",
            o.model_path, r.dtype, r.weight_mb, r.threads, r.kernels, kv_mb);

    kvcache::KvCache cache(model->kv_cache_shape(), o.batch_size * (o.input_len + o.output_len));
    if (o.warmup) {
        TSR_LOG(INFO, "warmup run");
        const std::int64_t warm_steps = std::min<std::int64_t>(o.output_len - 1, 4);
        TSR_ASSIGN_OR_RETURN(RunTimes warm, run_batch(*model, pool, cache, o, warm_steps, o.seed + 1));
        (void)warm;
    }
    TSR_ASSIGN_OR_RETURN(RunTimes t, run_batch(*model, pool, cache, o, o.output_len - 1, o.seed));
    const double batch = static_cast<double>(o.batch_size);
    r.prefill_latency_s = t.prefill_s;
    r.prefill_throughput_tok_s = t.prefill_s > 0 ? batch * static_cast<double>(o.input_len) / t.prefill_s : 0.0;
    r.decode_latencies_s = t.decode_s;
    r.total_latency_s = t.prefill_s;
    for (double d : t.decode_s) r.total_latency_s += d;
    if (!t.decode_s.empty()) {
        r.median_decode_latency_s = summarize(t.decode_s).median;
        r.decode_throughput_tok_s = r.median_decode_latency_s > 0 ? batch / r.median_decode_latency_s : 0.0;
    }
    r.overall_throughput_tok_s =
        r.total_latency_s > 0 ? batch * static_cast<double>(o.input_len + o.output_len) / r.total_latency_s : 0.0;
    return r;
}

std::string one_batch_json_line(const OneBatchResult& r) {
    nlohmann::ordered_json j;
    j["model"] = r.model;
    j["dtype"] = r.dtype;
    j["kernels"] = r.kernels;
    j["threads"] = r.threads;
    j["batch_size"] = r.batch_size;
    j["input_len"] = r.input_len;
    j["output_len"] = r.output_len;
    j["prefill_latency_s"] = r.prefill_latency_s;
    j["prefill_throughput_tok_s"] = r.prefill_throughput_tok_s;
    j["median_decode_latency_s"] = r.median_decode_latency_s;
    j["decode_throughput_tok_s"] = r.decode_throughput_tok_s;
    j["total_latency_s"] = r.total_latency_s;
    j["overall_throughput_tok_s"] = r.overall_throughput_tok_s;
    j["decode_steps"] = r.decode_latencies_s.size();
    j["load_s"] = r.load_s;
    j["weight_mb"] = r.weight_mb;
    return j.dump();
}

std::string format_one_batch(const OneBatchResult& r) {
    std::string s;
    s += fmt::format("Benchmark one batch: batch_size={} input_len={} output_len={} ({}, {} threads, {})\n",
                     r.batch_size, r.input_len, r.output_len, r.dtype, r.threads, r.kernels);
    s += fmt::format("Prefill. latency: {:.5f} s, throughput: {:9.2f} token/s\n", r.prefill_latency_s,
                     r.prefill_throughput_tok_s);
    if (!r.decode_latencies_s.empty()) {
        s += fmt::format("Decode.  median latency: {:.5f} s, median throughput: {:9.2f} token/s\n",
                         r.median_decode_latency_s, r.decode_throughput_tok_s);
    } else {
        s += "Decode.  (output_len 1: no decode step)\n";
    }
    s += fmt::format("Total. latency: {:.3f} s, throughput: {:9.2f} token/s\n", r.total_latency_s,
                     r.overall_throughput_tok_s);
    return s;
}

}  // namespace tessera::bench
