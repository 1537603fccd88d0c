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
enum Field { kRound, kTokens, kLogitRows, kExtend, kStopping, kRecord, kControl, kFields };

// While every group is stopping but some still drain, rounds with no work are spaced out.
constexpr auto kStopTick = std::chrono::milliseconds(2);
// A group waiting with a control step gives up when the other groups stay idle this long
// without presenting it (their engines refused it, and their answers say why).
constexpr auto kControlPatience = std::chrono::seconds(3);

bool is_control(const ForwardBatch& batch) { return batch.load_weights.has_value() || batch.release_memory.any(); }

// What identifies a control step across groups: FNV-1a of its encoding, never 0.
std::int64_t control_fingerprint(const ForwardBatch& batch) {
    if (!is_control(batch)) return 0;
    ForwardBatch control;
    control.load_weights = batch.load_weights;
    control.release_memory = batch.release_memory;
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint8_t b : encode_step(control)) h = (h ^ b) * 1099511628211ull;
    return static_cast<std::int64_t>(h >> 1) | 1;
}

// `batch` without its control step: what a group that presented one runs in a round the
// others did not agree to.
ForwardBatch without_control(const ForwardBatch& batch) {
    ForwardBatch step = batch;
    step.load_weights.reset();
    step.release_memory = {};
    return step;
}

// The agreed control step on this rank. A weight load every rank must have made: the TP
// group's agreement (models/reloadable_model.h) is an error on TP rank 0 only, so every other
// group's leader learns it here.
StatusOr<std::vector<SampledToken>> apply_control(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                                                  const ForwardBatch& batch) {
    std::vector<std::int32_t> tokens;
    TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens));
    bool loaded = true;
    input.weights_loaded = &loaded;
    std::vector<float> out;
    TSR_RETURN_IF_ERROR(model.forward(input, kv, pool, &out));
    if (batch.load_weights && batch.load_weights->phase == models::WeightsPhase::kLoad && !loaded)
        return Status::InvalidArgument(
            "a rank could not load its share of the weights (attn_dp group 0's log says why)");
    return std::vector<SampledToken>{};
}

DpAttentionSync::GroupStep group_step(const ForwardBatch& batch, bool stopping) {
    DpAttentionSync::GroupStep g;
    for (const auto& seq : batch.seqs) {
        g.tokens += static_cast<std::int64_t>(seq.tokens.size());
        g.logit_rows += seq.tokens.empty() ? 0 : logit_rows(seq);
        // A step of more than one new token of a sequence is a prefill chunk.
        g.extend = g.extend || seq.tokens.size() > 1;
    }
    g.stopping = stopping;
    g.record = batch.expert_record;
    g.control = control_fingerprint(batch);
    return g;
}

// This group's batch with the round's recorder command, which every group applies. Only a
// round that carries another group's command copies the batch (into `copy`).
const ForwardBatch& with_record(const ForwardBatch& batch, const DpAttentionSync::Agreed& agreed, ForwardBatch& copy) {
    if (agreed.record == batch.expert_record) return batch;
    copy = batch;
    copy.expert_record = agreed.record;
    return copy;
}

