#include "executor/pp_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "base/logging.h"
#include "dist/process_group.h"
#include "executor/model_runner.h"
#include "executor/pipeline_trace.h"
#include "executor/step_codec.h"
#include "executor/tp_batch_runner.h"

namespace tessera::executor {

namespace {

// Stage to stage: a header (step bytes, hidden floats; 0 bytes = stop), then both payloads.
constexpr int kTagHeader = 11;
constexpr int kTagStep = 12;
constexpr int kTagHidden = 13;
// Last stage to stage 0: a header (result bytes), then the sampled tokens.
constexpr int kTagResultHeader = 14;
constexpr int kTagResult = 15;

// A stage waits for its next step as long as the server stays up; a peer that dies is still
// reported at once by the transport (closed connection), not by this timeout.
constexpr std::chrono::milliseconds kWaitForWork = std::chrono::hours(24 * 30);

// Sends kept per link beyond the steps that can be in flight (see StageOutbox).
constexpr int kSpareMessages = 2;

Status receive(dist::ProcessGroup& group, int src, int tag, std::span<std::uint8_t> buf) {
    TSR_ASSIGN_OR_RETURN(std::shared_ptr<dist::Work> work, group.irecv(buf, src, tag));
    return work->wait(kWaitForWork);
}

Status receive_header(dist::ProcessGroup& group, int src, int tag, std::int64_t* a, std::int64_t* b) {
    std::int64_t header[2] = {0, 0};
    TSR_RETURN_IF_ERROR(receive(group, src, tag, {reinterpret_cast<std::uint8_t*>(header), sizeof(header)}));
    if (header[0] < 0 || header[1] < 0) return Status::DataLoss("corrupt pipeline message header");
    *a = header[0];
    *b = header[1];
    return Status::Ok();
}

std::span<std::uint8_t> as_bytes(std::vector<float>& v) {
    return {reinterpret_cast<std::uint8_t*>(v.data()), v.size() * sizeof(float)};
}

}  // namespace

// ---- outbox -------------------------------------------------------------------------------

struct StageOutbox::Message {
    std::int64_t header[2] = {0, 0};
    std::vector<std::uint8_t> bytes;
    std::vector<float> floats;
    std::vector<std::shared_ptr<dist::Work>> works;
};

StageOutbox::StageOutbox(dist::ProcessGroup& group, int peer, int max_pending)
    : group_(group), peer_(peer), max_pending_(static_cast<std::size_t>(std::max(1, max_pending))) {}

StageOutbox::~StageOutbox() {
    Status s = drain();
    if (!s.ok()) TSR_LOG_C(WARN, "pipeline", "unfinished sends to stage {}: {}", peer_, s.message());
}

Status StageOutbox::post(std::int64_t a, std::int64_t b, std::vector<std::uint8_t> bytes, std::vector<float> floats,
                         int header_tag, int bytes_tag, int floats_tag) {
    while (pending_.size() >= max_pending_) {
        for (auto& w : pending_.front()->works) TSR_RETURN_IF_ERROR(w->wait(kWaitForWork));
        pending_.pop_front();
    }
    auto m = std::make_unique<Message>();
    m->header[0] = a;
    m->header[1] = b;
    m->bytes = std::move(bytes);
    m->floats = std::move(floats);
    const auto post_one = [&](std::span<const std::uint8_t> data, int tag) -> Status {
        TSR_ASSIGN_OR_RETURN(std::shared_ptr<dist::Work> w, group_.isend(data, peer_, tag));
        m->works.push_back(std::move(w));
        return Status::Ok();
    };
    TSR_RETURN_IF_ERROR(post_one({reinterpret_cast<const std::uint8_t*>(m->header), sizeof(m->header)}, header_tag));
    if (!m->bytes.empty()) TSR_RETURN_IF_ERROR(post_one(m->bytes, bytes_tag));
    if (!m->floats.empty()) TSR_RETURN_IF_ERROR(post_one(as_bytes(m->floats), floats_tag));
    pending_.push_back(std::move(m));
    return Status::Ok();
}

Status StageOutbox::drain() {
    while (!pending_.empty()) {
        for (auto& w : pending_.front()->works) TSR_RETURN_IF_ERROR(w->wait(kWaitForWork));
        pending_.pop_front();
    }
    return Status::Ok();
}

Status post_step(StageOutbox& next, std::vector<std::uint8_t> bytes, std::vector<float> hidden,
                 const std::vector<std::int32_t>& routing) {
    // The ids ride in the float buffer as bit patterns; the receiver splits it at the hidden
    // states' size, which the step's token count gives.
    const std::size_t n_hidden = hidden.size();
    hidden.resize(n_hidden + routing.size());
    if (!routing.empty()) std::memcpy(hidden.data() + n_hidden, routing.data(), routing.size() * sizeof(std::int32_t));
    const auto n_bytes = static_cast<std::int64_t>(bytes.size());
    const auto n_floats = static_cast<std::int64_t>(hidden.size());
    return next.post(n_bytes, n_floats, std::move(bytes), std::move(hidden), kTagHeader, kTagStep, kTagHidden);
}

void join_earlier_routing(std::span<const std::int32_t> earlier, std::int64_t n_tokens, int layer_begin,
                          std::int64_t top_k, std::vector<std::int32_t>& own) {
    if (earlier.empty() || earlier.size() != own.size() || n_tokens <= 0) return;
    const std::size_t width = own.size() / static_cast<std::size_t>(n_tokens);
    const auto before = static_cast<std::size_t>(layer_begin * top_k);  // the earlier stages' layers
    for (std::size_t t = 0; t < static_cast<std::size_t>(n_tokens); ++t)
        std::copy_n(earlier.begin() + t * width, before, own.begin() + t * width);
}

Status post_stop(StageOutbox& next) {
    TSR_RETURN_IF_ERROR(next.post(0, 0, {}, {}, kTagHeader, kTagStep, kTagHidden));
    return next.drain();
}

StatusOr<std::vector<SampledToken>> receive_tokens(dist::ProcessGroup& pp) {
    std::int64_t n_bytes = 0;
    std::int64_t unused = 0;
    TSR_RETURN_IF_ERROR(receive_header(pp, pp.size() - 1, kTagResultHeader, &n_bytes, &unused));
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n_bytes));
    TSR_RETURN_IF_ERROR(receive(pp, pp.size() - 1, kTagResult, bytes));
    return decode_results(bytes);
}

