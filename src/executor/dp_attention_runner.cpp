#include "executor/dp_attention_runner.h"

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "base/env.h"
#include "base/logging.h"
#include "dist/process_group.h"
#include "executor/step_codec.h"
#include "executor/tp_batch_runner.h"

namespace tessera::executor {

namespace {

// Fields of one rank's row in the exchange.
enum Field { kRound, kTokens, kLogitRows, kExtend, kStopping, kFields };

// While every group is stopping but some still drain, rounds with no work are spaced out.
constexpr auto kStopTick = std::chrono::milliseconds(2);

DpAttentionSync::GroupStep group_step(const ForwardBatch& batch, bool stopping) {
    DpAttentionSync::GroupStep g;
    for (const auto& seq : batch.seqs) {
        g.tokens += static_cast<std::int64_t>(seq.tokens.size());
        g.logit_rows += seq.need_token && !seq.tokens.empty() ? 1 : 0;
        // A step of more than one new token of a sequence is a prefill chunk.
        g.extend = g.extend || seq.tokens.size() > 1;
    }
    g.stopping = stopping;
    return g;
}

}  // namespace

std::string DpAttentionSync::group_name(int group) const {
    const int first = group * dpa_.tp_size;
    return dpa_.tp_size == 1 ? fmt::format("attn_dp group {} (TP rank {})", group, first)
                             : fmt::format("attn_dp group {} (TP ranks {}-{})", group, first, first + dpa_.tp_size - 1);
}

DpAttentionSync::DpAttentionSync(const layers::DpAttentionParallel& dpa) : dpa_(dpa) {
    const std::string& fault = env().dpa_fault;
    int group = -1;
    long long round = -1;
    char kind[8] = {};
    if (!fault.empty() && std::sscanf(fault.c_str(), "%7[a-z]:%d:%lld", kind, &group, &round) == 3 &&
        group == dpa_.dp_rank) {
        fault_ = std::string(kind) == "skip" ? Fault::kSkip : std::string(kind) == "stall" ? Fault::kStall : Fault::kNone;
        fault_round_ = round;
    }
}

StatusOr<DpAttentionSync::Agreed> DpAttentionSync::exchange(const GroupStep& mine) {
    dist::ProcessGroup& tp = *dpa_.tp_group;
    if (round_ == fault_round_ && fault_ != Fault::kNone) {
        TSR_LOG_C(WARN, "executor", "TSR_DPA_FAULT: attn_dp group {} {} round {}", dpa_.dp_rank,
                  fault_ == Fault::kSkip ? "skips" : "stalls at", round_);
        while (fault_ == Fault::kStall) std::this_thread::sleep_for(std::chrono::hours(1));
        ++round_;
    }
    const int T = tp.size();
    std::vector<std::int64_t> rows(static_cast<std::size_t>(T * kFields), 0);
    std::int64_t* me = rows.data() + tp.rank() * kFields;
    me[kRound] = round_;
    me[kTokens] = mine.tokens;
    me[kLogitRows] = mine.logit_rows;
    me[kExtend] = mine.extend;
    me[kStopping] = mine.stopping;
    if (Status s = tp.all_reduce(std::span<std::int64_t>(rows)); !s.ok()) {
        std::string groups;
        for (int g = 0; g < dpa_.dp_size; ++g) groups += (groups.empty() ? "" : ", ") + group_name(g);
        return Status(s.code(), fmt::format("DP-attention round {}: the groups did not all join the step: {} (groups: "
                                            "{})", round_, s.message(), groups));
    }
    Agreed a;
    a.step.num_tokens.resize(static_cast<std::size_t>(dpa_.dp_size));
    a.step.num_logit_rows.resize(static_cast<std::size_t>(dpa_.dp_size));
    a.all_stopping = true;
    for (int g = 0; g < dpa_.dp_size; ++g) {
        const std::int64_t* lead = rows.data() + g * dpa_.tp_size * kFields;
        for (int t = 0; t < dpa_.tp_size; ++t) {
            const std::int64_t* r = lead + t * kFields;
            if (r[kRound] != round_)
                return Status::Internal(fmt::format("DP-attention lockstep broken: this rank is at round {} but TP "
                                                    "rank {} of {} is at round {} (a group skipped or repeated a step)",
                                                    round_, g * dpa_.tp_size + t, group_name(g), r[kRound]));
            for (int f = kTokens; f < kFields; ++f)
                if (r[f] != lead[f])
                    return Status::Internal(fmt::format("DP-attention round {}: the ranks of {} disagree on their step "
                                                        "({} vs {}): the group's leader broadcast was lost",
                                                        round_, group_name(g), r[f], lead[f]));
        }
        a.step.num_tokens[g] = lead[kTokens];
        a.step.num_logit_rows[g] = lead[kLogitRows];
        a.step.any_extend = a.step.any_extend || lead[kExtend] != 0;
        a.any_tokens = a.any_tokens || lead[kTokens] > 0;
        a.all_stopping = a.all_stopping && lead[kStopping] != 0;
        a.any_stopping = a.any_stopping || lead[kStopping] != 0;
    }
    ++round_;
    return a;
}

DpAttentionLeaderRunner::DpAttentionLeaderRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool,
                                                 const layers::DpAttentionParallel& dpa)
    : local_(model, std::move(kv), pool), dpa_(dpa), sync_(dpa) {}

