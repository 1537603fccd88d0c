#include "executor/model_runner.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "base/thread_pool.h"
#include "executor/step_codec.h"

namespace tessera::executor {

namespace {

// log Σ exp(row): a token's log-probability is its logit minus this.
float log_normalizer(std::span<const float> row) {
    const float max_logit = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float v : row) sum += std::exp(static_cast<double>(v - max_logit));
    return max_logit + static_cast<float>(std::log(sum));
}

// The `k` best (token, log-probability) of `row`, best first (ties: the lower id), appended to
// `out`; `ids` is scratch.
void append_best(std::span<const float> row, std::int64_t k, float log_norm, std::vector<std::int32_t>& ids,
                 std::vector<std::pair<std::int32_t, float>>& out) {
    const auto vocab = static_cast<std::int64_t>(row.size());
    k = std::min(k, vocab);
    if (k <= 0) return;
    ids.resize(static_cast<std::size_t>(vocab));
    for (std::int64_t i = 0; i < vocab; ++i) ids[i] = static_cast<std::int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (std::int64_t i = 0; i < k; ++i) out.emplace_back(ids[i], row[ids[i]] - log_norm);
}

// The log-probabilities of `token_ids` in `row` (NaN for one outside it), written to `out`.
void chosen_logprobs(std::span<const float> row, std::span<const std::int32_t> token_ids, float log_norm,
                     float* out) {
    const auto vocab = static_cast<std::int64_t>(row.size());
    for (std::int32_t id : token_ids) *out++ = id >= 0 && id < vocab ? row[id] - log_norm : NAN;
}

}  // namespace

SampledToken sample_row(std::span<float> row, const SequenceSampling& s, const std::vector<std::int32_t>& output_ids,
                        std::vector<std::pair<float, std::int32_t>>& scratch, std::span<const std::int32_t> token_ids) {
    const auto vocab = static_cast<std::int64_t>(row.size());
    for (const auto& [token, bias] : s.logit_bias)
        if (token >= 0 && token < vocab) row[token] += bias;
    if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
        std::unordered_map<std::int32_t, int> counts;
        for (std::int32_t t : output_ids) ++counts[t];
        for (const auto& [token, count] : counts) {
            if (token < 0 || token >= vocab) continue;
            row[token] -= s.frequency_penalty * static_cast<float>(count) + s.presence_penalty;
        }
    }
    if (s.allowed_tokens) {
        const std::vector<std::uint32_t>& allowed = *s.allowed_tokens;
        const auto covered = std::min<std::int64_t>(vocab, static_cast<std::int64_t>(allowed.size()) * 32);
        for (std::int64_t t = 0; t < covered; ++t)
            if (!((allowed[static_cast<std::size_t>(t >> 5)] >> (t & 31)) & 1u)) row[t] = -INFINITY;
        for (std::int64_t t = covered; t < vocab; ++t) row[t] = -INFINITY;
    }
    SampledToken out;
    const bool any_logprobs = s.logprobs || s.top_logprobs > 0 || !token_ids.empty();
    const float log_norm = any_logprobs ? log_normalizer(row) : 0.0f;
    // Step n of a request always draws from the same generator state.
    kernels::Rng rng(s.params.seed * 0x9E3779B97F4A7C15ull + output_ids.size() + 1);
    out.token = kernels::sample(row.data(), vocab, s.params, rng, scratch);
    if (any_logprobs) {
        out.logprob = row[out.token] - log_norm;
        std::vector<std::int32_t> ids;
        append_best(row, s.top_logprobs, log_norm, ids, out.top_logprobs);
        out.token_ids_logprobs.resize(token_ids.size());
        chosen_logprobs(row, token_ids, log_norm, out.token_ids_logprobs.data());
    }
    return out;
}

ModelRunner::ModelRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool)
    : model_(model), kv_(std::move(kv)), pool_(pool) {}

StatusOr<std::vector<SampledToken>> ModelRunner::run(const ForwardBatch& batch) { return run(batch, nullptr); }

StatusOr<std::vector<SampledToken>> ModelRunner::run(const ForwardBatch& batch,
                                                     const layers::DpAttentionStep* dp_attention) {
    TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens_));
    input.dp_attention = dp_attention;
    input.hidden_out = &hidden_states_;
    input.routed_experts_out = batch.record_routed_experts ? &routed_experts_ : nullptr;
    TSR_RETURN_IF_ERROR(model_.forward(input, kv_, pool_, &logits_));
    return step_results(batch, {logits_, hidden_states_, routed_experts_}, model_.config(), pool_, scratch_);
}

namespace {

// An embedding model's rows (one per sequence that needs a token, in batch order) as its results.
StatusOr<std::vector<SampledToken>> embedding_results(const ForwardBatch& batch, std::span<float> out,
                                                      std::int64_t hidden_size) {
    const auto hidden = static_cast<std::size_t>(hidden_size);
    std::vector<SampledToken> results(batch.seqs.size());
    std::size_t row = 0;
    for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
        if (!batch.seqs[i].need_token) continue;
        if ((row + 1) * hidden > out.size()) return Status::Internal("fewer embedding rows than sequences needing one");
        const auto first = out.begin() + static_cast<std::ptrdiff_t>(row * hidden);
        results[i].embedding.assign(first, first + static_cast<std::ptrdiff_t>(hidden));
        ++row;
    }
    return results;
}

}  // namespace

