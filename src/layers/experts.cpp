#include "layers/experts.h"

#include <algorithm>

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

void LocalExperts::forward(const float* x, std::int64_t m, const std::int32_t* local_ids, const float* weights,
                           std::int64_t top_k, float* out, Scratch& scratch, ThreadPool* pool) const {
    const std::int64_t H = hidden_;
    std::fill(out, out + m * H, 0.0f);
    // Token rows (and their weight) per local expert, in token order: a counting sort into
    // flat scratch arrays, so a decode step allocates nothing.
    const auto n_experts = static_cast<std::int64_t>(experts_.size());
    std::vector<std::int64_t>& begin = scratch.expert_begin;
    begin.assign(static_cast<std::size_t>(n_experts + 1), 0);
    for (std::int64_t i = 0; i < m * top_k; ++i)
        if (local_ids[i] >= 0) ++begin[local_ids[i] + 1];
    for (std::int64_t e = 0; e < n_experts; ++e) begin[e + 1] += begin[e];
    scratch.expert_tokens.resize(static_cast<std::size_t>(begin[n_experts]));
    scratch.expert_weights.resize(static_cast<std::size_t>(begin[n_experts]));
    scratch.expert_fill.assign(begin.begin(), begin.end() - 1);
    for (std::int64_t t = 0; t < m; ++t) {
        for (std::int64_t j = 0; j < top_k; ++j) {
            const std::int32_t e = local_ids[t * top_k + j];
            if (e < 0) continue;
            const std::int64_t slot = scratch.expert_fill[e]++;
            scratch.expert_tokens[slot] = static_cast<std::int32_t>(t);
            scratch.expert_weights[slot] = weights[t * top_k + j];
        }
    }
    for (std::int64_t e = 0; e < n_experts; ++e) {
        const std::int64_t first = begin[e], n = begin[e + 1] - begin[e];
        if (n == 0) continue;
        const std::int32_t* tokens = scratch.expert_tokens.data() + first;
        scratch.expert_in.resize(static_cast<std::size_t>(n * H));
        scratch.expert_out.resize(static_cast<std::size_t>(n * H));
        for (std::int64_t r = 0; r < n; ++r)
            std::copy(x + tokens[r] * H, x + (tokens[r] + 1) * H, scratch.expert_in.begin() + r * H);
        experts_[e].forward(scratch.expert_in.data(), n, scratch.expert_out.data(), scratch, pool);
        for (std::int64_t r = 0; r < n; ++r) {
            float* dst = out + tokens[r] * H;
            const float* src = scratch.expert_out.data() + r * H;
            const float w = scratch.expert_weights[first + r];
            for (std::int64_t i = 0; i < H; ++i) dst[i] += w * src[i];
        }
    }
}

}  // namespace tessera::layers
