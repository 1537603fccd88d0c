#pragma once
// executor/generator.h — offline generation for one sequence: prefill the prompt, then
// decode token by token with the model's KV cache, timing each phase. The serving
// scheduler replaces this loop for batched requests; this one stays the simplest correct
// path (tests, `tessera generate`, benchmarks). One thread drives it.

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "kernels/sampling.h"
#include "models/model.h"

namespace tessera::executor {

struct GenerateOptions {
    std::int64_t max_new_tokens = 16;
    kernels::SamplingParams sampling;
    bool ignore_eos = false;
    bool capture_logits = false;  // keep every logits row (prompt rows and decode rows)
};

struct GenerateResult {
    std::vector<std::int32_t> output_ids;
    std::string finish_reason;  // "length" or "stop"
    double ttft_s = 0;          // prefill including the first token's sampling
    double prefill_s = 0;
    double decode_s = 0;        // all decode steps
    // f32 [prompt_len + output_ids.size() - 1, vocab] when capture_logits: row i predicts the
    // token after position i.
    std::vector<float> logits;
};

// `on_token` (optional) sees each token as it is produced.
StatusOr<GenerateResult> generate(models::Model& model, const std::vector<std::int32_t>& prompt,
                                  const GenerateOptions& options, ThreadPool* pool,
                                  const std::function<void(std::int32_t)>& on_token = {});

}  // namespace tessera::executor