int outbox_depth(int max_in_flight_steps) { return max_in_flight_steps + kSpareMessages; }

// ---- stage 0, TP leader ------------------------------------------------------------------

PpFirstStageRunner::PpFirstStageRunner(models::Model& model, kvcache::KvView kv, ThreadPool* pool, StageLinks links)
    : model_(model),
      kv_(std::move(kv)),
      pool_(pool),
      links_(links),
      outbox_(*links.pp_group, 1, outbox_depth(links.max_in_flight_steps)) {}

PpFirstStageRunner::~PpFirstStageRunner() {
    Status s = stop();
    if (!s.ok()) TSR_LOG_C(WARN, "pipeline", "stopping the pipeline: {}", s.message());
}

StatusOr<std::vector<SampledToken>> PpFirstStageRunner::run(const ForwardBatch& batch) {
    if (launched_ != collected_) return Status::Internal("run() while pipeline steps are in flight; use collect()");
    TSR_RETURN_IF_ERROR(launch(batch));
    return collect();
}

Status PpFirstStageRunner::launch(const ForwardBatch& batch) { return note_failure(launch_step(batch)); }

StatusOr<std::vector<SampledToken>> PpFirstStageRunner::collect() {
    StatusOr<std::vector<SampledToken>> result = collect_step();
    if (!result.ok()) return note_failure(result.status());
    return result;
}

