#pragma once
// executor/dp_attention_runner.h — the lockstep of DP-attention groups (SGLang's
// scheduler.py prepare_mlp_sync_batch). Each attention-DP group's leader (attention-TP rank 0)
// runs its own scheduler and broadcasts its step inside its attention-TP group; then, before
// every forward, all ranks of the TP group agree on each group's token and logits-row counts
// and whether any group runs a prefill, because the MLP / MoE of every layer gathers all
// groups' tokens. A group with no work joins with an idle (empty) batch, so the collectives
// never wait on it. Each step carries a round number; ranks that disagree on it, or on their
// group's counts, fail the step naming the groups. Stopping is agreed too: a group's leader
// keeps joining rounds until every group is stopping. Under PP the agreement happens on stage
// 0; every rank hands its group's step, with all groups' counts, to its counterpart on the
// next stage (pp_runner.h), and the last stage's attention-TP rank 0 sends its group's
// tokens back to the group's leader. A control step (a weight update's phase, a memory
// release) runs in the round in which every group presents the same one: each group's engine
// presents it once its own requests allow, and a group that presents it early joins the other
// groups' rounds with no tokens until then. Each object is owned by its rank's main (or
// scheduler) thread.

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "executor/forward_batch.h"
#include "executor/model_runner.h"
#include "executor/pp_runner.h"
#include "executor/prefill_agreement.h"
#include "kvcache/kv_cache.h"
#include "layers/dp_attention.h"
#include "models/model.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::executor {

// This rank's part in the per-step agreement over the TP group.
class DpAttentionSync {
 public:
    explicit DpAttentionSync(const layers::DpAttentionParallel& dpa);

    struct GroupStep {
        std::int64_t tokens = 0;
        std::int64_t logit_rows = 0;
        bool extend = false;
        bool stopping = false;
        eplb::ExpertRecordCommand record = eplb::ExpertRecordCommand::kNone;
        std::int64_t control = 0;  // a control step's fingerprint (control_fingerprint); 0: none
    };
    struct Agreed {
        layers::DpAttentionStep step;
        bool any_tokens = false;
        // A group's expert-distribution recorder command: every rank applies it this round,
        // because the recorder's collectives span the TP group.
        eplb::ExpertRecordCommand record = eplb::ExpertRecordCommand::kNone;
        bool all_stopping = false;
        bool any_stopping = false;
        // Every group presented the same control step: every rank applies its own group's.
        bool control = false;
        // Some group presented a control step, and another group a different one.
        bool controls_differ = false;
        // The round runs through the model (and, under PP, down the stages).
        bool runs() const { return any_tokens || control || record != eplb::ExpertRecordCommand::kNone; }
    };
    // Every rank of the TP group, once per round, with its group's step (the same on every
    // attention-TP rank of the group).
    StatusOr<Agreed> exchange(const GroupStep& mine);
    std::int64_t rounds() const { return round_; }

 private:
    // "attn_dp group g (TP ranks a-b)".
    std::string group_name(int group) const;

    layers::DpAttentionParallel dpa_;
    std::int64_t round_ = 0;
    // TSR_DPA_FAULT (tests): this group skips (or stalls at) round fault_round_.
    enum class Fault { kNone, kSkip, kStall } fault_ = Fault::kNone;
    std::int64_t fault_round_ = -1;
};