DpAttentionLeaderRunner::~DpAttentionLeaderRunner() {
    Status s = stop();
    if (!s.ok()) TSR_LOG_C(WARN, "executor", "stopping DP-attention group {}: {}", dpa_.dp_rank, s.message());
}

StatusOr<std::vector<SampledToken>> DpAttentionLeaderRunner::round(const ForwardBatch& batch, bool stopping,
                                                                   bool* others_busy) {
    if (dpa_.attn_tp_group != nullptr) {
        std::vector<std::uint8_t> bytes = encode_step(batch, stopping ? kStepGroupStopping : 0);
        TSR_RETURN_IF_ERROR(note_failure(broadcast_step(*dpa_.attn_tp_group, bytes)));
    }
    const DpAttentionSync::GroupStep mine = group_step(batch, stopping);
    auto agreed = sync_.exchange(mine);
    if (!agreed.ok()) return note_failure(agreed.status());
    if (others_busy != nullptr) *others_busy = agreed->any_tokens;
    if (agreed->all_stopping) stopped_ = true;
    if (agreed->any_stopping) peers_stopping_.store(true, std::memory_order_relaxed);
    if (!agreed->any_tokens && batch.expert_record == eplb::ExpertRecordCommand::kNone)
        return std::vector<SampledToken>(batch.seqs.size());
    if (agreed->any_tokens) forwards_.fetch_add(1, std::memory_order_relaxed);
    if (mine.tokens == 0 && agreed->any_tokens) idle_steps_.fetch_add(1, std::memory_order_relaxed);
    tokens_.fetch_add(mine.tokens, std::memory_order_relaxed);
    auto out = local_.run(batch, &agreed->step);
    if (!out.ok()) return note_failure(out.status());
    return out;
}

StatusOr<std::vector<SampledToken>> DpAttentionLeaderRunner::run(const ForwardBatch& batch) {
    if (stopped_) return Status::Internal("the DP-attention groups were already stopped");
    return round(batch, /*stopping=*/false, nullptr);
}

StatusOr<bool> DpAttentionLeaderRunner::idle_step() {
    if (stopped_) return false;
    bool others_busy = false;
    TSR_RETURN_IF_ERROR(round(ForwardBatch{}, /*stopping=*/false, &others_busy).status());
    return others_busy;
}

Status DpAttentionLeaderRunner::stop() {
    // After a fatal error the other groups are stalled or gone; the launcher ends them.
    while (!stopped_ && fatal_error().ok()) {
        bool others_busy = false;
        TSR_RETURN_IF_ERROR(round(ForwardBatch{}, /*stopping=*/true, &others_busy).status());
        if (!stopped_ && !others_busy) std::this_thread::sleep_for(kStopTick);
    }
    stopped_ = true;
    return Status::Ok();
}

BatchRunner::LockstepStats DpAttentionLeaderRunner::lockstep_stats() const {
    return {forwards_.load(std::memory_order_relaxed), idle_steps_.load(std::memory_order_relaxed),
            tokens_.load(std::memory_order_relaxed)};
}

Status follow_dp_attention_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                                  const layers::DpAttentionParallel& dpa) {
    if (dpa.attn_tp_group == nullptr) return Status::Internal("a DP-attention follower needs its attention-TP group");
    ModelRunner local(model, kv, pool);
    DpAttentionSync sync(dpa);
    while (true) {
        TSR_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, receive_step(*dpa.attn_tp_group));
        std::int64_t flags = 0;
        TSR_ASSIGN_OR_RETURN(ForwardBatch batch, decode_step(bytes, &flags));
        TSR_ASSIGN_OR_RETURN(DpAttentionSync::Agreed agreed,
                             sync.exchange(group_step(batch, (flags & kStepGroupStopping) != 0)));
        if (agreed.any_tokens || batch.expert_record != eplb::ExpertRecordCommand::kNone)
            TSR_RETURN_IF_ERROR(local.run(batch, &agreed.step).status());
        if (agreed.all_stopping) return Status::Ok();
    }
}

Status EveryGroupModel::forward(const models::BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                               std::vector<float>* out) {
    std::int64_t logit_rows = 0;
    for (const auto& seq : batch.seqs)
        logit_rows += seq.logits == models::LogitsMode::kAll                               ? seq.n_tokens
                      : seq.logits == models::LogitsMode::kLast && seq.n_tokens > 0 ? 1
                                                                                     : 0;
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    layers::DpAttentionStep step;
    step.num_tokens.assign(static_cast<std::size_t>(groups_), n);
    step.num_logit_rows.assign(static_cast<std::size_t>(groups_), logit_rows);
    step.any_extend = n > 1;
    models::BatchInput with_groups = batch;
    with_groups.dp_attention = &step;
    return model_.forward(with_groups, kv, pool, out);
}

}  // namespace tessera::executor
