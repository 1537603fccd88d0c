#include "models/eplb_manager.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include "base/env.h"
#include "base/logging.h"
#include "dist/process_group.h"
#include "eplb/balancedness_report.h"
#include "eplb/expert_dispatch.h"

namespace tessera::models {

namespace {

using I64 = std::int64_t;

// A layer's experts move only when that lowers its busiest rank's load on the recorded window
// by at least this much: a steady load does not move experts back and forth on noise.
constexpr double kMinImprovement = 0.05;

// Tokens each EP rank's slots served in one layer, from the per-slot counts.
std::vector<I64> rank_loads(const std::vector<std::int32_t>& physical, int ep_size) {
    std::vector<I64> load(static_cast<std::size_t>(ep_size), 0);
    const auto per = static_cast<I64>(physical.size()) / ep_size;
    for (std::size_t s = 0; s < physical.size(); ++s) load[static_cast<I64>(s) / per] += physical[s];
    return load;
}

// The busiest EP rank's share of `count` f32 [num_logical] under a layer's placement, with each
// expert's tokens split evenly over its copies (what the balancer optimises).
double max_rank_load(const eplb::ExpertLocation& loc, I64 layer, const float* count) {
    std::vector<double> load(static_cast<std::size_t>(loc.ep_size()), 0.0);
    for (I64 s = 0; s < loc.num_physical(); ++s) {
        const std::int32_t e = loc.phy2log(layer)[s];
        load[loc.rank_of_physical(s)] += count[e] / loc.logcnt(layer)[e];
    }
    return *std::max_element(load.begin(), load.end());
}

// A transfer or staging buffer of at least `bytes`, kept across rebalances: an AlignedBuffer,
// because large ones are huge-page backed, and 4 KiB page faults cost more than the copy.
// A new buffer is touched at once, so that whoever grows it pays its page faults.
void grow(AlignedBuffer& buffer, std::size_t bytes) {
    if (buffer.size() >= bytes) return;
    buffer = AlignedBuffer(std::max(bytes, buffer.size() * 3 / 2));
    std::memset(buffer.data(), 0, buffer.size());
}

// Deterministic probe rows in [-1, 1): the same on every rank.
void probe_rows(float* x, I64 n) {
    std::uint64_t state = 0x2545F4914F6CDD1Dull;
    for (I64 i = 0; i < n; ++i) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        x[i] = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

}  // namespace

StatusOr<std::unique_ptr<EplbManager>> EplbManager::create(const eplb::EplbOptions& options,
                                                           const eplb::ExpertLocationShape& shape) {
    std::unique_ptr<EplbManager> m(new EplbManager(options, shape));
    TSR_ASSIGN_OR_RETURN(eplb::ExpertLocation location, eplb::init_expert_location(options.init_expert_location, shape));
    if (options.init_expert_location != "trivial")
        TSR_LOG_C(INFO, "eplb", "initial expert location from --init-expert-location ({} physical experts on {} EP ranks)",
                  shape.num_physical, shape.ep_size);
    m->dispatch_ = std::make_shared<eplb::ExpertDispatch>(std::make_shared<eplb::ExpertLocation>(std::move(location)),
                                                          options.dispatch);
    // EPLB and balancedness reports need the counts from the first pass on.
    if (options.enable || options.report != eplb::ReportMode::kOff) m->recorder_.start();
    if (options.enable)
        TSR_LOG_C(INFO, "eplb", "[EPLBManager] system started, will rebalance per {} iterations.",
                  options.rebalance_num_iterations);
    return m;
}

EplbManager::EplbManager(const eplb::EplbOptions& options, const eplb::ExpertLocationShape& shape)
    : options_(options),
      shape_(shape),
      recorder_(options.recorder_mode == eplb::RecorderMode::kOff && (options.enable || options.report != eplb::ReportMode::kOff)
                    ? eplb::RecorderMode::kStat
                    : options.recorder_mode,
                options.recorder_buffer_size, shape.num_layers, shape.num_logical) {}

void EplbManager::attach(std::vector<layers::MoeLayer*> moe_layers, const layers::LayerParallel& par) {
    layers_ = std::move(moe_layers);
    par_ = par;
    for (layers::MoeLayer* l : layers_) l->keep_topk(recorder_.mode() == eplb::RecorderMode::kPerToken);
    // With chunked rebalancing the buffers a chunk can need are known: fault them in now, so the
    // first rebalance does not stall a step on page faults.
    if (options_.enable && options_.layers_per_chunk && !layers_.empty() && layers_.front()->experts().count() > 0) {
        const std::size_t per_layer = static_cast<std::size_t>(layers_.front()->experts().count()) *
                                      layers_.front()->experts().slot(0).packed_bytes();
        const std::size_t bytes =
            per_layer * static_cast<std::size_t>(std::min<I64>(*options_.layers_per_chunk, static_cast<I64>(layers_.size())));
        for (AlignedBuffer* b : {&send_, &recv_, &staging_}) grow(*b, bytes);
    }
}

bool EplbManager::logs() const { return par_.tp.rank == 0; }

Status EplbManager::on_command(eplb::ExpertRecordCommand command) {
    if (command == eplb::ExpertRecordCommand::kNone) return Status::Ok();
    if (recorder_.mode() == eplb::RecorderMode::kOff)
        return Status::InvalidArgument(
            "expert distribution recording needs --expert-distribution-recorder-mode (stat, per_pass or per_token)");
    switch (command) {
        case eplb::ExpertRecordCommand::kStart:
            if (recorder_.recording() && logs())
                TSR_LOG_C(WARN, "eplb", "the server is already recording expert ids; dump the ids recorded so far "
                                        "with /stop_expert_distribution_record and /dump_expert_distribution_record");
            recorder_.start();
            return Status::Ok();
        case eplb::ExpertRecordCommand::kStop:
            if (!recorder_.recording() && logs())
                TSR_LOG_C(WARN, "eplb", "the server has not been recording expert ids; start with "
                                        "/start_expert_distribution_record");
            recorder_.stop();
            return Status::Ok();
        case eplb::ExpertRecordCommand::kDump:
            return dump();
        case eplb::ExpertRecordCommand::kNone:
            break;
    }
    return Status::Ok();
}

Status EplbManager::dump() {
    // stat: the stage's TP rank 0 writes the (already global) counts; per_pass / per_token:
    // every rank writes its own, as SGLang does.
    const bool writer = recorder_.mode() != eplb::RecorderMode::kStat || logs();
    Status result = Status::Ok();
    if (writer) {
        std::error_code ec;
        std::filesystem::create_directories(options_.dump_dir, ec);
        const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        std::string name = fmt::format("expert_distribution_recorder_{:.6f}", now);
        if (recorder_.mode() != eplb::RecorderMode::kStat) name += "_" + std::to_string(options_.global_rank);
        const std::filesystem::path path = std::filesystem::path(options_.dump_dir) / (name + ".json");
        std::ofstream out(path);
        std::vector<std::int32_t> phy2log = dispatch_->location().placement().phy2log;
        const I64 P = shape_.num_physical;
        for (const layers::MoeLayer* layer : layers_)
            std::copy_n(layer->dispatch()->location().phy2log(layer->layer()), P, phy2log.begin() + layer->layer() * P);
        out << recorder_.dump_json(options_.global_rank, phy2log);
        out.close();
        if (!out) {
            result = Status::Internal("writing the expert distribution to " + path.string() + " failed");
            TSR_LOG_C(ERROR, "eplb", "{}", result.message());
        } else {
            TSR_LOG_C(INFO, "eplb", "Write expert distribution to {}", path.string());
        }
    }
    recorder_.reset();
    return result;
}

Status EplbManager::record_pass() {
    const I64 E = shape_.num_logical, P = shape_.num_physical;
    const int ep = shape_.ep_size;
    // Per MoE layer: tokens, logical counts, physical counts.
    const I64 row = 1 + E + P;
    std::vector<std::int32_t> counts(layers_.size() * static_cast<std::size_t>(row), 0);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const layers::MoePassCounts& c = layers_[i]->pass_counts();
        std::int32_t* dst = counts.data() + i * row;
        dst[0] = static_cast<std::int32_t>(c.tokens);
        std::copy(c.logical.begin(), c.logical.end(), dst + 1);
        std::copy(c.physical.begin(), c.physical.end(), dst + 1 + E);
    }
    // Under all_to_all each rank routed only its own tokens.
    if (par_.moe.backend == layers::MoeA2aBackend::kAllToAll && par_.moe.ep_size > 1 && par_.moe.ep_group != nullptr)
        TSR_RETURN_IF_ERROR(par_.moe.ep_group->all_reduce(std::span<std::int32_t>(counts)));

