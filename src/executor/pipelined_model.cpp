#include "executor/pipelined_model.h"

#include <algorithm>

namespace tessera::executor {

namespace {

constexpr int kTagHidden = 21;
// As long as a collective's own timeout: a stage that died is reported by the transport.
constexpr std::chrono::milliseconds kStageWait = std::chrono::minutes(30);

std::span<std::uint8_t> bytes_of(std::vector<float>& v) {
    return {reinterpret_cast<std::uint8_t*>(v.data()), v.size() * sizeof(float)};
}

}  // namespace

Status PipelinedModel::forward(const models::BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                               std::vector<float>* out) {
    const int stage = pp_.rank(), last = pp_.size() - 1;
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    const std::int64_t hidden = config().hidden_size;
    models::BatchInput local = batch;
    if (stage > 0) {
        hidden_in_.resize(static_cast<std::size_t>(n * hidden));
        TSR_ASSIGN_OR_RETURN(auto work, pp_.irecv(bytes_of(hidden_in_), stage - 1, kTagHidden));
        TSR_RETURN_IF_ERROR(work->wait(kStageWait));
        local.hidden_in = hidden_in_;
    }
    TSR_RETURN_IF_ERROR(stage_.forward(local, kv, pool, stage == last ? out : &hidden_out_));
    if (stage < last) {
        TSR_ASSIGN_OR_RETURN(auto work, pp_.isend(bytes_of(hidden_out_), stage + 1, kTagHidden));
        TSR_RETURN_IF_ERROR(work->wait(kStageWait));
    }
    // The logits rows follow from the batch on every stage.
    std::int64_t rows = 0;
    for (const auto& seq : batch.seqs)
        rows += models::logit_rows(seq);
    out->resize(static_cast<std::size_t>(rows * config().vocab_size));
    if (rows > 0) TSR_RETURN_IF_ERROR(pp_.broadcast(bytes_of(*out), last));
    std::int64_t hidden_rows = 0;
    for (const auto& seq : batch.seqs) hidden_rows += std::min(seq.hidden_rows, seq.n_tokens);
    if (batch.hidden_out == nullptr || hidden_rows == 0) return Status::Ok();
    batch.hidden_out->resize(static_cast<std::size_t>(hidden_rows * hidden));
    return pp_.broadcast(bytes_of(*batch.hidden_out), last);
}

}  // namespace tessera::executor