Status PpFirstStageRunner::launch_step(const ForwardBatch& batch) {
    if (stopped_) return Status::Internal("the pipeline was already stopped");
    std::vector<std::uint8_t> bytes = encode_step(batch, kStepWithSampling);
    if (links_.tp_group != nullptr) TSR_RETURN_IF_ERROR(broadcast_step(*links_.tp_group, bytes));
    TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens_));
    std::vector<float> hidden;
    std::vector<std::int32_t> routing;
    if (batch.record_routed_experts) input.routed_experts_out = &routing;
    const bool weights_load = batch.load_weights && batch.load_weights->phase == models::WeightsPhase::kLoad;
    {
        PipelineTrace::Scope span(links_.trace, SpanKind::kCompute, launched_, batch.total_new_tokens());
        Status forwarded = model_.forward(input, kv_, pool_, &hidden);
        if (!forwarded.ok() && !weights_load) return forwarded;
        if (weights_load) {
            // Every stage sees the update's load, told whether the earlier ones loaded.
            ForwardBatch told = batch;
            told.load_weights->earlier_stages_loaded = forwarded.ok();
            bytes = encode_step(told, kStepWithSampling);
            if (!forwarded.ok()) failed_load_ = std::move(forwarded);
        }
    }
    {
        PipelineTrace::Scope span(links_.trace, SpanKind::kSend, launched_, batch.total_new_tokens());
        TSR_RETURN_IF_ERROR(post_step(outbox_, std::move(bytes), std::move(hidden), routing));
    }
    ++launched_;
    return Status::Ok();
}

StatusOr<std::vector<SampledToken>> PpFirstStageRunner::collect_step() {
    if (collected_ == launched_) return Status::Internal("collect() without a launched step");
    dist::ProcessGroup& pp = *links_.pp_group;
    PipelineTrace::Scope span(links_.trace, SpanKind::kRecv, collected_, 0);
    auto tokens = receive_tokens(pp);
    ++collected_;
    if (tokens.ok() && failed_load_) return std::exchange(failed_load_, std::nullopt).value();
    return tokens;
}

Status PpFirstStageRunner::run_local(const ForwardBatch& batch) {
    if (stopped_) return Status::Internal("the pipeline was already stopped");
    if (launched_ != collected_) return Status::Internal("run_local() while pipeline steps are in flight");
    std::vector<std::uint8_t> bytes = encode_step(batch, kStepLocalOnly);
    if (links_.tp_group != nullptr) TSR_RETURN_IF_ERROR(broadcast_step(*links_.tp_group, bytes));
    TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens_));
    std::vector<float> hidden;
    PipelineTrace::Scope span(links_.trace, SpanKind::kCompute, -1, batch.total_new_tokens());
    return model_.forward(input, kv_, pool_, &hidden);
}

Status PpFirstStageRunner::stop() {
    // After a fatal error the other stages are stalled or gone; the launcher ends them.
    if (stopped_ || !fatal_error().ok()) return Status::Ok();
    // The last stage sends every step's tokens back; take them so its sends complete.
    while (collected_ < launched_) {
        auto r = collect();
        if (!r.ok()) {
            collected_ = launched_;
            TSR_LOG_C(WARN, "pipeline", "dropping in-flight results at stop: {}", r.status().message());
        }
    }
    stopped_ = true;
    std::vector<std::uint8_t> stop_step;
    Status tp = links_.tp_group != nullptr ? broadcast_step(*links_.tp_group, stop_step) : Status::Ok();
    Status pp = post_stop(outbox_);
    return tp.ok() ? pp : tp;
}

// ---- every other rank ---------------------------------------------------------------------

