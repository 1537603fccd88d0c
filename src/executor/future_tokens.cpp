#include "executor/future_tokens.h"

#include <algorithm>

#include <fmt/format.h>

namespace tessera::executor {

void FutureTokens::record(const ForwardBatch& batch, const StatusOr<std::vector<SampledToken>>& result) {
    sampled_.clear();
    last_step_ = result.ok() ? Status::Ok() : result.status();
    if (!result.ok()) return;
    for (std::size_t i = 0; i < batch.seqs.size() && i < result->size(); ++i)
        if (batch.seqs[i].need_token) sampled_[batch.seqs[i].rid] = result.value()[i].token;
}

Status FutureTokens::resolve(ForwardBatch& batch) const {
    const auto is_future = [](std::int32_t t) { return t == kFutureToken; };
    for (ForwardSequence& seq : batch.seqs) {
        if (std::none_of(seq.tokens.begin(), seq.tokens.end(), is_future)) continue;
        if (!last_step_.ok())
            return Status(last_step_.code(), "the step before failed: " + last_step_.message());
        const auto it = sampled_.find(seq.rid);
        if (it == sampled_.end() || seq.tokens.size() != 1) {
            return Status::Internal(fmt::format(
                "sequence '{}' waits for a token the step before did not sample", seq.rid));
        }
        seq.tokens.front() = it->second;
        seq.output_ids.push_back(it->second);
    }
    return Status::Ok();
}

}  // namespace tessera::executor
