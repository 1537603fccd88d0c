#include "layers/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dist/process_group.h"
#include "eplb/expert_dispatch.h"
#include "loader/weight_source.h"

namespace tessera::layers {

StatusOr<MoeLayer> MoeLayer::load(const loader::WeightSource& source, const MoeSpec& spec, const LayerParallel& par,
                                  std::shared_ptr<const eplb::ExpertDispatch> dispatch) {
    MoeLayer moe;
    const std::int64_t E = spec.routing.num_experts;
    const std::int64_t H = spec.experts.hidden;
    moe.hidden_ = H;
    moe.routing_ = spec.routing;
    moe.layer_ = spec.layer;
    const MoeParallel& mp = par.moe;
    const std::int64_t P = dispatch ? dispatch->location().num_physical() : E;
    if (dispatch && (dispatch->location().num_logical() != E || dispatch->location().ep_size() != mp.ep_size ||
                     spec.layer >= dispatch->location().num_layers()))
        return Status::Internal("the expert placement does not match layer " + std::to_string(spec.layer));
    if (P % mp.ep_size != 0)
        return Status::InvalidArgument("--ep-size " + std::to_string(mp.ep_size) + " must divide the model's " +
                                       std::to_string(E) + " experts" +
                                       (P != E ? " plus --ep-num-redundant-experts (" + std::to_string(P) + ")" : ""));
    TSR_ASSIGN_OR_RETURN(moe.router_, Linear::load(source, {{{spec.prefix + spec.router + ".weight", E}}, H, 0, -1,
                                                            false, DType::kF32}));
    if (spec.correction_bias) {
        TSR_ASSIGN_OR_RETURN(moe.correction_bias_,
                             load_f32_vector(source, spec.prefix + spec.router + ".e_score_correction_bias", E));
    }
    moe.experts_per_rank_ = P / mp.ep_size;
    std::vector<std::int32_t> logical(static_cast<std::size_t>(moe.experts_per_rank_));
    for (std::int64_t i = 0; i < moe.experts_per_rank_; ++i) {
        const std::int64_t slot = mp.ep_rank * moe.experts_per_rank_ + i;
        logical[i] = dispatch ? dispatch->location().phy2log(spec.layer)[slot] : static_cast<std::int32_t>(slot);
    }
    moe.dispatch_ = std::move(dispatch);
    moe.counts_.logical.assign(static_cast<std::size_t>(E), 0);
    moe.counts_.physical.assign(static_cast<std::size_t>(P), 0);
    TSR_ASSIGN_OR_RETURN(Range slice, even_shard("moe_intermediate_size", spec.experts.intermediate,
                                                 TpShard{mp.moe_tp_rank, mp.moe_tp_size}));
    ExpertsSpec experts = spec.experts;
    if (experts.prefix.empty()) experts.prefix = spec.prefix + "experts.";
    experts.compute_dtype = spec.compute_dtype;
    TSR_ASSIGN_OR_RETURN(moe.experts_, LocalExperts::load(source, experts, mp.ep_rank * moe.experts_per_rank_,
                                                          logical, slice));
    if (spec.shared_intermediate > 0) {
        LayerParallel shared_par = par;
        if (mp.shared_experts_replicated()) {
            shared_par.tp = TpShard{};
            shared_par.tp_group = nullptr;
        }
        TSR_ASSIGN_OR_RETURN(auto shared, GatedMlp::load_dense(source, spec.prefix + spec.shared + ".", H,
                                                               spec.shared_intermediate, spec.compute_dtype,
                                                               shared_par));
        moe.shared_ = std::move(shared);
        if (spec.shared_gate) {
            TSR_ASSIGN_OR_RETURN(auto gate, source.get(spec.prefix + "shared_expert_gate.weight", {1, H}));
            moe.shared_gate_.resize(static_cast<std::size_t>(H));
            convert_to_f32(gate->data, gate->dtype, moe.shared_gate_.data(), moe.shared_gate_.size());
        }
    }
    return moe;
}

std::size_t MoeLayer::weight_bytes() const {
    return router_.weight_bytes() + experts_.weight_bytes() + (shared_ ? shared_->weight_bytes() : 0);
}

std::size_t MoeLayer::weight_bytes_per_token() const {
    return router_.weight_bytes() + static_cast<std::size_t>(routing_.top_k) * experts_.expert_bytes() +
           (shared_ ? shared_->weight_bytes() : 0);
}

double MoeLayer::flops_per_token() const {
    return 2.0 * static_cast<double>(router_.in_features()) * router_.out_features() +
           static_cast<double>(routing_.top_k) * experts_.expert_flops() + (shared_ ? shared_->flops_per_token() : 0.0);
}

namespace {

// out[t] += g(t) · shared[t], g = sigmoid(gate · h[t]) (Qwen2MoeSparseMoeBlock) or 1.
void add_shared(const float* h, const float* shared, const std::vector<float>& gate, std::int64_t n,
                std::int64_t H, float* out) {
    for (std::int64_t t = 0; t < n; ++t) {
        float g = 1.0f;
        if (!gate.empty()) {
            float dot = 0.0f;
            for (std::int64_t i = 0; i < H; ++i) dot += gate[i] * h[t * H + i];
            g = 1.0f / (1.0f + std::exp(-dot));
        }
        for (std::int64_t i = 0; i < H; ++i) out[t * H + i] += g * shared[t * H + i];
    }
}

}  // namespace

void MoeLayer::route(const float* h, std::int64_t n, std::int64_t row0, std::int64_t rows, Scratch& scratch,
                     ThreadPool* pool, std::span<const std::uint8_t> padding, int owner) {
    const std::int64_t E = routing_.num_experts, k = routing_.top_k;
    scratch.router_logits.resize(static_cast<std::size_t>(n * E));
    scratch.topk_ids.resize(static_cast<std::size_t>(n * k));
    scratch.topk_weights.resize(static_cast<std::size_t>(n * k));
    std::fill(counts_.logical.begin(), counts_.logical.end(), 0);
    std::fill(counts_.physical.begin(), counts_.physical.end(), 0);
    counts_.tokens = n;
    counts_.topk.clear();
    if (n == 0) return;
    router_.forward(h, n, scratch.router_logits.data(), pool);
    const float* bias = correction_bias_.empty() ? nullptr : correction_bias_.data();
    if (dispatch_ && dispatch_->algorithm() == eplb::DispatchAlgorithm::kFake) {
        eplb::router_noise(scratch.router_logits.data(), n, E, row0, layer_, passes_);
        bias = nullptr;
    }
    route_tokens(scratch.router_logits.data(), n, routing_, bias, scratch.topk_ids.data(), scratch.topk_weights.data());
    const auto pad = [&](std::int64_t t) { return !padding.empty() && padding[row0 + t] != 0; };
    for (std::int64_t t = 0; t < n; ++t) {
        if (pad(t)) {
            --counts_.tokens;
            continue;
        }
        for (std::int64_t j = 0; j < k; ++j) ++counts_.logical[scratch.topk_ids[t * k + j]];
    }
    if (keep_topk_) {  // the logical ids of the real rows
        for (std::int64_t t = 0; t < n; ++t)
            if (!pad(t))
                counts_.topk.insert(counts_.topk.end(), scratch.topk_ids.begin() + t * k,
                                    scratch.topk_ids.begin() + (t + 1) * k);
    }
    if (dispatch_) dispatch_->to_physical(layer_, scratch.topk_ids.data(), n, k, row0, rows, passes_, owner);
    for (std::int64_t t = 0; t < n; ++t)
        if (pad(t)) std::fill_n(scratch.topk_ids.begin() + t * k, k, -1);
    for (std::int32_t id : scratch.topk_ids)
        if (id >= 0) ++counts_.physical[id];
}

void MoeLayer::logical_topk(const float* h, std::int64_t n, std::int32_t* ids, Scratch& scratch,
                            ThreadPool* pool) const {
    if (n == 0) return;
    scratch.router_logits.resize(static_cast<std::size_t>(n * routing_.num_experts));
    scratch.topk_weights.resize(static_cast<std::size_t>(n * routing_.top_k));
    router_.forward(h, n, scratch.router_logits.data(), pool);
    const float* bias = correction_bias_.empty() ? nullptr : correction_bias_.data();
    route_tokens(scratch.router_logits.data(), n, routing_, bias, ids, scratch.topk_weights.data());
}

Status MoeLayer::probe(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                       const LayerParallel& par) {
    const std::int64_t passes = passes_;
    const MoeTraffic traffic = traffic_;
    passes_ = -2;  // forward() routes it as pass -1, which no serving pass is
    const Status s = forward(h, n, out, scratch, pool, par);
    passes_ = passes;
    traffic_ = traffic;
    return s;
}

Status MoeLayer::forward(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                         const LayerParallel& par, std::span<const std::uint8_t> padding) {
    if (!padding.empty() && static_cast<std::int64_t>(padding.size()) != n)
        return Status::Internal("MoE padding mask of " + std::to_string(padding.size()) + " rows for " +
                                std::to_string(n));
    traffic_.tokens += n;
    ++passes_;
    if (par.moe.backend == MoeA2aBackend::kAllToAll && par.moe.ep_size > 1) {
        if (par.moe.ep_group == nullptr || par.moe.ep_group->size() != par.moe.ep_size)
            return Status::Internal("the all_to_all dispatcher needs an EP group of ep_size ranks");
        return dispatch_all_to_all(h, n, out, scratch, pool, par, padding);
    }
    const std::int64_t H = hidden_, k = routing_.top_k;
    route(h, n, 0, n, scratch, pool, padding);
    // Masked EP: this rank's slots by local index, every other id -1.
    scratch.local_ids.resize(scratch.topk_ids.size());
    const std::int64_t first = experts_.first(), count = experts_.count();
    for (std::size_t i = 0; i < scratch.topk_ids.size(); ++i) {
        const std::int64_t local = scratch.topk_ids[i] - first;
        scratch.local_ids[i] = local >= 0 && local < count ? static_cast<std::int32_t>(local) : -1;
    }
    experts_.forward(h, n, scratch.local_ids.data(), scratch.topk_weights.data(), k, out, scratch, pool);
    if (shared_) {
        scratch.shared.resize(static_cast<std::size_t>(n * H));
        shared_->forward(h, n, scratch.shared.data(), scratch, pool);
        add_shared(h, scratch.shared.data(), shared_gate_, n, H, out);
    }
    if (par.tp_group != nullptr) traffic_.reduce_bytes += n * H * 4;
    return par.all_reduce({out, static_cast<std::size_t>(n * H)});
}

Status MoeLayer::forward_scattered(const float* h, std::int64_t n, std::int64_t row0, std::int64_t rows, float* out,
                                   Scratch& scratch, ThreadPool* pool, const LayerParallel& par) {
    if (par.moe.backend != MoeA2aBackend::kAllToAll || par.moe.ep_size <= 1 || par.moe.ep_group == nullptr ||
        par.moe.ep_group->size() != par.moe.ep_size)
        return Status::Internal("scattered MoE tokens need the all_to_all dispatcher over an EP group of ep_size ranks");
    traffic_.tokens += n;
    ++passes_;
    // The rows are this rank's own: its static dispatch table serves them.
    return exchange(h, n, row0, rows, out, scratch, pool, par, {}, par.moe.ep_rank);
}

Status MoeLayer::dispatch_all_to_all(const float* h, std::int64_t n, float* out, Scratch& scratch, ThreadPool* pool,
                                     const LayerParallel& par, std::span<const std::uint8_t> padding) {
    dist::ProcessGroup& group = *par.moe.ep_group;
    const int p = group.size(), me = group.rank();
    const std::int64_t H = hidden_;
    const std::int64_t per = (n + p - 1) / p;
    const std::int64_t own_begin = std::min<std::int64_t>(n, me * per);
    const std::int64_t owned = std::min<std::int64_t>(n, own_begin + per) - own_begin;
    std::vector<float> own_out(static_cast<std::size_t>(per * H), 0.0f);
    TSR_RETURN_IF_ERROR(
        exchange(h + own_begin * H, owned, own_begin, n, own_out.data(), scratch, pool, par, padding, -1));
    // Attention under TP needs every token's row on every rank.
    std::vector<float> gathered(static_cast<std::size_t>(p * per * H));
    TSR_RETURN_IF_ERROR(group.all_gather(own_out, gathered));
    traffic_.gather_bytes += per * H * 4 * (p - 1);
    std::copy(gathered.begin(), gathered.begin() + n * H, out);
    return Status::Ok();
}

Status MoeLayer::exchange(const float* h, std::int64_t owned, std::int64_t row0, std::int64_t rows, float* out,
                          Scratch& scratch, ThreadPool* pool, const LayerParallel& par,
                          std::span<const std::uint8_t> padding, int owner) {
    dist::ProcessGroup& group = *par.moe.ep_group;
    const int p = group.size(), me = group.rank();
    const std::int64_t H = hidden_, k = routing_.top_k;
    std::fill_n(out, owned * H, 0.0f);

    // Route the owned tokens only: every other rank routes its own.
    route(h, owned, row0, rows, scratch, pool, padding, owner);
    // One record per (owned token, EP rank holding one of its experts): the hidden row, then
    // top_k ids local to that rank (-1: not there) and top_k weights.
    const std::int64_t record = H * 4 + k * 8;
    std::vector<std::vector<std::int32_t>> rows_to(static_cast<std::size_t>(p));
    for (std::int64_t t = 0; t < owned; ++t) {
        for (int d = 0; d < p; ++d) {
            for (std::int64_t j = 0; j < k; ++j) {
                const std::int32_t id = scratch.topk_ids[t * k + j];
                if (id >= 0 && id / experts_per_rank_ == d) {
                    rows_to[d].push_back(static_cast<std::int32_t>(t));
                    break;
                }
            }
        }
    }
    std::vector<std::int64_t> send_records(static_cast<std::size_t>(p)), recv_records(static_cast<std::size_t>(p));
    std::int64_t total_send = 0;
    for (int d = 0; d < p; ++d) total_send += send_records[d] = static_cast<std::int64_t>(rows_to[d].size());
    {
        const std::vector<std::int64_t> eight(static_cast<std::size_t>(p), 8);
        TSR_RETURN_IF_ERROR(group.all_to_all_v({reinterpret_cast<const std::uint8_t*>(send_records.data()), p * 8ul},
                                               eight, {reinterpret_cast<std::uint8_t*>(recv_records.data()), p * 8ul},
                                               eight));
    }
    scratch.send.resize(static_cast<std::size_t>(total_send * record));
    std::uint8_t* w = scratch.send.data();
    for (int d = 0; d < p; ++d) {
        for (std::int32_t t : rows_to[d]) {
            std::memcpy(w, h + t * H, static_cast<std::size_t>(H) * 4);
            auto* ids = reinterpret_cast<std::int32_t*>(w + H * 4);
            auto* weights = reinterpret_cast<float*>(w + H * 4 + k * 4);
            for (std::int64_t j = 0; j < k; ++j) {
                const std::int32_t id = scratch.topk_ids[t * k + j];
                ids[j] = id >= 0 && id / experts_per_rank_ == d ? static_cast<std::int32_t>(id - d * experts_per_rank_)
                                                                : -1;
                weights[j] = scratch.topk_weights[t * k + j];
            }
            w += record;
        }
    }
    std::int64_t m = 0;
    for (int d = 0; d < p; ++d) m += recv_records[d];
    std::vector<std::int64_t> send_bytes(static_cast<std::size_t>(p)), recv_bytes(static_cast<std::size_t>(p));
    for (int d = 0; d < p; ++d) {
        send_bytes[d] = send_records[d] * record;
        recv_bytes[d] = recv_records[d] * record;
        if (d != me) traffic_.dispatch_bytes += send_bytes[d];
    }
    scratch.recv.resize(static_cast<std::size_t>(m * record));
    TSR_RETURN_IF_ERROR(group.all_to_all_v(scratch.send, send_bytes, scratch.recv, recv_bytes));

    // Run this rank's experts on the received records.
    std::vector<float> x(static_cast<std::size_t>(m * H)), weights(static_cast<std::size_t>(m * k));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(m * k));
    for (std::int64_t r = 0; r < m; ++r) {
        const std::uint8_t* rec = scratch.recv.data() + r * record;
        std::memcpy(x.data() + r * H, rec, static_cast<std::size_t>(H) * 4);
        std::memcpy(ids.data() + r * k, rec + H * 4, static_cast<std::size_t>(k) * 4);
        std::memcpy(weights.data() + r * k, rec + H * 4 + k * 4, static_cast<std::size_t>(k) * 4);
    }
    scratch.routed.resize(static_cast<std::size_t>(m * H));
    experts_.forward(x.data(), m, ids.data(), weights.data(), k, scratch.routed.data(), scratch, pool);