StatusOr<std::vector<SampledToken>> step_results(const ForwardBatch& batch, const StepOutputs& outputs,
                                                 const loader::ModelConfig& config, ThreadPool* pool,
                                                 SamplingScratch& scratch) {
    std::vector<SampledToken> results;
    if (config.is_generation) {
        TSR_ASSIGN_OR_RETURN(results, sample_batch(batch, outputs.rows, config.vocab_size, pool, scratch));
    } else {
        TSR_ASSIGN_OR_RETURN(results, embedding_results(batch, outputs.rows, config.hidden_size));
    }
    if (batch.record_routed_experts) {
        const auto width = static_cast<std::size_t>(config.num_hidden_layers * config.moe.num_experts_per_tok);
        std::size_t first = 0;  // the sequence's first token's entries in routed_experts
        for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
            const std::size_t values = batch.seqs[i].tokens.size() * width;
            if (first + values > outputs.routed_experts.size())
                return Status::Internal("fewer routed-expert rows than the step's tokens");
            const auto begin = outputs.routed_experts.begin() + static_cast<std::ptrdiff_t>(first);
            results[i].routed_experts.assign(begin, begin + static_cast<std::ptrdiff_t>(values));
            first += values;
        }
    }
    const std::span<const float> hidden_states = outputs.hidden_states;
    const auto hidden = static_cast<std::size_t>(config.hidden_size);
    std::size_t first = 0;  // the sequence's first value in hidden_states
    for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
        const std::int64_t rows = hidden_rows(batch.seqs[i]);
        if (rows == 0) continue;
        const std::size_t values = static_cast<std::size_t>(rows) * hidden;
        if (first + values > hidden_states.size())
            return Status::Internal("fewer hidden-state rows than the step's sequences asked for");
        results[i].hidden_states.assign(hidden_states.begin() + static_cast<std::ptrdiff_t>(first),
                                        hidden_states.begin() + static_cast<std::ptrdiff_t>(first + values));
        results[i].hidden_rows = rows;
        first += values;
    }
    return results;
}

StatusOr<std::vector<SampledToken>> sample_batch(const ForwardBatch& batch, std::span<float> logits,
                                                 std::int64_t vocab, ThreadPool* pool, SamplingScratch& scratch) {
    std::vector<SampledToken> out(batch.seqs.size());
    // Prompt log-probabilities apart from `out`: a sequence's rows may be on several threads.
    std::vector<SampledToken> prompt(batch.seqs.size());
    // Every row the step computed: (sequence, its row k; k == targets is the row to sample from).
    std::vector<std::pair<std::size_t, std::int64_t>> rows;
    for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
        const ForwardSequence& seq = batch.seqs[i];
        const auto targets = static_cast<std::int64_t>(seq.input_logprob_targets.size());
        for (std::int64_t k = 0; k < logit_rows(seq); ++k) rows.emplace_back(i, k);
        const auto top = std::min<std::int64_t>(seq.input_top_logprobs, vocab);
        prompt[i].input_logprobs.resize(static_cast<std::size_t>(targets));
        prompt[i].input_top_logprobs.resize(static_cast<std::size_t>(targets * top));
        prompt[i].input_token_ids_logprobs.resize(static_cast<std::size_t>(targets) * seq.logprob_token_ids.size());
    }
    const auto n_rows = static_cast<std::int64_t>(rows.size());
    if (static_cast<std::int64_t>(logits.size()) < n_rows * vocab)
        return Status::Internal("fewer logits rows than the step's sequences ask for");
    const int n_threads = pool != nullptr && n_rows > 1 ? pool->size() : 1;
    if (static_cast<int>(scratch.size()) < n_threads) scratch.resize(static_cast<std::size_t>(n_threads));
    auto run_rows = [&](int worker, int n_workers) {
        std::vector<std::pair<std::int32_t, float>> best;
        std::vector<std::int32_t> ids;
        for (std::int64_t r = n_rows * worker / n_workers; r < n_rows * (worker + 1) / n_workers; ++r) {
            const auto [i, k] = rows[static_cast<std::size_t>(r)];
            const ForwardSequence& seq = batch.seqs[i];
            const std::span<float> row =
                logits.subspan(static_cast<std::size_t>(r * vocab), static_cast<std::size_t>(vocab));
            if (k == static_cast<std::int64_t>(seq.input_logprob_targets.size())) {
                out[i] = sample_row(row, seq.sampling, seq.output_ids, scratch[worker], seq.logprob_token_ids);
                continue;
            }
            // A prompt row: raw logits (SGLang's input logprobs are neither penalised nor
            // temperature-scaled).
            const float log_norm = log_normalizer(row);
            const auto row_k = static_cast<std::size_t>(k);
            const std::size_t n_chosen = seq.logprob_token_ids.size();
            chosen_logprobs(row, std::span(seq.input_logprob_targets).subspan(row_k, 1), log_norm,
                            &prompt[i].input_logprobs[row_k]);
            chosen_logprobs(row, seq.logprob_token_ids, log_norm,
                            prompt[i].input_token_ids_logprobs.data() + row_k * n_chosen);
            best.clear();
            append_best(row, seq.input_top_logprobs, log_norm, ids, best);
            std::copy(best.begin(), best.end(),
                      prompt[i].input_top_logprobs.begin() + k * static_cast<std::int64_t>(best.size()));
        }
    };
    if (n_threads > 1) {
        pool->run(run_rows);
    } else {
        run_rows(0, 1);
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i].input_logprobs = std::move(prompt[i].input_logprobs);
        out[i].input_top_logprobs = std::move(prompt[i].input_top_logprobs);
        out[i].input_token_ids_logprobs = std::move(prompt[i].input_token_ids_logprobs);
    }
    return out;
}

}  // namespace tessera::executor