Status run_pipeline_worker(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool, StageLinks links) {
    dist::ProcessGroup& pp = *links.pp_group;
    const int stage = pp.rank();
    const bool last = stage == pp.size() - 1;
    // The rank that samples on the last stage: TP rank 0, or each attention-DP group's first.
    const int tp_rank = links.tp_group == nullptr ? 0 : links.tp_group->rank();
    const bool tp_root = links.dp_attention ? tp_rank % links.attn_tp_size == 0 : tp_rank == 0;
    const int max_pending = outbox_depth(links.max_in_flight_steps);
    std::optional<StageOutbox> next;
    if (!last) next.emplace(pp, stage + 1, max_pending);
    std::optional<StageOutbox> back;
    if (last && tp_root) back.emplace(pp, 0, max_pending);

    std::vector<std::int32_t> tokens;
    std::vector<float> out;
    std::vector<float> hidden_states;  // the sequences' hidden-state rows (return_hidden_states)
    SamplingScratch scratch;
    for (std::int64_t step = 0;;) {
        std::vector<std::uint8_t> bytes;
        std::vector<float> hidden_in;
        {
            PipelineTrace::Scope span(links.trace, SpanKind::kRecv, step, 0);
            if (stage == 0) {
                TSR_ASSIGN_OR_RETURN(bytes, receive_step(*links.tp_group));
            } else {
                std::int64_t n_bytes = 0;
                std::int64_t n_floats = 0;
                TSR_RETURN_IF_ERROR(receive_header(pp, stage - 1, kTagHeader, &n_bytes, &n_floats));
                bytes.resize(static_cast<std::size_t>(n_bytes));
                hidden_in.resize(static_cast<std::size_t>(n_floats));
                if (n_bytes > 0) TSR_RETURN_IF_ERROR(receive(pp, stage - 1, kTagStep, bytes));
                if (n_floats > 0) TSR_RETURN_IF_ERROR(receive(pp, stage - 1, kTagHidden, as_bytes(hidden_in)));
            }
        }
        if (bytes.empty()) {  // stop: pass it on, finish our sends
            if (next) TSR_RETURN_IF_ERROR(post_stop(*next));
            if (back) TSR_RETURN_IF_ERROR(back->drain());
            return Status::Ok();
        }
        const std::vector<std::uint8_t> message = links.dp_attention ? bytes : std::vector<std::uint8_t>();
        std::optional<layers::DpAttentionStep> groups;
        if (links.dp_attention) {
            TSR_ASSIGN_OR_RETURN(groups, decode_dp_step(message, &bytes));
        }
        std::int64_t flags = 0;
        TSR_ASSIGN_OR_RETURN(ForwardBatch batch, decode_step(bytes, &flags));
        TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens));
        // The earlier stages' routed experts follow the hidden states (post_step).
        const auto n_hidden = static_cast<std::size_t>(batch.total_new_tokens() * model.config().hidden_size);
        std::vector<std::int32_t> earlier_routing, routing;
        if (hidden_in.size() > n_hidden) {
            earlier_routing.resize(hidden_in.size() - n_hidden);
            std::memcpy(earlier_routing.data(), hidden_in.data() + n_hidden, earlier_routing.size() * sizeof(float));
            hidden_in.resize(n_hidden);
        }
        if (batch.record_routed_experts) input.routed_experts_out = &routing;
        input.hidden_in = hidden_in;
        input.dp_attention = groups ? &*groups : nullptr;
        if (back) input.hidden_out = &hidden_states;
        const bool local = (flags & kStepLocalOnly) != 0;
        const bool weights_load = batch.load_weights && batch.load_weights->phase == models::WeightsPhase::kLoad;
        bool weights_loaded = true;
        if (weights_load) input.weights_loaded = &weights_loaded;
        {
            PipelineTrace::Scope span(links.trace, SpanKind::kCompute, local ? -1 : step, batch.total_new_tokens());
            TSR_RETURN_IF_ERROR(model.forward(input, kv, pool, &out));
        }
        if (weights_load && !links.dp_attention) {
            // The next stage is told whether this one and the earlier ones loaded their shares.
            batch.load_weights->earlier_stages_loaded = weights_loaded;
            bytes = encode_step(batch, flags);
        }
        if (local) continue;
        join_earlier_routing(earlier_routing, batch.total_new_tokens(), model.stage().layer_begin,
                             model.config().moe.num_experts_per_tok, routing);
        PipelineTrace::Scope span(links.trace, SpanKind::kSend, step, batch.total_new_tokens());
        if (next) {
            TSR_RETURN_IF_ERROR(
                post_step(*next, links.dp_attention ? message : std::move(bytes), std::move(out), routing));
            out = {};
        } else if (back) {
            TSR_ASSIGN_OR_RETURN(std::vector<SampledToken> sampled,
                                 step_results(batch, {out, hidden_states, routing}, model.config(), pool, scratch));
            // A weight update's load answers the leader with one "token": 1 when every stage loaded.
            if (weights_load) sampled.push_back({.token = weights_loaded ? 1 : 0});
            std::vector<std::uint8_t> result = encode_results(sampled);
            const auto n_result = static_cast<std::int64_t>(result.size());
            TSR_RETURN_IF_ERROR(back->post(n_result, 0, std::move(result), {}, kTagResultHeader, kTagResult, kTagResult));
        }
        ++step;
    }
}

}  // namespace tessera::executor