    // Combine: each result row goes back to the rank that sent its record, in record order.
    for (int d = 0; d < p; ++d) {
        send_bytes[d] = recv_records[d] * H * 4;
        recv_bytes[d] = send_records[d] * H * 4;
        if (d != me) traffic_.combine_bytes += send_bytes[d];
    }
    std::vector<float> returned(static_cast<std::size_t>(total_send * H));
    TSR_RETURN_IF_ERROR(group.all_to_all_v(
        {reinterpret_cast<const std::uint8_t*>(scratch.routed.data()), static_cast<std::size_t>(m * H * 4)}, send_bytes,
        {reinterpret_cast<std::uint8_t*>(returned.data()), returned.size() * 4}, recv_bytes));
    if (shared_ && owned > 0) {  // whole on every rank: the owner runs it on its rows
        scratch.shared.resize(static_cast<std::size_t>(owned * H));
        shared_->forward(h, owned, scratch.shared.data(), scratch, pool);
        add_shared(h, scratch.shared.data(), shared_gate_, owned, H, out);
    }
    const float* src = returned.data();
    for (int d = 0; d < p; ++d) {
        for (std::int32_t t : rows_to[d]) {
            float* dst = out + t * H;
            for (std::int64_t i = 0; i < H; ++i) dst[i] += src[i];
            src += H;
        }
    }
    return Status::Ok();
}

}  // namespace tessera::layers