    eplb::PassRecord pass;
    pass.pass_id = pass_id_;
    pass.logical_count.assign(static_cast<std::size_t>(shape_.num_layers * E), 0);
    if (recorder_.mode() == eplb::RecorderMode::kPerPass)
        pass.physical_count.assign(static_cast<std::size_t>(shape_.num_layers * P), 0);
    double sum = 0.0;
    int layers_with_tokens = 0;
    I64 physical_sum = 0;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
        const std::int32_t* c = counts.data() + i * row;
        pass.tokens = std::max<I64>(pass.tokens, c[0]);
        std::copy(c + 1, c + 1 + E, pass.logical_count.begin() + layers_[i]->layer() * E);
        const std::vector<std::int32_t> physical(c + 1 + E, c + 1 + E + P);
        if (!pass.physical_count.empty())
            std::copy(physical.begin(), physical.end(), pass.physical_count.begin() + layers_[i]->layer() * P);
        const std::vector<I64> load = rank_loads(physical, ep);
        for (I64 v : load) physical_sum += v;
        if (c[0] > 0) sum += eplb::balancedness(load), ++layers_with_tokens;
        if (recorder_.mode() == eplb::RecorderMode::kPerToken) {
            const auto& topk = layers_[i]->pass_counts().topk;
            pass.token_experts.insert(pass.token_experts.end(), topk.begin(), topk.end());
        }
    }
    if (layers_with_tokens > 0) pass.balancedness = sum / layers_with_tokens;
    if (pass.balancedness && options_.report != eplb::ReportMode::kOff && logs() && options_.metrics) {
        options_.metrics->add(pass_id_, *pass.balancedness, physical_sum);
        if (options_.report == eplb::ReportMode::kServerLog || options_.report == eplb::ReportMode::kBoth)
            TSR_LOG_C(INFO, "eplb", "{}", options_.metrics->log_line());
    }
    recorder_.record(std::move(pass));
    return Status::Ok();
}

