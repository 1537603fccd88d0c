#pragma once
// layers/dp_attention.h — DP-attention's layout bridge, as SGLang's layers/dp_attention.py:
// attention runs per attn_dp group on that group's own tokens; before an MLP / MoE layer that
// spans the whole TP group every group's rows are gathered onto every rank (dp_gather), and
// after it each group takes its rows back (dp_scatter, or dp_reduce_scatter when the MLP left
// its output unreduced). The global buffer is laid out by one of SGLang's two padding modes:
//   kMaxLen: every group's slot padded to the longest (all_gather; the MLP's all-reduce
//            becomes a reduce_scatter);
//   kSumLen: slots back to back (each rank writes its slot into a zeroed buffer, all_reduce).
// Pure layout functions plus the collectives over the TP / attention-TP groups; one thread.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::layers {

// This rank's place in the attention view of its TP group (tp = attn_dp × attn_tp).
struct DpAttentionParallel {
    int dp_rank = 0;  // attn_dp_rank: which group's requests this rank runs
    int dp_size = 1;  // attn_dp_size (1: DP-attention off)
    int tp_rank = 0;  // attn_tp_rank
    int tp_size = 1;  // attn_tp_size
    dist::ProcessGroup* attn_tp_group = nullptr;  // nullptr when attn_tp_size == 1
    dist::ProcessGroup* tp_group = nullptr;       // the whole TP group: gathers and scatters span it
    // --enable-dp-lm-head: the LM head is vocab-parallel over the attention-TP group only,
    // so the logits rows need no gather across groups.
    bool dp_lm_head = false;

    bool enabled() const { return dp_size > 1; }
};

// What every group runs in one step, agreed before the forward (SGLang's
// global_num_tokens / global_num_tokens_for_logprob / is_extend_in_batch).
struct DpAttentionStep {
    std::vector<std::int64_t> num_tokens;      // [attn_dp_size]
    std::vector<std::int64_t> num_logit_rows;  // [attn_dp_size]
    bool any_extend = false;                   // some group runs a prefill chunk
};

enum class DpPaddingMode { kMaxLen, kSumLen };

// layers/dp_attention.py get_dp_padding_mode for tessera's dispatchers (none / all_to_all):
// a prefill anywhere in the batch → kSumLen; otherwise kMaxLen iff sum · 2 ≥ max · groups
// (padding costs at most as much as the summed rows; ties prefer kMaxLen).
DpPaddingMode dp_padding_mode(bool any_extend, std::span<const std::int64_t> num_tokens);
const char* dp_padding_mode_name(DpPaddingMode mode);

// Where each group's rows sit in the global buffer.
struct DpBufferLayout {
    DpPaddingMode mode = DpPaddingMode::kSumLen;
    std::vector<std::int64_t> counts;   // real rows per group
    std::vector<std::int64_t> offsets;  // first row of each group's slot
    std::int64_t slot_rows = 0;         // kMaxLen: rows per slot (max count, rounded up to attn_tp)
    std::int64_t rows = 0;              // rows of the whole buffer

    std::int64_t local_offset(int dp_rank) const { return offsets[static_cast<std::size_t>(dp_rank)]; }
    std::int64_t local_count(int dp_rank) const { return counts[static_cast<std::size_t>(dp_rank)]; }
};

// `attn_tp_size` rounds kMaxLen slots so each attention-TP rank holds an equal piece of one.
DpBufferLayout dp_buffer_layout(DpPaddingMode mode, std::span<const std::int64_t> counts, int attn_tp_size);

// dp_gather_partial (`partial`: the local rows are this attention-TP rank's partial sums, e.g.
// o_proj before its all-reduce; every rank contributes) or dp_gather_replicate (the rows are
// the same on every attention-TP rank; only attn_tp_rank 0 contributes). `local` f32
// [local count, hidden] → `global` f32 [layout.rows, hidden] on every rank of the TP group,
// pad rows zero.
Status dp_gather(std::span<const float> local, std::int64_t hidden, const DpBufferLayout& layout, bool partial,
                 const DpAttentionParallel& dpa, std::vector<float>& global);

// dp_reduce_scatter_tensor (kMaxLen only): `global` holds this rank's unreduced share of every
// row; the sum over the TP group of this group's rows goes to `local` f32 [local count, hidden].
Status dp_reduce_scatter(std::span<const float> global, std::int64_t hidden, const DpBufferLayout& layout,
                         const DpAttentionParallel& dpa, std::vector<float>& scratch, float* local);

// dp_scatter: `global` is already complete on every rank; copies this group's rows out.
void dp_scatter(std::span<const float> global, std::int64_t hidden, const DpBufferLayout& layout,
                const DpAttentionParallel& dpa, float* local);

// A group's `rows` rows split over its attention-TP ranks for work that each does on its own
// slice (the scattered MoE layer): this rank's slice is rows [begin, begin + count).
struct AttnTpSlice {
    std::int64_t per = 0;  // rows per slice (the last ones may be short)
    std::int64_t begin = 0;
    std::int64_t count = 0;
};
AttnTpSlice attn_tp_slice(std::int64_t rows, const DpAttentionParallel& dpa);

// Every slice's output, `slice` f32 [slice.per, hidden] from each attention-TP rank, gathered
// into out f32 [rows, hidden] on all of them.
Status attn_tp_gather_slices(std::span<const float> slice, std::int64_t rows, std::int64_t hidden,
                             const DpAttentionParallel& dpa, std::vector<float>& scratch, float* out);

}  // namespace tessera::layers
