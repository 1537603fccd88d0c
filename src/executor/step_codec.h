#pragma once
// executor/step_codec.h — the wire form of a step, as the TP leader broadcasts it to its
// followers and as a pipeline stage hands it to the next (reference §6.2: batch metadata
// travels with the hidden states), and of the tokens the last stage sends back.
// Pure functions; thread-safe.

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "executor/forward_batch.h"
#include "models/model.h"

namespace tessera::executor {

// Bits of a step's flags.
inline constexpr std::int64_t kStepWithSampling = 1;  // sampling params and output ids travel too
inline constexpr std::int64_t kStepLocalOnly = 2;     // run on this stage only (profiling)
inline constexpr std::int64_t kStepGroupStopping = 4; // DP-attention: the group's leader is stopping

// Tokens, positions, KV slots and need_token of every sequence; with kStepWithSampling also
// what the last pipeline stage needs to sample (params, penalties, logprobs, output ids).
std::vector<std::uint8_t> encode_step(const ForwardBatch& batch, std::int64_t flags = 0);
// DataLoss for a truncated or corrupt message; `flags` receives the step's flags.
StatusOr<ForwardBatch> decode_step(const std::vector<std::uint8_t>& bytes, std::int64_t* flags = nullptr);

std::vector<std::uint8_t> encode_results(const std::vector<SampledToken>& tokens);
StatusOr<std::vector<SampledToken>> decode_results(const std::vector<std::uint8_t>& bytes);

// DP-attention under PP: every group's counts travel with each group's step to the next
// stage, ahead of the step's bytes.
std::vector<std::uint8_t> encode_dp_step(const layers::DpAttentionStep& step, const std::vector<std::uint8_t>& bytes);
// DataLoss for a truncated or corrupt message; `bytes` receives the step's own bytes.
StatusOr<layers::DpAttentionStep> decode_dp_step(const std::vector<std::uint8_t>& message,
                                                 std::vector<std::uint8_t>* bytes);

// How many logits rows the model returns for `seq`: one per prompt log-probability target,
// then one to sample from when it needs a token.
std::int64_t logit_rows(const ForwardSequence& seq);

// How many final-normed hidden-state rows the step returns for `seq` (its last tokens'):
// SequenceSampling::hidden_states on a step that samples.
std::int64_t hidden_rows(const ForwardSequence& seq);

// The model's view of a step: logit_rows(seq) rows per sequence, its last ones. `tokens`
// receives the concatenated new tokens and must outlive the result. Internal if a sequence
// has fewer KV slots than positions, or prompt log-probability rows that do not end the step.
StatusOr<models::BatchInput> batch_input(const ForwardBatch& batch, std::vector<std::int32_t>* tokens);

}  // namespace tessera::executor