Status EplbManager::on_forward_pass_end(layers::Scratch& scratch, ThreadPool* pool) {
    ++pass_id_;
    if (recorder_.recording() || options_.report != eplb::ReportMode::kOff) TSR_RETURN_IF_ERROR(record_pass());
    if (!options_.enable) return Status::Ok();
    if (in_flight_) {
        // Its experts crossed over during the pass that just ended.
        TSR_RETURN_IF_ERROR(end_chunk(scratch, pool));
        return pending_.empty() ? Status::Ok() : begin_chunk(scratch, pool);
    }
    if (pending_.empty()) {
        if (++since_rebalance_ < options_.rebalance_num_iterations) return Status::Ok();
        since_rebalance_ = 0;
        TSR_RETURN_IF_ERROR(start_rebalance());
        if (pending_.empty()) return Status::Ok();
    }
    return begin_chunk(scratch, pool);
}

Status EplbManager::start_rebalance() {
    rebalance_start_ = std::chrono::steady_clock::now();
    if (logs()) TSR_LOG_C(INFO, "eplb", "[EPLBManager] rebalance start");
    const std::optional<double> utilization = recorder_.average_balancedness();
    const double threshold = options_.min_rebalancing_utilization_threshold;
    if (utilization && std::abs(threshold - 1.0) > 1e-9 && *utilization > threshold) {
        if (logs())
            TSR_LOG_C(INFO, "eplb",
                      "[EPLBManager] Skipped ep rebalancing: current GPU utilization {:.2f} > minimum rebalance "
                      "threshold {:.2f}",
                      *utilization, threshold);
        return Status::Ok();
    }
    const std::vector<float> count = recorder_.logical_count_sum();
    recorder_.start();  // the next window starts now
    TSR_ASSIGN_OR_RETURN(eplb::ExpertLocation proposed, eplb::balanced_expert_location(count, shape_));
    // Per layer of this stage: the placement it runs with, or the proposal where that lowers
    // the busiest rank's load.
    eplb::Placement next = proposed.placement();
    const I64 E = shape_.num_logical, P = shape_.num_physical, X = next.max_copies;
    auto copy_row = [&](const eplb::ExpertLocation& from, I64 l) {
        std::copy_n(from.phy2log(l), P, next.phy2log.begin() + l * P);
        std::copy_n(from.log2phy(l), E * X, next.log2phy.begin() + l * E * X);
        std::copy_n(from.logcnt(l), E, next.logcnt.begin() + l * E);
    };
    std::vector<layers::MoeLayer*> moved;
    for (layers::MoeLayer* layer : layers_) {
        const I64 l = layer->layer();
        const float* c = count.data() + l * E;
        const eplb::ExpertLocation& current = layer->dispatch()->location();
        copy_row(current, l);
        if (max_rank_load(proposed, l, c) > (1.0 - kMinImprovement) * max_rank_load(current, l, c)) continue;
        copy_row(proposed, l);
        moved.push_back(layer);
    }
    if (moved.empty()) {
        if (logs())
            TSR_LOG_C(INFO, "eplb", "[EPLBManager] rebalance end: no layer's busiest rank would carry {:.0f}% less",
                      kMinImprovement * 100);
        return Status::Ok();
    }
    TSR_ASSIGN_OR_RETURN(eplb::ExpertLocation location, eplb::ExpertLocation::from_placement(std::move(next), shape_.ep_size));
    pending_dispatch_ = std::make_shared<eplb::ExpertDispatch>(std::make_shared<eplb::ExpertLocation>(std::move(location)),
                                                               options_.dispatch);
    const auto per = static_cast<std::size_t>(options_.layers_per_chunk.value_or(static_cast<I64>(moved.size())));
    for (std::size_t i = 0; i < moved.size(); i += std::max<std::size_t>(per, 1))
        pending_.emplace_back(moved.begin() + static_cast<std::ptrdiff_t>(i),
                              moved.begin() + static_cast<std::ptrdiff_t>(std::min(moved.size(), i + std::max<std::size_t>(per, 1))));
    return Status::Ok();
}

