#pragma once
// layers/forward_batch.h — what every layer of one forward pass shares: the tokens' KV rows,
// this pass's rotary angles, the sequences (for attention), the thread pool, and scratch
// buffers reused across layers and steps. Filled by the model once per pass.

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention.h"
#include "kernels/mla_attention.h"

namespace tessera {
class ThreadPool;
}

namespace tessera::layers {

// One sequence's new tokens, consecutive in the batch.
struct SeqSpan {
    std::int64_t n_tokens = 0;
    std::int64_t start_pos = 0;
    const std::int32_t* slots = nullptr;  // KV row of every position (nullptr: position p is row p)
};

struct LayerBatch {
    std::int64_t n_tokens = 0;
    const std::int64_t* kv_rows = nullptr;  // [n_tokens]
    const float* rope_cos = nullptr;        // [n_tokens, rotary_dim / 2]
    const float* rope_sin = nullptr;
    std::span<const SeqSpan> seqs;
    ThreadPool* pool = nullptr;
};

// A gated MLP's intermediate rows: gate and up side by side, then SiLU(gate) · up.
struct MlpBuffers {
    std::vector<float> gate_up;
};

// Buffers the layers of one model reuse (one forward at a time).
struct Scratch {
    std::vector<float> qkv, attn;
    MlpBuffers mlp;
    std::vector<kernels::AttentionArgs> attention_args;  // one per sequence of the batch
    // MoE: router logits, top-k weights and ids, the shared expert's output, and the
    // all-to-all dispatcher's send/receive buffers.
    std::vector<float> router_logits, topk_weights, routed, shared;
    std::vector<std::int32_t> topk_ids, local_ids;
    // The (token, k) entries routed to each local expert, grouped by expert: expert e's
    // entries are [expert_begin[e], expert_begin[e + 1]) of expert_tokens and of the result
    // rows expert_out; expert_slot maps an entry in top-k order to that place (-1: another
    // rank's). Each thread running experts gathers its expert's rows into its own buffers.
    struct ExpertWorker {
        std::vector<float> in;
        MlpBuffers mlp;
    };
    std::vector<std::int64_t> expert_begin, expert_fill;
    std::vector<std::int32_t> expert_tokens, expert_slot, expert_order;
    std::vector<float> expert_out;
    std::vector<ExpertWorker> expert_workers;
    std::vector<std::uint8_t> send, recv;
    // MLA: the fused input projection, queries, the absorbed form's wide queries and latent
    // outputs, the context's latents and rope keys, kv_b_proj over them, and the naive
    // form's per-head K and V (f32 or bf16); the absorbed form's attention runs.
    std::vector<float> mla_proj, mla_q, mla_head_in, mla_head_out, mla_latent, mla_k_pe, mla_kv, mla_k, mla_v;
    std::vector<std::uint16_t> mla_k16, mla_v16;
    std::vector<kernels::MlaAbsorbedArgs> mla_runs;
};

}  // namespace tessera::layers
