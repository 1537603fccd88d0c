#pragma once
// executor/future_tokens.h — the decode tokens a step is launched with before they exist.
// With overlap scheduling the scheduler launches decode step n+1 while step n still runs, so
// a request's input token for n+1 is the one step n will sample. The scheduler writes
// kFutureToken there; the runner, which executes steps in launch order, replaces it with the
// token step n sampled for that request just before running n+1 (SGLang scheduler.py
// event_loop_overlap, whose worker resolves the future token ids of the next batch the same
// way).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "executor/forward_batch.h"

namespace tessera::executor {

// A decode input token that the step launched just before this one samples.
inline constexpr std::int32_t kFutureToken = -1;

class FutureTokens {
 public:
    // Remembers what the step `batch` sampled for each of its sequences (`result` in batch
    // order), or that it failed. Only the latest step is kept: a future token always refers
    // to the step launched right before.
    void record(const ForwardBatch& batch, const StatusOr<std::vector<SampledToken>>& result);
    // Replaces each kFutureToken of `batch` with the token recorded for its sequence's rid and
    // appends that token to the sequence's output_ids (which the scheduler built without it).
    // Fails if the step before failed or did not sample for that rid (the batch is then
    // not to be run).
    Status resolve(ForwardBatch& batch) const;

 private:
    std::unordered_map<std::string, std::int32_t> sampled_;  // rid → token of the last step
    Status last_step_;
};

}  // namespace tessera::executor