// One chunk of a rebalance: its layers, where each of their new slots' experts comes from,
// and its transfer.
struct EplbManager::Chunk {
    struct Move {
        std::size_t layer;  // index in `layers`
        I64 slot;           // new slot (global)
        int from;           // EP rank with the expert
        I64 from_local;     // its local slot there (old placement)
    };
    std::vector<layers::MoeLayer*> layers;
    std::vector<Move> remote;                                     // transfers between ranks
    std::vector<std::vector<std::pair<I64, I64>>> local;          // my new local slot <- my old local slot
    std::vector<std::vector<I64>> changed;                        // my local slots that change, per layer
    std::vector<std::int64_t> send_counts, recv_counts;           // bytes, per rank of the TP group
    std::size_t send_bytes = 0, recv_bytes = 0, staged_bytes = 0;
    std::vector<float> probe_in;                   // [probe tokens, hidden], the same on every rank
    std::vector<std::vector<float>> probe_before;  // per layer: its output on the old placement
    double begin_ms = 0.0;  // the forward thread's part of begin_chunk
    std::thread worker;
    Status transferred;
    double transfer_ms = 0.0;
    std::chrono::steady_clock::time_point begun;
};

EplbManager::~EplbManager() {
    // A transfer in flight reads the experts and writes the buffers; it ends (or times out on
    // its group) before they go.
    if (in_flight_ && in_flight_->worker.joinable()) in_flight_->worker.join();
}

