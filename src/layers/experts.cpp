#include "layers/experts.h"

#include <algorithm>
#include <atomic>

#include "base/thread_pool.h"

namespace tessera::layers {

StatusOr<LocalExperts> LocalExperts::load(const loader::WeightSource& source, const ExpertsSpec& s,
                                          std::int64_t first, const std::vector<std::int32_t>& logical, Range slice) {
    LocalExperts experts;
    experts.hidden_ = s.hidden;
    experts.first_ = first;
    for (std::int32_t e : logical) {
        const std::string p = s.prefix + std::to_string(e) + ".";
        TSR_ASSIGN_OR_RETURN(auto mlp, GatedMlp::load(source, {p + s.gate + ".weight", p + s.up + ".weight",
                                                              p + s.down + ".weight", s.hidden, s.intermediate,
                                                              slice, s.compute_dtype}));
        experts.experts_.push_back(std::move(mlp));
    }
    return experts;
}

std::size_t LocalExperts::weight_bytes() const {
    std::size_t bytes = 0;
    for (const auto& e : experts_) bytes += e.weight_bytes();
    return bytes;
}

namespace {

// Below this many active experts per thread the threads split each expert's GEMMs instead
// of taking whole experts: with few experts (a decode step, a rank's EP share) whole experts
// would leave threads idle, with many the per-GEMM hand-offs and the small GEMMs' split
// cost more than the imbalance.
constexpr std::size_t kExpertsPerWorker = 2;

}  // namespace

void LocalExperts::forward(const float* x, std::int64_t m, const std::int32_t* local_ids, const float* weights,
                           std::int64_t top_k, float* out, Scratch& scratch, ThreadPool* pool) const {
    const std::int64_t pass_tokens = std::max<std::int64_t>(1, pass_bytes_ / (top_k * hidden_ * 4));
    for (std::int64_t t0 = 0; t0 < m; t0 += pass_tokens) {
        const std::int64_t n = std::min(pass_tokens, m - t0);
        forward_pass(x + t0 * hidden_, n, local_ids + t0 * top_k, weights + t0 * top_k, top_k, out + t0 * hidden_,
                      scratch, pool);
    }
}

void LocalExperts::forward_pass(const float* x, std::int64_t m, const std::int32_t* local_ids, const float* weights,
                                std::int64_t top_k, float* out, Scratch& scratch, ThreadPool* pool) const {
    const std::int64_t H = hidden_;
    const auto n_experts = static_cast<std::int64_t>(experts_.size());
    // A counting sort of the entries by expert, in token order within an expert, into flat
    // scratch arrays, so a decode step allocates nothing.
    std::vector<std::int64_t>& begin = scratch.expert_begin;
    begin.assign(static_cast<std::size_t>(n_experts + 1), 0);
    for (std::int64_t i = 0; i < m * top_k; ++i)
        if (local_ids[i] >= 0) ++begin[local_ids[i] + 1];
    for (std::int64_t e = 0; e < n_experts; ++e) begin[e + 1] += begin[e];
    scratch.expert_tokens.resize(static_cast<std::size_t>(begin[n_experts]));
    scratch.expert_slot.resize(static_cast<std::size_t>(m * top_k));
    scratch.expert_fill.assign(begin.begin(), begin.end() - 1);
    for (std::int64_t i = 0; i < m * top_k; ++i) {
        const std::int32_t e = local_ids[i];
        if (e < 0) {
            scratch.expert_slot[i] = -1;
            continue;
        }
        const std::int64_t slot = scratch.expert_fill[e]++;
        scratch.expert_tokens[slot] = static_cast<std::int32_t>(i / top_k);
        scratch.expert_slot[i] = static_cast<std::int32_t>(slot);
    }
    scratch.expert_out.resize(static_cast<std::size_t>(begin[n_experts] * H));

    // The experts with tokens, the busiest first: threads taking whole experts take them in
    // this order, so the last ones handed out are the shortest.
    std::vector<std::int32_t>& order = scratch.expert_order;
    order.clear();
    for (std::int64_t e = 0; e < n_experts; ++e)
        if (begin[e + 1] > begin[e]) order.push_back(static_cast<std::int32_t>(e));
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {  // std::stable_sort allocates
        const std::int64_t rows_a = begin[a + 1] - begin[a], rows_b = begin[b + 1] - begin[b];
        return rows_a != rows_b ? rows_a > rows_b : a < b;
    });
    const auto run_expert = [&](std::int32_t e, Scratch::ExpertWorker& worker, ThreadPool* gemm_pool) {
        const std::int64_t first = begin[e], rows = begin[e + 1] - begin[e];
        worker.in.resize(static_cast<std::size_t>(rows * H));
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* src = x + static_cast<std::int64_t>(scratch.expert_tokens[first + r]) * H;
            std::copy(src, src + H, worker.in.begin() + r * H);
        }
        experts_[e].forward(worker.in.data(), rows, scratch.expert_out.data() + first * H, worker.mlp, gemm_pool);
    };
    const int workers = pool == nullptr ? 1 : pool->size();
    if (workers > 1 && order.size() >= kExpertsPerWorker * static_cast<std::size_t>(workers)) {
        // Which thread takes which expert varies from step to step: every thread's buffers
        // hold the busiest expert's rows, grown here, so a decode step allocates nothing.
        if (scratch.expert_workers.size() < static_cast<std::size_t>(workers))
            scratch.expert_workers.resize(static_cast<std::size_t>(workers));
        const std::int64_t most_rows = begin[order.front() + 1] - begin[order.front()];
        const std::int64_t gate_up_floats = experts_[order.front()].gate_up_rows_floats(most_rows);
        for (Scratch::ExpertWorker& w : scratch.expert_workers) {
            w.in.reserve(static_cast<std::size_t>(most_rows * H));
            w.mlp.gate_up.reserve(static_cast<std::size_t>(gate_up_floats));
        }
        std::atomic<std::size_t> next{0};
        pool->run([&](int worker, int) {
            for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < order.size();)
                run_expert(order[i], scratch.expert_workers[worker], nullptr);
        });
    } else {
        if (scratch.expert_workers.empty()) scratch.expert_workers.resize(1);  // never shrunk: see above
        for (std::int32_t e : order) run_expert(e, scratch.expert_workers[0], pool);
    }

    // out[t] = Σ_j weights[t, j] · (expert j's row of token t): the top-k weighted sum.
    const auto combine = [&](std::int64_t b, std::int64_t end) {
        for (std::int64_t t = b; t < end; ++t) {
            float* dst = out + t * H;
            std::fill(dst, dst + H, 0.0f);
            for (std::int64_t j = 0; j < top_k; ++j) {
                const std::int32_t slot = scratch.expert_slot[t * top_k + j];
                if (slot < 0) continue;
                const float* src = scratch.expert_out.data() + static_cast<std::int64_t>(slot) * H;
                const float w = weights[t * top_k + j];
                for (std::int64_t i = 0; i < H; ++i) dst[i] += w * src[i];
            }
        }
    };
    if (pool == nullptr || m < 8)
        combine(0, m);
    else
        pool->parallel_for(m, combine);
}

}  // namespace tessera::layers