// Under PP, on stage 0: this group's part of the round, and the hidden states it hands to the
// next stage.
Status forward_first_stage(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool, const ForwardBatch& batch,
                           const DpAttentionSync::Agreed& agreed, std::vector<std::int32_t>& tokens,
                           std::vector<float>* hidden, std::vector<std::int32_t>* routing) {
    hidden->clear();
    routing->clear();
    TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens));
    input.dp_attention = &agreed.step;
    if (batch.record_routed_experts) input.routed_experts_out = routing;
    return model.forward(input, kv, pool, hidden);
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
    std::int64_t me[kFields] = {};
    me[kRound] = round_;
    me[kTokens] = mine.tokens;
    me[kLogitRows] = mine.logit_rows;
    me[kExtend] = mine.extend;
    me[kStopping] = mine.stopping;
    me[kRecord] = static_cast<std::int64_t>(mine.record);
    me[kControl] = mine.control;
    StatusOr<std::vector<std::int64_t>> rows = tp.all_gather_rows(me);
    if (!rows.ok()) {
        const Status& s = rows.status();
        std::string groups;
        for (int g = 0; g < dpa_.dp_size; ++g) groups += (groups.empty() ? "" : ", ") + group_name(g);
        return Status(s.code(), fmt::format("DP-attention round {}: the groups did not all join the step: {} (groups: "
                                            "{})", round_, s.message(), groups));
    }
    Agreed a;
    a.step.num_tokens.resize(static_cast<std::size_t>(dpa_.dp_size));
    a.step.num_logit_rows.resize(static_cast<std::size_t>(dpa_.dp_size));
    a.all_stopping = true;
    a.control = true;
    std::int64_t control = 0;
    for (int g = 0; g < dpa_.dp_size; ++g) {
        const std::int64_t* lead = rows->data() + g * dpa_.tp_size * kFields;
        for (int t = 0; t < dpa_.tp_size; ++t) {
            const std::int64_t* r = lead + t * kFields;
            // Either way the ranks no longer agree on what runs next: the group is broken
            // (dist::breaks_group), and the launch ends rather than fail every later step.
            if (r[kRound] != round_)
                return Status(StatusCode::kUnavailable,
                              fmt::format("DP-attention lockstep broken: this rank is at round {} but TP rank {} of {} "
                                          "is at round {} (a group skipped or repeated a step)",
                                          round_, g * dpa_.tp_size + t, group_name(g), r[kRound]));
            for (int f = kTokens; f < kFields; ++f)
                if (r[f] != lead[f])
                    return Status(StatusCode::kUnavailable,
                                  fmt::format("DP-attention round {}: the ranks of {} disagree on their step ({} vs "
                                              "{}): the group's leader broadcast was lost",
                                              round_, group_name(g), r[f], lead[f]));
        }
        a.step.num_tokens[g] = lead[kTokens];
        a.step.num_logit_rows[g] = lead[kLogitRows];
        a.step.any_extend = a.step.any_extend || lead[kExtend] != 0;
        a.any_tokens = a.any_tokens || lead[kTokens] > 0;
        if (a.record == eplb::ExpertRecordCommand::kNone) a.record = static_cast<eplb::ExpertRecordCommand>(lead[kRecord]);
        a.all_stopping = a.all_stopping && lead[kStopping] != 0;
        a.any_stopping = a.any_stopping || lead[kStopping] != 0;
        a.control = a.control && lead[kControl] != 0 && (control == 0 || lead[kControl] == control);
        if (lead[kControl] != 0 && control != 0 && lead[kControl] != control) a.controls_differ = true;
        if (lead[kControl] != 0) control = lead[kControl];
    }
    ++round_;
    return a;
}

DpAttentionLeaderRunner::DpAttentionLeaderRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool,
                                                 const layers::DpAttentionParallel& dpa,
                                                 std::optional<StageLinks> stages)
    : model_(model), kv_(kv), pool_(pool), local_(model, std::move(kv), pool), dpa_(dpa), sync_(dpa), stages_(stages) {
    if (stages_) outbox_.emplace(*stages_->pp_group, 1, outbox_depth(stages_->max_in_flight_steps));
}

DpAttentionLeaderRunner::~DpAttentionLeaderRunner() {
    Status s = stop();
    if (!s.ok()) TSR_LOG_C(WARN, "executor", "stopping DP-attention group {}: {}", dpa_.dp_rank, s.message());
}

std::size_t DpAttentionLeaderRunner::waiting_rounds() const {
    std::size_t n = 0;
    for (const InFlight& f : in_flight_) n += f.result.has_value() ? 0 : 1;
    return n;
}

Status DpAttentionLeaderRunner::receive_oldest() {
    for (InFlight& f : in_flight_) {
        if (f.result) continue;
        f.result = receive_tokens(*stages_->pp_group);
        return f.result->status();
    }
    return Status::Internal("no DP-attention round is waiting for tokens");
}