Status EplbManager::begin_chunk(layers::Scratch& scratch, ThreadPool* pool) {
    auto chunk = std::make_unique<Chunk>();
    chunk->begun = std::chrono::steady_clock::now();
    chunk->layers = std::move(pending_.front());
    pending_.erase(pending_.begin());
    const std::vector<layers::MoeLayer*>& layers = chunk->layers;
    const eplb::ExpertLocation& next = pending_dispatch_->location();
    const int me = par_.moe.ep_rank, moe_tp = par_.moe.moe_tp_size;
    const I64 Lp = next.local_physical();
    const int group_size = par_.tp_group != nullptr ? par_.tp_group->size() : 1;
    auto group_rank = [&](int ep_rank) { return ep_rank * moe_tp + par_.moe.moe_tp_rank; };

    // Where each new slot's expert comes from: unchanged, a local copy, or the EP rank that
    // holds its lowest old copy. Every rank computes the whole plan.
    chunk->local.resize(layers.size());
    chunk->changed.resize(layers.size());
    for (std::size_t c = 0; c < layers.size(); ++c) {
        const I64 l = layers[c]->layer();
        const eplb::ExpertLocation& old = layers[c]->dispatch()->location();
        for (I64 s = 0; s < next.num_physical(); ++s) {
            const std::int32_t e = next.phy2log(l)[s];
            const int owner = static_cast<int>(s / Lp);
            I64 source = old.phy2log(l)[s] == e ? s : -1;  // the same slot, else any copy on the owner
            for (I64 i = owner * Lp; i < (owner + 1) * Lp && source < 0; ++i)
                if (old.phy2log(l)[i] == e) source = i;
            if (source >= 0) {
                if (owner != me) continue;
                chunk->local[c].emplace_back(s - me * Lp, source - me * Lp);
                if (s != source) chunk->changed[c].push_back(s - me * Lp);
                continue;
            }
            I64 lowest = 0;
            while (old.phy2log(l)[lowest] != e) ++lowest;
            chunk->remote.push_back({c, s, static_cast<int>(lowest / Lp), lowest % Lp});
            if (owner == me) chunk->changed[c].push_back(s - me * Lp);
        }
    }
    // Every expert of a layer packs to the same size.
    chunk->send_counts.assign(static_cast<std::size_t>(group_size), 0);
    chunk->recv_counts.assign(static_cast<std::size_t>(group_size), 0);
    for (const Chunk::Move& m : chunk->remote) {
        const auto bytes = static_cast<std::int64_t>(layers[m.layer]->experts().slot(0).packed_bytes());
        if (m.from == me) chunk->send_counts[group_rank(static_cast<int>(m.slot / Lp))] += bytes;
        if (m.slot / Lp == me) chunk->recv_counts[group_rank(m.from)] += bytes;
    }
    for (int r = 0; r < group_size; ++r) {
        chunk->send_bytes += static_cast<std::size_t>(chunk->send_counts[r]);
        chunk->recv_bytes += static_cast<std::size_t>(chunk->recv_counts[r]);
    }
    for (std::size_t c = 0; c < layers.size(); ++c)
        chunk->staged_bytes += chunk->changed[c].size() * layers[c]->experts().slot(0).packed_bytes();

    // The probe batch through each layer as it is now, on every rank (the MoE forward is
    // collective); end_chunk runs it again on the new placement.
    chunk->probe_in.resize(static_cast<std::size_t>(probe_tokens() * layers.front()->hidden_size()));
    probe_rows(chunk->probe_in.data(), static_cast<I64>(chunk->probe_in.size()));
    chunk->probe_before.resize(layers.size());
    for (std::size_t c = 0; c < layers.size(); ++c) {
        chunk->probe_before[c].resize(chunk->probe_in.size());
        TSR_RETURN_IF_ERROR(layers[c]->probe(chunk->probe_in.data(), probe_tokens(), chunk->probe_before[c].data(),
                                               scratch, pool, par_));
    }

    chunk->begin_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - chunk->begun).count();
    in_flight_ = std::move(chunk);
    if (options_.transfer_group != nullptr) {
        Chunk& flying = *in_flight_;
        flying.worker = std::thread([this, &flying] {
            // The lowest priority: the transfer takes what the forward threads leave (their
            // waits in collectives), not their cores; if it is not done by the next pass
            // boundary, the forward thread sleeps in join() and it runs then.
            if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19) != 0)
                TSR_LOG_C(DEBUG, "eplb", "could not lower the expert transfer thread's priority");
            flying.transferred = transfer(flying, options_.transfer_group);
        });
        return Status::Ok();
    }
    in_flight_->transferred = transfer(*in_flight_, par_.tp_group);
    return end_chunk(scratch, pool);
}