// The group leader's runner: broadcast the step in the attention-TP group, agree, run (under
// PP: run stage 0 and hand on; the tokens come back from the last stage).
class DpAttentionLeaderRunner final : public BatchRunner {
 public:
    // `stages`: set under PP (this rank is on stage 0).
    DpAttentionLeaderRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool,
                            const layers::DpAttentionParallel& dpa, std::optional<StageLinks> stages);
    ~DpAttentionLeaderRunner() override;

    StatusOr<std::vector<SampledToken>> run(const ForwardBatch& batch) override;
    Status launch(const ForwardBatch& batch) override;
    StatusOr<std::vector<SampledToken>> collect() override;
    bool lockstep() const override { return true; }
    std::int64_t rounds() const override { return sync_.rounds(); }
    StatusOr<bool> idle_step() override;
    LockstepStats lockstep_stats() const override;
    bool last_round_extended() const override { return last_round_extended_; }
    bool lockstep_stopping() const override { return peers_stopping_.load(std::memory_order_relaxed); }
    // --enable-prefill-delayer: the leaders agree over `leaders` (the kAttnDp group of this
    // rank) before every round; idle and stopping rounds agree "nothing to admit" themselves.
    void enable_prefill_agreement(dist::ProcessGroup& leaders) { agreement_.emplace(leaders); }
    StatusOr<PrefillAgreement> agree_prefill(const PrefillIntent& mine) override;
    Status before_round() override;

    // Under PP: runs `batch` on stage 0 only and hands nothing on, for timing the stage
    // (dynamic chunking). Every group's leader profiles at the same time with the same batches.
    Status run_local(const ForwardBatch& batch);
    // Joins rounds (idle) until every group is stopping; then this group's followers return
    // from follow_dp_attention_leader() (and, under PP, the later stages stop). Idempotent.
    Status stop();

 private:
    // A launched round; `internal` ones (idle steps) are not the scheduler's to collect.
    struct InFlight {
        bool internal = false;
        std::size_t n_seqs = 0;
        std::optional<StatusOr<std::vector<SampledToken>>> result;  // unset: due from the last stage
        bool any_extend = false;  // some group ran a prefill in this round
    };
    enum class RoundKind {
        kStep,      // the scheduler's, collected by it
        kIdle,      // this group has nothing; joins the others
        kStopping,  // idle, and this group is stopping
        kLocal,     // stage 0 only, handed on to no one (the dynamic-chunking profile)
    };
    Status round(const ForwardBatch& batch, RoundKind kind, bool* others_busy);
    // A control step: rounds until every group presents the same one, then applied on every
    // rank; its result (a failed weight load is an error on every group's leader).
    StatusOr<std::vector<SampledToken>> control_rounds(const ForwardBatch& batch);
    // Receives the tokens of the oldest round still waiting for them (PP).
    Status receive_oldest();
    std::size_t waiting_rounds() const;

    models::Model& model_;
    const kvcache::KvView kv_;
    ThreadPool* const pool_;
    ModelRunner local_;
    layers::DpAttentionParallel dpa_;
    DpAttentionSync sync_;
    std::optional<StageLinks> stages_;
    std::optional<StageOutbox> outbox_;
    std::deque<InFlight> in_flight_;
    bool last_round_extended_ = false;  // the collected step's round (InFlight::any_extend)
    std::vector<std::int32_t> tokens_;
    bool stopped_ = false;
    std::atomic<std::int64_t> forwards_{0}, idle_steps_{0}, group_tokens_{0};
    std::atomic<bool> peers_stopping_{false};
    std::optional<PrefillAgreementGroup> agreement_;
};

// Every other rank of the TP group on stage 0 (attention-TP ranks 1..): runs its leader's
// steps (handing them on under PP) until all groups stop; returns the first error.
Status follow_dp_attention_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                                  const layers::DpAttentionParallel& dpa, std::optional<StageLinks> stages);

// The offline path with every logits row (`tessera generate --logits-out`): every attention-DP
// group runs the same sequence, so each rank knows every group's counts without a scheduler
// or an exchange, and every group's rows cross the gather and scatter of each layer.
class EveryGroupModel final : public models::Model {
 public:
    EveryGroupModel(models::Model& model, int attn_dp_size) : model_(model), groups_(attn_dp_size) {}

    const loader::ModelConfig& config() const override { return model_.config(); }
    kvcache::KvCacheShape kv_cache_shape() const override { return model_.kv_cache_shape(); }
    models::StageInfo stage() const override { return model_.stage(); }
    DType compute_dtype() const override { return model_.compute_dtype(); }
    std::size_t weight_bytes() const override { return model_.weight_bytes(); }
    std::size_t weight_bytes_per_token() const override { return model_.weight_bytes_per_token(); }
    double linear_flops_per_token() const override { return model_.linear_flops_per_token(); }
    double attention_flops_at(std::int64_t pos) const override { return model_.attention_flops_at(pos); }
    layers::MoeTraffic moe_traffic() const override { return model_.moe_traffic(); }
    using Model::forward;
    Status forward(const models::BatchInput& batch, const kvcache::KvView& kv, ThreadPool* pool,
                   std::vector<float>* out) override;

 private:
    models::Model& model_;
    const int groups_;
};

}  // namespace tessera::executor
