#include "executor/generator.h"

#include <algorithm>
#include <chrono>

namespace tessera::executor {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

StatusOr<GenerateResult> generate(models::Model& model, const std::vector<std::int32_t>& prompt,
                                  const GenerateOptions& options, ThreadPool* pool,
                                  const std::function<void(std::int32_t)>& on_token) {
    const auto& config = model.config();
    const auto prompt_len = static_cast<std::int64_t>(prompt.size());
    if (prompt_len == 0) return Status::InvalidArgument("the prompt is empty");
    if (options.max_new_tokens < 1)
        return Status::InvalidArgument("max_new_tokens must be at least 1");
    const std::int64_t total = prompt_len + options.max_new_tokens;
    if (total > config.max_position_embeddings) {
        return Status::InvalidArgument(
            "prompt (" + std::to_string(prompt_len) + " tokens) + max_new_tokens (" +
            std::to_string(options.max_new_tokens) + ") exceeds the model's context length of " +
            std::to_string(config.max_position_embeddings) + " tokens");
    }
    kvcache::KvCache cache(model.kv_cache_shape(), total);
    kernels::Rng rng(options.sampling.seed);
    std::vector<std::pair<float, std::int32_t>> scratch;
    std::vector<float> logits;
    GenerateResult result;
    result.finish_reason = "length";
    const std::int64_t vocab = config.vocab_size;
    auto is_eos = [&](std::int32_t t) {
        return !options.ignore_eos &&
               std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), t) !=
                   config.eos_token_ids.end();
    };

    const auto t0 = std::chrono::steady_clock::now();
    models::ForwardInput input{prompt, 0, options.capture_logits};
    TSR_RETURN_IF_ERROR(model.forward(input, cache, pool, &logits));
    result.prefill_s = seconds_since(t0);
    if (options.capture_logits) result.logits = logits;
    const float* last = logits.data() + logits.size() - vocab;
    std::int32_t token = kernels::sample(last, vocab, options.sampling, rng, scratch);
    result.ttft_s = seconds_since(t0);
    result.output_ids.push_back(token);
    if (on_token) on_token(token);

    const auto t1 = std::chrono::steady_clock::now();
    std::int64_t pos = prompt_len;
    while (static_cast<std::int64_t>(result.output_ids.size()) < options.max_new_tokens) {
        if (is_eos(token)) {
            result.finish_reason = "stop";
            break;
        }
        const std::int32_t fed = token;
        input = models::ForwardInput{std::span<const std::int32_t>(&fed, 1), pos, false};
        TSR_RETURN_IF_ERROR(model.forward(input, cache, pool, &logits));
        ++pos;
        if (options.capture_logits) result.logits.insert(result.logits.end(), logits.begin(), logits.end());
        token = kernels::sample(logits.data(), vocab, options.sampling, rng, scratch);
        result.output_ids.push_back(token);
        if (on_token) on_token(token);
    }
    if (is_eos(token)) result.finish_reason = "stop";
    result.decode_s = seconds_since(t1);
    return result;
}

}  // namespace tessera::executor