Status EplbManager::transfer(Chunk& chunk, dist::ProcessGroup* group) {
    const auto t0 = std::chrono::steady_clock::now();
    const eplb::ExpertLocation& next = pending_dispatch_->location();
    const int ep = shape_.ep_size, me = par_.moe.ep_rank;
    const I64 Lp = next.local_physical();
    // Grown (and faulted in) here, not on the forward thread: fresh pages fault in slowly.
    grow(send_, chunk.send_bytes);
    grow(recv_, chunk.recv_bytes);
    grow(staging_, chunk.staged_bytes);
    // In the order of the destination ranks: the experts each peer needs from this rank.
    std::size_t at = 0;
    for (int d = 0; d < ep; ++d) {
        for (const Chunk::Move& m : chunk.remote) {
            if (m.from != me || m.slot / Lp != d) continue;
            const layers::GatedMlp& expert = chunk.layers[m.layer]->experts().slot(m.from_local);
            expert.copy_packed_to(send_.data() + at);
            at += expert.packed_bytes();
        }
    }
    Status sent = Status::Ok();
    if (group != nullptr)
        sent = group->all_to_all_v({send_.as<std::uint8_t>(), chunk.send_bytes}, chunk.send_counts,
                                   {recv_.as<std::uint8_t>(), chunk.recv_bytes}, chunk.recv_counts);
    if (sent.ok() && env().eplb_fail_transfer && par_.tp.rank == 1)  // fault injection for tests
        sent = Status(StatusCode::kUnavailable, "transfer failed (TSR_EPLB_FAULT_FAIL_TRANSFER)");
    chunk.transfer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return sent;
}