Status DpAttentionLeaderRunner::round(const ForwardBatch& batch, RoundKind kind, bool* others_busy) {
    const bool stopping = kind == RoundKind::kStopping;
    const bool local = kind == RoundKind::kLocal;
    // Under PP the stages must not hold more rounds than the scheduler's bound, or the last
    // stage's answers would back up behind ours.
    if (stages_ && waiting_rounds() >= static_cast<std::size_t>(std::max(1, stages_->max_in_flight_steps)))
        TSR_RETURN_IF_ERROR(receive_oldest());
    // Later stages sample: their step carries the sampling parameters.
    std::vector<std::uint8_t> bytes = encode_step(
        batch, (stopping ? kStepGroupStopping : 0) | (stages_ ? kStepWithSampling : 0) | (local ? kStepLocalOnly : 0));
    if (dpa_.attn_tp_group != nullptr) TSR_RETURN_IF_ERROR(broadcast_step(*dpa_.attn_tp_group, bytes));
    const DpAttentionSync::GroupStep mine = group_step(batch, stopping);
    TSR_ASSIGN_OR_RETURN(DpAttentionSync::Agreed agreed, sync_.exchange(mine));
    if (others_busy != nullptr) *others_busy = agreed.any_tokens;
    if (agreed.all_stopping) stopped_ = true;
    if (agreed.any_stopping) peers_stopping_.store(true, std::memory_order_relaxed);
    InFlight f{kind != RoundKind::kStep, batch.seqs.size(), std::nullopt, agreed.step.any_extend};
    if (local) {
        std::vector<float> hidden;
        std::vector<std::int32_t> routing;
        return forward_first_stage(model_, kv_, pool_, batch, agreed, tokens_, &hidden, &routing);
    }
    ForwardBatch recorded;
    const ForwardBatch& step = with_record(batch, agreed, recorded);
    if (agreed.any_tokens) {
        forwards_.fetch_add(1, std::memory_order_relaxed);
        if (mine.tokens == 0) idle_steps_.fetch_add(1, std::memory_order_relaxed);
        group_tokens_.fetch_add(mine.tokens, std::memory_order_relaxed);
    }
    if (!stages_) {
        f.result = agreed.runs() ? local_.run(step, &agreed.step)
                                 : StatusOr<std::vector<SampledToken>>(std::vector<SampledToken>(f.n_seqs));
        if (!f.result->ok()) return f.result->status();
    } else if (agreed.runs()) {
        std::vector<float> hidden;
        std::vector<std::int32_t> routing;
        TSR_RETURN_IF_ERROR(forward_first_stage(model_, kv_, pool_, step, agreed, tokens_, &hidden, &routing));
        if (step.expert_record != batch.expert_record) bytes = encode_step(step, kStepWithSampling);
        TSR_RETURN_IF_ERROR(post_step(*outbox_, encode_dp_step(agreed.step, bytes), std::move(hidden), routing));
    } else {
        f.result = std::vector<SampledToken>(f.n_seqs);
    }
    in_flight_.push_back(std::move(f));
    return Status::Ok();
}

Status DpAttentionLeaderRunner::launch(const ForwardBatch& batch) {
    if (stopped_) return Status::Internal("the DP-attention groups were already stopped");
    if (is_control(batch)) {
        StatusOr<std::vector<SampledToken>> result = control_rounds(batch);
        if (!result.ok()) return note_failure(result.status());
        in_flight_.push_back({false, 0, std::move(result)});
        return Status::Ok();
    }
    return note_failure(round(batch, RoundKind::kStep, nullptr));
}

