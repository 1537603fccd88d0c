#include "layers/dp_attention.h"

#include <algorithm>
#include <numeric>

#include "dist/process_group.h"

namespace tessera::layers {

DpPaddingMode dp_padding_mode(bool any_extend, std::span<const std::int64_t> num_tokens) {
    if (any_extend) return DpPaddingMode::kSumLen;
    const std::int64_t sum = std::accumulate(num_tokens.begin(), num_tokens.end(), std::int64_t{0});
    const std::int64_t max = num_tokens.empty() ? 0 : *std::max_element(num_tokens.begin(), num_tokens.end());
    return sum * 2 >= max * static_cast<std::int64_t>(num_tokens.size()) ? DpPaddingMode::kMaxLen
                                                                          : DpPaddingMode::kSumLen;
}

const char* dp_padding_mode_name(DpPaddingMode mode) {
    return mode == DpPaddingMode::kMaxLen ? "max_len" : "sum_len";
}

DpBufferLayout dp_buffer_layout(DpPaddingMode mode, std::span<const std::int64_t> counts, int attn_tp_size) {
    DpBufferLayout l;
    l.mode = mode;
    l.counts.assign(counts.begin(), counts.end());
    l.offsets.resize(counts.size());
    if (mode == DpPaddingMode::kMaxLen) {
        const std::int64_t max = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
        const std::int64_t piece = attn_tp_size;
        l.slot_rows = (max + piece - 1) / piece * piece;
        for (std::size_t g = 0; g < counts.size(); ++g) l.offsets[g] = static_cast<std::int64_t>(g) * l.slot_rows;
        l.rows = l.slot_rows * static_cast<std::int64_t>(counts.size());
    } else {
        std::int64_t at = 0;
        for (std::size_t g = 0; g < counts.size(); ++g) {
            l.offsets[g] = at;
            at += counts[g];
        }
        l.rows = at;
    }
    return l;
}

Status dp_gather(std::span<const float> local, std::int64_t hidden, const DpBufferLayout& layout, bool partial,
                 const DpAttentionParallel& dpa, std::vector<float>& global) {
    const std::int64_t n = layout.local_count(dpa.dp_rank);
    if (static_cast<std::int64_t>(local.size()) < n * hidden)
        return Status::Internal("dp_gather: " + std::to_string(local.size()) + " local values for " +
                                std::to_string(n) + " rows");
    const bool writes = partial || dpa.tp_rank == 0;
    global.assign(static_cast<std::size_t>(layout.rows * hidden), 0.0f);
    if (layout.mode == DpPaddingMode::kSumLen) {
        if (writes) std::copy_n(local.begin(), n * hidden, global.begin() + layout.local_offset(dpa.dp_rank) * hidden);
        return dpa.tp_group->all_reduce(global);
    }
    // kMaxLen: this group's slot, summed inside attention TP into one piece per attention-TP
    // rank, then every piece of every slot gathered over TP (pieces in TP-rank order are the
    // slots in group order).
    const std::int64_t slot = layout.slot_rows * hidden;
    std::vector<float> own(static_cast<std::size_t>(slot), 0.0f);
    if (writes) std::copy_n(local.begin(), n * hidden, own.begin());
    std::span<const float> piece = own;
    std::vector<float> reduced;
    if (dpa.attn_tp_group != nullptr) {
        reduced.resize(static_cast<std::size_t>(slot / dpa.tp_size));
        TSR_RETURN_IF_ERROR(dpa.attn_tp_group->reduce_scatter(own, reduced));
        piece = reduced;
    }
    return dpa.tp_group->all_gather(piece, global);
}

Status dp_reduce_scatter(std::span<const float> global, std::int64_t hidden, const DpBufferLayout& layout,
                         const DpAttentionParallel& dpa, std::vector<float>& scratch, float* local) {
    if (layout.mode != DpPaddingMode::kMaxLen)
        return Status::Internal("dp_reduce_scatter needs the max_len layout (every slot the same size)");
    const std::int64_t slot = layout.slot_rows * hidden;
    const std::int64_t piece = slot / dpa.tp_size;
    scratch.resize(static_cast<std::size_t>(slot + piece));
    std::span<float> mine(scratch.data() + slot, static_cast<std::size_t>(piece));
    TSR_RETURN_IF_ERROR(dpa.tp_group->reduce_scatter(global, mine));
    const float* rows = mine.data();
    if (dpa.attn_tp_group != nullptr) {
        TSR_RETURN_IF_ERROR(dpa.attn_tp_group->all_gather(mine, {scratch.data(), static_cast<std::size_t>(slot)}));
        rows = scratch.data();
    }
    std::copy_n(rows, layout.local_count(dpa.dp_rank) * hidden, local);
    return Status::Ok();
}

void dp_scatter(std::span<const float> global, std::int64_t hidden, const DpBufferLayout& layout,
                const DpAttentionParallel& dpa, float* local) {
    std::copy_n(global.begin() + layout.local_offset(dpa.dp_rank) * hidden, layout.local_count(dpa.dp_rank) * hidden,
                local);
}

AttnTpSlice attn_tp_slice(std::int64_t rows, const DpAttentionParallel& dpa) {
    AttnTpSlice s;
    s.per = (rows + dpa.tp_size - 1) / dpa.tp_size;
    s.begin = std::min<std::int64_t>(rows, dpa.tp_rank * s.per);
    s.count = std::min<std::int64_t>(rows, s.begin + s.per) - s.begin;
    return s;
}

Status attn_tp_gather_slices(std::span<const float> slice, std::int64_t rows, std::int64_t hidden,
                             const DpAttentionParallel& dpa, std::vector<float>& scratch, float* out) {
    const AttnTpSlice s = attn_tp_slice(rows, dpa);
    if (static_cast<std::int64_t>(slice.size()) != s.per * hidden)
        return Status::Internal("attention-TP slice of " + std::to_string(slice.size()) + " values, expected " +
                                std::to_string(s.per * hidden));
    if (dpa.tp_size == 1) {
        std::copy(slice.begin(), slice.begin() + rows * hidden, out);
        return Status::Ok();
    }
    if (dpa.attn_tp_group == nullptr) return Status::Internal("attention-TP group missing");
    scratch.resize(static_cast<std::size_t>(dpa.tp_size * s.per * hidden));
    TSR_RETURN_IF_ERROR(dpa.attn_tp_group->all_gather(slice, scratch));
    std::copy(scratch.begin(), scratch.begin() + rows * hidden, out);
    return Status::Ok();
}

}  // namespace tessera::layers