Status EplbManager::end_chunk(layers::Scratch& scratch, ThreadPool* pool) {
    if (in_flight_->worker.joinable()) in_flight_->worker.join();
    const std::unique_ptr<Chunk> chunk = std::move(in_flight_);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<layers::MoeLayer*>& layers = chunk->layers;
    const int me = par_.moe.ep_rank, moe_tp = par_.moe.moe_tp_size;
    const I64 Lp = pending_dispatch_->location().local_physical();
    const int group_size = par_.tp_group != nullptr ? par_.tp_group->size() : 1;
    auto group_rank = [&](int ep_rank) { return ep_rank * moe_tp + par_.moe.moe_tp_rank; };
    auto fail = [&] {
        pending_.clear();  // the rest of this placement goes with the failed chunk
        if (logs()) TSR_LOG_C(INFO, "eplb", "[EPLBManager] rebalance end: rolled back, the old placement stays");
    };
    if (par_.tp_group != nullptr) {
        // Nothing is installed yet: every rank keeps the old placement if any rank's transfer
        // failed. Only when the ranks cannot even agree on that is the group gone.
        std::int32_t failed = chunk->transferred.ok() ? 0 : 1;
        const Status agreed = par_.tp_group->all_reduce(std::span<std::int32_t>(&failed, 1), dist::ReduceOp::kMax);
        if (!agreed.ok()) {
            pending_.clear();
            return agreed;
        }
        if (failed != 0) {
            TSR_LOG_C(WARN, "eplb", "[EPLBManager] moving the experts of layers {}..{} failed ({}); every rank keeps "
                                    "the old placement",
                      layers.front()->layer(), layers.back()->layer(),
                      chunk->transferred.ok() ? "on another rank" : chunk->transferred.message());
            fail();
            return Status::Ok();
        }
    }
    if (env().eplb_corrupt_transfer)  // fault injection for tests: the probe must catch it
        std::memset(recv_.data(), 0x7f, chunk->recv_bytes);

    // Install in place: the old weights of every slot that changes are copied to the staging
    // buffer first (to roll back with, and as the source of a local copy from a slot that is
    // itself replaced), then the slot's own memory is overwritten. Nothing is allocated here:
    // the transfer grew the buffers.
    std::vector<std::map<I64, std::size_t>> backup(layers.size());  // local slot -> offset in staging_
    {
        std::size_t off = 0;
        for (std::size_t c = 0; c < layers.size(); ++c) {
            for (I64 slot : chunk->changed[c]) {
                layers[c]->experts().slot(slot).copy_packed_to(staging_.data() + off);
                backup[c][slot] = off;
                off += layers[c]->experts().slot(0).packed_bytes();
            }
        }
    }
    std::vector<std::size_t> recv_offset(static_cast<std::size_t>(group_size), 0);
    {
        std::size_t off = 0;
        for (int r = 0; r < group_size; ++r) recv_offset[r] = off, off += static_cast<std::size_t>(chunk->recv_counts[r]);
    }
    std::vector<std::shared_ptr<const eplb::ExpertDispatch>> old_dispatch(layers.size());
    for (std::size_t c = 0; c < layers.size(); ++c) {
        for (const auto& [to, from] : chunk->local[c]) {
            if (to == from) continue;
            const auto old = backup[c].find(from);
            if (old != backup[c].end()) {
                layers[c]->write_slot(to, staging_.data() + old->second);
            } else {
                layers[c]->copy_slot(to, from);
            }
        }
        for (const Chunk::Move& m : chunk->remote) {
            if (m.layer != c || m.slot / Lp != me) continue;
            layers[c]->write_slot(m.slot % Lp, recv_.data() + recv_offset[group_rank(m.from)]);
            recv_offset[group_rank(m.from)] += layers[c]->experts().slot(0).packed_bytes();
        }
        old_dispatch[c] = layers[c]->shared_dispatch();
        layers[c]->set_dispatch(pending_dispatch_);
    }
    // The probe again: the same tokens must come out the same (up to summation order).
    std::int32_t mismatch = 0;
    double worst = 0.0;
    std::vector<float> after(chunk->probe_in.size());
    for (std::size_t c = 0; c < layers.size(); ++c) {
        const std::vector<float>& before = chunk->probe_before[c];
        TSR_RETURN_IF_ERROR(layers[c]->probe(chunk->probe_in.data(), probe_tokens(), after.data(), scratch, pool, par_));
        double scale = 0.0, diff = 0.0;
        for (std::size_t i = 0; i < after.size(); ++i) {
            scale = std::max(scale, static_cast<double>(std::abs(before[i])));
            diff = std::max(diff, static_cast<double>(std::abs(after[i] - before[i])));
        }
        worst = std::max(worst, diff / (scale + 1e-12));
        // Only the summation order may differ, and for FP8 experts the GEMM path: a copy
        // given up to 16 tokens multiplies by the exact scales, a busier one by a
        // bf16-rounded copy of the dequantized weight (kernels/matmul.cpp matmul_fp8), and
        // moving tokens between copies changes which (~2e-3). A wrong or corrupted expert
        // moves the output far more.
        const double tolerance = is_fp8(layers[c]->experts().slot(0).weight_dtype()) ? 1e-2 : 1e-3;
        if (!(diff <= tolerance * scale + 1e-5)) mismatch = 1;
    }
    if (par_.tp_group != nullptr) TSR_RETURN_IF_ERROR(par_.tp_group->all_reduce(std::span<std::int32_t>(&mismatch, 1), dist::ReduceOp::kMax));
    const auto now = std::chrono::steady_clock::now();
    const double install_ms = std::chrono::duration<double, std::milli>(now - t0).count();
    if (mismatch != 0) {
        for (std::size_t c = 0; c < layers.size(); ++c) {
            for (const auto& [slot, off] : backup[c]) layers[c]->write_slot(slot, staging_.data() + off);
            layers[c]->set_dispatch(old_dispatch[c]);
        }
        TSR_LOG_C(WARN, "eplb",
                  "[EPLBManager] rebalance of layers {}..{} rolled back: the probe batch's output changed by {:.3g} "
                  "(relative) after moving the experts",
                  layers.front()->layer(), layers.back()->layer(), worst);
        fail();
        return Status::Ok();
    }
    if (logs()) {
        // The forward thread pays the planning, the probes and the install; the transfer too
        // unless it ran beside a pass on its own group.
        const bool beside = options_.transfer_group != nullptr;
        TSR_LOG_C(INFO, "eplb", "[EPLBManager] rebalanced layers {}..{}: {} experts moved between ranks ({:.2f} MB "
                                "sent by this rank, transfer {:.1f} ms{}) in {:.1f} ms on the forward thread (start "
                                "{:.1f}, install {:.1f}), probe difference {:.2g}",
                  layers.front()->layer(), layers.back()->layer(), chunk->remote.size(), chunk->send_bytes / 1e6,
                  chunk->transfer_ms, beside ? " beside the pass" : "",
                  chunk->begin_ms + install_ms + (beside ? 0.0 : chunk->transfer_ms), chunk->begin_ms,
                  install_ms + (beside ? 0.0 : chunk->transfer_ms), worst);
    }
    if (pending_.empty()) {
        ++rebalances_;
        if (logs())
            TSR_LOG_C(INFO, "eplb", "[EPLBManager] rebalance end time={:.3f}s",
                      std::chrono::duration<double>(now - rebalance_start_).count());
    }
    return Status::Ok();
}

}  // namespace tessera::models