StatusOr<std::vector<SampledToken>> DpAttentionLeaderRunner::control_rounds(const ForwardBatch& batch) {
    if (stages_)
        return Status::Unimplemented("a weight update or memory release with --enable-dp-attention and --pp-size > 1");
    std::vector<std::uint8_t> bytes = encode_step(batch, 0);
    const ForwardBatch none = without_control(batch);
    auto others_idle_since = std::chrono::steady_clock::now();
    for (bool first = true;; first = false) {
        if (!first) TSR_RETURN_IF_ERROR(before_round());
        if (dpa_.attn_tp_group != nullptr) TSR_RETURN_IF_ERROR(broadcast_step(*dpa_.attn_tp_group, bytes));
        TSR_ASSIGN_OR_RETURN(DpAttentionSync::Agreed agreed, sync_.exchange(group_step(batch, false)));
        if (agreed.any_stopping) peers_stopping_.store(true, std::memory_order_relaxed);
        if (agreed.control) return apply_control(model_, kv_, pool_, batch);
        // The others' round: this group joins it with no tokens.
        if (agreed.runs()) {
            ForwardBatch recorded;
            TSR_RETURN_IF_ERROR(local_.run(with_record(none, agreed, recorded), &agreed.step).status());
        }
        if (agreed.controls_differ)
            return Status::InvalidArgument(
                "another attn_dp group runs a different weight update or memory release at the same time: send them "
                "one at a time");
        if (agreed.any_stopping) return Status::Internal("the attn_dp groups are stopping");
        const auto now = std::chrono::steady_clock::now();
        if (agreed.any_tokens) others_idle_since = now;
        if (now - others_idle_since > kControlPatience)
            return Status::InvalidArgument(
                "the other attn_dp groups did not take part in the weight update or memory release (their answers "
                "say why)");
        if (!agreed.any_tokens) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

StatusOr<std::vector<SampledToken>> DpAttentionLeaderRunner::collect() {
    while (true) {
        if (in_flight_.empty()) return Status::Internal("collect() without a launched step");
        if (!in_flight_.front().result) {
            if (Status s = receive_oldest(); !s.ok()) return note_failure(s);
        }
        InFlight f = std::move(in_flight_.front());
        in_flight_.pop_front();
        if (f.internal) continue;  // an idle round's (empty) tokens
        if (!f.result->ok()) return note_failure(f.result->status());
        last_round_extended_ = f.any_extend;
        return std::move(*f.result);
    }
}

StatusOr<std::vector<SampledToken>> DpAttentionLeaderRunner::run(const ForwardBatch& batch) {
    TSR_RETURN_IF_ERROR(launch(batch));
    return collect();
}

Status DpAttentionLeaderRunner::run_local(const ForwardBatch& batch) {
    if (!stages_) return Status::Internal("run_local() times a pipeline stage; this launch has one stage");
    if (!in_flight_.empty()) return Status::Internal("run_local() while steps are in flight");
    return note_failure(round(batch, RoundKind::kLocal, nullptr));
}

StatusOr<BatchRunner::PrefillAgreement> DpAttentionLeaderRunner::agree_prefill(const PrefillIntent& mine) {
    if (!agreement_) return BatchRunner::agree_prefill(mine);
    StatusOr<PrefillAgreement> agreed = agreement_->agree(mine);
    if (!agreed.ok()) return note_failure(agreed.status());
    return agreed;
}

Status DpAttentionLeaderRunner::before_round() {
    return agreement_ ? note_failure(agreement_->before_round()) : Status::Ok();
}

StatusOr<bool> DpAttentionLeaderRunner::idle_step() {
    if (stopped_) return false;
    TSR_RETURN_IF_ERROR(before_round());
    bool others_busy = false;
    TSR_RETURN_IF_ERROR(note_failure(round(ForwardBatch{}, RoundKind::kIdle, &others_busy)));
    while (!in_flight_.empty() && in_flight_.front().internal && in_flight_.front().result) in_flight_.pop_front();
    return others_busy;
}

Status DpAttentionLeaderRunner::stop() {
    // After a fatal error the other groups are stalled or gone; the launcher ends them.
    if (!fatal_error().ok()) return Status::Ok();
    while (!stopped_) {
        TSR_RETURN_IF_ERROR(before_round());
        bool others_busy = false;
        TSR_RETURN_IF_ERROR(note_failure(round(ForwardBatch{}, RoundKind::kStopping, &others_busy)));
        if (!stopped_ && !others_busy) std::this_thread::sleep_for(kStopTick);
    }
    if (!outbox_) {
        in_flight_.clear();
        return Status::Ok();
    }
    // The last stage answers every round that ran; take the answers so its sends complete.
    while (waiting_rounds() > 0) TSR_RETURN_IF_ERROR(note_failure(receive_oldest()));
    in_flight_.clear();
    Status s = post_stop(*outbox_);
    outbox_.reset();
    return s;
}

BatchRunner::LockstepStats DpAttentionLeaderRunner::lockstep_stats() const {
    return {forwards_.load(std::memory_order_relaxed), idle_steps_.load(std::memory_order_relaxed),
            group_tokens_.load(std::memory_order_relaxed)};
}

Status follow_dp_attention_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                                  const layers::DpAttentionParallel& dpa, std::optional<StageLinks> stages) {
    if (dpa.attn_tp_group == nullptr) return Status::Internal("a DP-attention follower needs its attention-TP group");
    ModelRunner local(model, kv, pool);
    DpAttentionSync sync(dpa);
    std::optional<StageOutbox> next;
    if (stages) next.emplace(*stages->pp_group, 1, outbox_depth(stages->max_in_flight_steps));
    std::vector<std::int32_t> tokens;
    while (true) {
        TSR_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, receive_step(*dpa.attn_tp_group));
        std::int64_t flags = 0;
        TSR_ASSIGN_OR_RETURN(ForwardBatch batch, decode_step(bytes, &flags));
        TSR_ASSIGN_OR_RETURN(DpAttentionSync::Agreed agreed,
                             sync.exchange(group_step(batch, (flags & kStepGroupStopping) != 0)));
        // The group's control step runs only in the round every group presents it.
        const bool strip = !agreed.control && is_control(batch);
        const ForwardBatch stripped = strip ? without_control(batch) : ForwardBatch{};
        ForwardBatch recorded;
        const ForwardBatch& step = with_record(strip ? stripped : batch, agreed, recorded);
        if (!next) {
            if (agreed.runs()) TSR_RETURN_IF_ERROR(local.run(step, &agreed.step).status());
        } else if (agreed.runs()) {
            std::vector<float> hidden;
            std::vector<std::int32_t> routing;
            TSR_RETURN_IF_ERROR(forward_first_stage(model, kv, pool, step, agreed, tokens, &hidden, &routing));
            if (&step != &batch) bytes = encode_step(step, flags);
            // A profile step (kStepLocalOnly) times stage 0 alone: nothing is handed on.
            if ((flags & kStepLocalOnly) == 0)
                TSR_RETURN_IF_ERROR(
                    post_step(*next, encode_dp_step(agreed.step, bytes), std::move(hidden), routing));
        }
        if (agreed.all_stopping) return next ? post_stop(*next) : Status::Ok();
    }
}

Status EveryGroupModel::forward(const models::BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                               std::vector<float>* out) {
    std::int64_t logit_rows = 0;
    for (const auto& seq : batch.seqs)
        logit_rows += models::logit_rows(seq);
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
