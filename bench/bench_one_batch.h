#pragma once
// bench/bench_one_batch.h — `tessera bench one-batch`: one static batch run in process,
// with no server and no scheduler (after SGLang's bench_one_batch): B sequences of I random
// prompt tokens are prefilled in one forward step, then decoded together for O - 1 more
// steps; reports prefill latency / throughput and per-step decode latency / throughput.
// Each sequence owns its slot range [b·(I+O), (b+1)·(I+O)) of one contiguous KV cache.
// Single-threaded caller; the model's compute runs on its own ThreadPool.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::bench {

struct OneBatchOptions {
    std::string model_path;
    std::string dtype = "auto";
    std::string quantization;  // --quantization
    std::string load_format = "auto";  // --load-format (dummy: random weights from config.json)
    int threads = 0;  // 0: every core this process may use
    int tp_size = 1;  // > 1 is not implemented for one-batch yet
    int pp_size = 1;  // > 1 is not implemented for one-batch yet
    int batch_size = 1;
    std::int64_t input_len = 1024;
    std::int64_t output_len = 16;
    std::uint64_t seed = 1;
    bool warmup = true;  // one untimed run of the same shape (at most 4 decode steps) first
    bool batch_invariant = false;  // --enable-deterministic-inference: the batch-invariant kernels

    Status validate() const;
};

struct OneBatchResult {
    int batch_size = 0;
    std::int64_t input_len = 0;
    std::int64_t output_len = 0;
    double prefill_latency_s = 0.0;
    double prefill_throughput_tok_s = 0.0;   // batch_size · input_len / prefill latency
    std::vector<double> decode_latencies_s;  // one per decode step (output_len - 1 steps)
    double median_decode_latency_s = 0.0;
    double decode_throughput_tok_s = 0.0;   // batch_size / median decode latency
    double total_latency_s = 0.0;           // prefill + every decode step
    double overall_throughput_tok_s = 0.0;  // batch_size · (input_len + output_len) / total
    std::string model;
    std::string dtype;  // compute dtype of the loaded weights
    std::string kernels;  // the ISA path, with " batch-invariant" under deterministic inference
    int threads = 0;
    double load_s = 0.0;
    double weight_mb = 0.0;
};

StatusOr<OneBatchResult> run_one_batch(const OneBatchOptions& options);

// One JSON object (no newline) with every field of `result`.
std::string one_batch_json_line(const OneBatchResult& result);

// Human-readable lines, as SGLang's bench_one_batch prints them.
std::string format_one_batch(const OneBatchResult& result);

}  // namespace tessera::bench
