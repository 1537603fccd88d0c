#pragma once
// scheduler/dynamic_chunking.h — dynamic chunk sizes for chunked prefill under pipeline
// parallelism (reference §7, SGLang's ChunkSizePredictor). Later chunks of a long prompt
// attend over a longer prefix and take longer, which leaves bubbles between pipeline stages;
// dynamic chunking shrinks each chunk so that every chunk costs about as much as the first.
//   1. profile: time single prefills of profile_lengths(C) tokens on stage 0 (the caller);
//   2. fit:     T(l) = a l² + b l + c  [ms] by least squares (fit_prefill_cost);
//   3. predict: for a request with `history_len` tokens already prefilled, the chunk x with
//               T(L + x) − T(L) = T(C) − T(0), smoothed, floored, aligned and clamped
//               (ChunkSizePredictor::next_chunk).
// Pure values and functions, no I/O; thread-safe (ChunkSizePredictor is immutable).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::scheduler {

// One profiling measurement: a fresh prefill of `len` tokens took `ms` milliseconds.
struct PrefillSample {
    int64_t len = 0;
    double ms = 0.0;
};

// T(l) = a l² + b l + c in milliseconds, l in tokens.
struct QuadraticFit {
    double a = 0.0;
    double b = 0.0;
    double c = 0.0;
    // Non-empty when the fit was adjusted (b < 0 clamped to 0); the caller logs it.
    std::string warning;

    // a·l·l + b·l + c, rounded step by step as SGLang's f(l) (defined in the .cpp, which is
    // compiled without FMA contraction).
    double operator()(double l) const;
};

// The prompt lengths profiled at start-up for initial chunk size C
// (--chunked-prefill-size): len_i = int(1.25 C − i · floor(1.25 C / 128)), i = 0..127,
// stopping before the first len <= 0. Empty for C <= 0.
std::vector<int> profile_lengths(int chunked_prefill_size);

// Least-squares fit of T(l) over `samples` (in profiling order). The first sample is dropped
// as warm-up; at least 8 must remain, with at least 3 distinct lengths. a <= 0 is an error
// (InvalidArgument, SGLang's message); b < 0 is clamped to 0 and reported in `warning`.
StatusOr<QuadraticFit> fit_prefill_cost(std::span<const PrefillSample> samples);

constexpr double kDefaultDynamicChunkingSmoothFactor = 0.75;  // env: SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR

// Parses env().dynamic_chunking_smooth_factor: nullopt → 0.75; otherwise a number in [0, 1],
// else InvalidArgument naming the variable and its value.
StatusOr<double> parse_dynamic_chunking_smooth_factor(const std::optional<std::string>& value);

struct ChunkSizePredictorConfig {
    int64_t initial_chunk_size = 0;  // C: --chunked-prefill-size; also sets the target cost
    // 0: always C (no adaptation); 1: follow the fitted model exactly.
    double smooth_factor = kDefaultDynamicChunkingSmoothFactor;
    int page_size = 1;               // chunks are multiples of max(page_size, 64)
    int64_t context_len = 0;         // model context length; a chunk leaves 100 tokens of room
    int64_t max_prefill_tokens = 0;  // --max-prefill-tokens: upper bound of one chunk

    Status validate() const;
};

class ChunkSizePredictor {
 public:
    // Validates `config`, requires fit.a > 0 and target = T(C) − T(0) > 0.
    static StatusOr<ChunkSizePredictor> create(const QuadraticFit& fit,
                                               const ChunkSizePredictorConfig& config);

    // The chunk size for a request whose first `history_len` tokens are already prefilled
    // (0 for a fresh request). nullopt: no usable prediction (no positive root, or the
    // clamps leave less than one alignment unit) — the caller falls back to the fixed C.
    std::optional<int64_t> next_chunk(int64_t history_len) const;

    const QuadraticFit& fit() const { return fit_; }
    const ChunkSizePredictorConfig& config() const { return config_; }
    double target_ms() const { return target_ms_; }  // T(C) − T(0)
    int64_t alignment() const;                       // max(page_size, 64)

 private:
    ChunkSizePredictor(const QuadraticFit& fit, const ChunkSizePredictorConfig& config, double target_ms)
        : fit_(fit), config_(config), target_ms_(target_ms) {}

    QuadraticFit fit_;
    ChunkSizePredictorConfig config_;
    double target_ms_;
};

}  // namespace tessera::scheduler
