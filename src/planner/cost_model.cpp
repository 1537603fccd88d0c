#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "scheduler/dynamic_chunking.h"

namespace tessera::planner {

namespace {

// Attention heads of one rank and the widths of a query-key and a value head.
struct AttentionWidth {
    double heads = 0;
    double qk = 0;
    double v = 0;
};

AttentionWidth attention_width(const loader::ModelConfig& c, int attn_tp) {
    AttentionWidth w;
    w.heads = static_cast<double>(c.num_attention_heads) / attn_tp;
    if (c.is_mla()) {
        w.qk = static_cast<double>(c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim);
        w.v = static_cast<double>(c.mla.v_head_dim);
    } else {
        w.qk = w.v = static_cast<double>(c.head_dim);
    }
    return w;
}

// One pipeline stage's prefill cost, the slowest rank's: seconds per token for the linear
// layers and for the stage's traffic, and seconds per unit of causal attention work.
struct StageCost {
    double per_token_s = 0;
    double attention_s = 0;  // x ((L + D)^2 - L^2) for a chunk of D tokens after L
    double comm_per_token_s = 0;
    bool overlap = false;  // two-batch overlap: traffic hides behind compute (the slower counts)
};

double chunk_time(const StageCost& c, double L, double D) {
    const double compute = c.per_token_s * D + c.attention_s * (2.0 * L * D + D * D);
    return c.overlap ? std::max(compute, c.comm_per_token_s * D) : compute + c.comm_per_token_s * D;
}

// The prefill chunks of a prompt as the scheduler cuts it: fixed chunked_prefill_size, or with
// dynamic chunking the scheduler's own ChunkSizePredictor (SGLang's scheduler_pp_mixin.py
// predict_next_chunk_size: smoothed, floored at C/4, aligned), fed the stage's cost as the
// T(l) = a l² + b l + c the scheduler fits at start-up from profiled prefills. A chunk the
// predictor gives no size for is C, as the scheduler then falls back to it.
std::vector<double> chunk_sizes(const PlanRequest& req, const Plan& p, const StageCost& c, double latency_s,
                                bool dynamic) {
    const double S = static_cast<double>(req.prompt_len);
    const double C = p.chunked_prefill_size > 0 ? static_cast<double>(p.chunked_prefill_size) : S;
    std::optional<scheduler::ChunkSizePredictor> predictor;
    if (dynamic && p.chunked_prefill_size > 0) {
        scheduler::QuadraticFit fit;
        fit.a = c.attention_s * 1e3;
        fit.b = (c.per_token_s + (c.overlap ? 0.0 : c.comm_per_token_s)) * 1e3;
        fit.c = latency_s * 1e3;
        scheduler::ChunkSizePredictorConfig config;
        config.initial_chunk_size = p.chunked_prefill_size;
        config.smooth_factor = req.dynamic_chunking_smooth_factor;
        config.page_size = req.args.page_size.value_or(1);
        config.context_len = p.context_len;
        config.max_prefill_tokens = req.args.max_prefill_tokens;
        if (auto made = scheduler::ChunkSizePredictor::create(fit, config); made.ok()) predictor = std::move(made).value();
    }
    std::vector<double> sizes;
    for (double L = 0; L < S;) {
        double D = C;
        if (predictor) {
            if (auto next = predictor->next_chunk(static_cast<std::int64_t>(L))) D = static_cast<double>(*next);
        }
        D = std::min(D, S - L);
        sizes.push_back(D);
        L += D;
    }
    return sizes;
}

}  // namespace

Estimate estimate(const PlanRequest& req, const Plan& p, const dist::ParallelLayout& layout) {
    const server::ServerArgs& a = req.args;
    const loader::ModelConfig& c = req.config;
    const DeviceSpec& d = req.device;
    const double S = static_cast<double>(req.prompt_len);
    const double elem = static_cast<double>(dtype_size(p.types.linear));
    const double head_elem = static_cast<double>(dtype_size(p.types.compute));
    const AttentionWidth attn = attention_width(c, layout.attn_tp_size());

    // Traffic of one stage per token: its own collectives and one boundary's send; and of a
    // decode step through every stage: its bytes per token and its latency.
    double stage_comm_per_token = 0, stage_latency = 0, decode_comm_bytes_s = 0, decode_comm_latency_s = 0;
    for (const Traffic& t : p.traffic) {
        const double bandwidth = t.inter_node ? d.inter_node_bandwidth : d.intra_node_bandwidth;
        const bool send = t.kind == "pp send";
        const double stage_bytes = static_cast<double>(t.bytes_per_token_per_layer) * (send ? 1.0 : t.layers);
        const double collectives = t.syncs * (send ? 1.0 : static_cast<double>(t.layers));
        if (t.phase != TrafficPhase::kDecode) {
            stage_comm_per_token += stage_bytes / bandwidth;
            stage_latency += collectives * d.collective_latency_s;
        }
        if (t.phase != TrafficPhase::kPrefill) {
            const double crossed = static_cast<double>(t.total_layers);
            decode_comm_bytes_s += static_cast<double>(t.bytes_per_token_per_layer) * crossed / bandwidth;
            decode_comm_latency_s += t.syncs * crossed * d.collective_latency_s;
        }
    }
    // Two-batch overlap (SGLang's --enable-two-batch-overlap) splits a batch in two and moves
    // one half's bytes while the other computes (two_batch_overlap.py): the slower of the two
    // sets the pace (prefill chunks too, see chunk_time). A lone decoding request cannot be
    // split.
    const auto with_comm = [&a](double compute_s, double comm_s) {
        return a.enable_two_batch_overlap ? std::max(compute_s, comm_s) : compute_s + comm_s;
    };

    // Batched decode: B requests in each DP group; a MoE layer sees every attention-DP group's
    // tokens. A local expert is read when at least one of them chose it.
    const double B = static_cast<double>(req.decode_batch);
    const double moe_tokens = B * layout.attn_dp_size();
    const double k_over_e =
        c.is_moe() ? static_cast<double>(c.moe.num_experts_per_tok) / static_cast<double>(c.moe.num_experts) : 0.0;
    const double expert_chosen = 1.0 - std::pow(1.0 - k_over_e, moe_tokens);
    // Decode attention per token, layer and head: scores and weighted values over the context
    // (MLA reads its latent rows absorbed: the latent and rope widths, then the latent again).
    const double decode_attention_width =
        c.is_mla() ? static_cast<double>(2 * c.mla.kv_lora_rank + c.mla.qk_rope_head_dim) : attn.qk + attn.v;
    double batch_step_s = 0;

    // Every DP group prefilling at once: a MoE layer then runs every group's tokens, so per token
    // of its own group a rank does the shared and routed expert work of all G groups' tokens.
    const double groups_per_moe = layout.attn_dp_size();

    double decode_s = 0;
    StageCost slowest, slowest_busy;
    for (int stage = 0; stage < a.pp_size; ++stage) {
        double decode_stage = 0, batch_stage = 0;
        StageCost cost, busy;
        for (const RankPlan& r : p.ranks) {
            if (r.coords.pp_rank != stage || r.coords.replica != 0) continue;
            double bw = d.memory_bandwidth, flops = d.flops;
            if (d.shared_by_node_ranks) {
                // One request runs one stage at a time: a rank shares the host with the ranks
                // of its own stage on the node, while its cores are its share of all of them.
                const std::vector<int> node_ranks = layout.ranks_on_node(r.coords.node);
                const double threads = a.threads_per_rank > 0
                                           ? a.threads_per_rank
                                           : std::max(1, d.cores / static_cast<int>(node_ranks.size()));
                double concurrent = 0;
                for (int other : node_ranks) concurrent += layout.coords(other).pp_rank == stage ? 1 : 0;
                // More threads running than cores: the OS shares the cores out, so each thread
                // runs part of the time (TP4 on two cores: half a core per rank). Fewer: each
                // busy core reads and computes faster than when all are busy (a PP stage alone).
                const double core_flops = d.core_flops > 0 ? d.core_flops : d.flops / d.cores;
                const double running = std::min<double>(threads, static_cast<double>(d.cores) / concurrent);
                bw = std::min(d.core_bandwidth * running, d.memory_bandwidth / concurrent);
                flops = std::min(core_flops * running, d.flops / concurrent);
            }
            bw *= d.bandwidth_efficiency;
            flops *= d.flops_efficiency;
            const RankSize& s = r.size;
            const double experts_read = std::min<double>(static_cast<double>(s.experts_per_rank),
                                                         static_cast<double>(c.moe.num_experts_per_tok) / a.ep_size);
            const double weights_read =
                static_cast<double>(s.weight_bytes - s.embedding_bytes) -
                static_cast<double>(s.moe_layers) * (static_cast<double>(s.experts_per_rank) - experts_read) *
                    static_cast<double>(s.expert_bytes);
            const double expert_read = static_cast<double>(s.moe_layers) * experts_read *
                                       static_cast<double>(s.expert_bytes);
            decode_stage = std::max(decode_stage, (weights_read - expert_read + expert_read / d.expert_bandwidth_efficiency +
                                                   S * static_cast<double>(s.kv_bytes_per_token)) /
                                                      bw);
            const double layers = static_cast<double>(s.end_layer - s.first_layer);
            // Routed experts run as many small GEMMs (a few rows each): their own efficiency.
            // Per token the MoE sees, a rank runs shared_share of the shared experts: its TP
            // slice of them, or (whole) the share of the tokens it owns, 1/ep of every token.
            // A lone group's own tokens are owned by its attention-TP ranks alone.
            const double shared = static_cast<double>(s.shared_expert_bytes);
            const double shared_share = s.shared_experts_whole ? 1.0 / a.ep_size : 1.0;
            const double lone_group_share = s.shared_experts_whole ? 1.0 / layout.attn_tp_size() : 1.0;
            const double dense_weights = weights_read - static_cast<double>(s.lm_head_bytes) - expert_read -
                                         shared * (1.0 - shared_share);
            cost.per_token_s = std::max(cost.per_token_s, 2.0 *
                                                              (dense_weights + shared * (lone_group_share - shared_share) +
                                                               expert_read / d.expert_efficiency) /
                                                              elem / flops);
            // Under DP-attention a TP-split dense MLP runs on every group's gathered tokens too.
            const double gathered_mlp = s.dense_mlp_gathered ? static_cast<double>(s.dense_mlp_bytes) : 0.0;
            busy.per_token_s = std::max(
                busy.per_token_s,
                2.0 *
                    (dense_weights - shared * shared_share - gathered_mlp +
                     groups_per_moe * (shared * shared_share + gathered_mlp + expert_read / d.expert_efficiency)) /
                    elem / flops);
            cost.attention_s = std::max(cost.attention_s, attn.heads * (attn.qk + attn.v) * layers / flops);
            busy.attention_s = cost.attention_s;
            if (B > 0) {
                const double local_experts = static_cast<double>(s.moe_layers) * static_cast<double>(s.experts_per_rank);
                const double all_experts = local_experts * static_cast<double>(s.expert_bytes);
                const double bytes = weights_read - expert_read + all_experts * expert_chosen / d.expert_bandwidth_efficiency +
                                     B * S * static_cast<double>(s.kv_bytes_per_token);
                // 2 FLOPs per weight element: every dense weight (the LM head too) for each of
                // the group's B tokens, the shared experts for every token the MoE sees (whole
                // ones for the rank's share of them), a gathered dense MLP or LM head for every
                // group's tokens, and each routed token's expert on its one rank. The LM head
                // is in the activation type, the other weights in the linear one.
                const double head = static_cast<double>(s.lm_head_bytes) / head_elem;
                const double dense_flops =
                    2.0 * ((B * (dense_weights - shared * shared_share - gathered_mlp) +
                            moe_tokens * (shared_share * shared + gathered_mlp)) /
                               elem +
                           (s.lm_head_gathered ? moe_tokens : B) * head);
                const double expert_flops = 2.0 * moe_tokens * k_over_e * all_experts / elem / d.expert_efficiency;
                const double attention_flops = 2.0 * B * S * attn.heads * decode_attention_width * layers;
                batch_stage = std::max(batch_stage, std::max(bytes / bw, (dense_flops + expert_flops + attention_flops) / flops));
            }
        }
        decode_s += decode_stage;
        batch_step_s += batch_stage;
        const auto longer = [S](const StageCost& x, const StageCost& y) {
            return x.per_token_s * S + x.attention_s * S * S > y.per_token_s * S + y.attention_s * S * S;
        };
        if (longer(cost, slowest)) slowest = cost;
        if (longer(busy, slowest_busy)) slowest_busy = busy;
    }
    for (StageCost* c : {&slowest, &slowest_busy}) {
        c->comm_per_token_s = stage_comm_per_token;
        c->overlap = a.enable_two_batch_overlap;
    }

    const bool dynamic = a.enable_dynamic_chunking && a.pp_size > 1;
    const std::vector<double> sizes = chunk_sizes(req, p, slowest, stage_latency, dynamic);
    double total = 0, longest = 0, total_busy = 0, L = 0;
    for (double D : sizes) {
        const double t = chunk_time(slowest, L, D) + stage_latency;
        total += t;
        longest = std::max(longest, t);
        total_busy += chunk_time(slowest_busy, L, D) + stage_latency;
        L += D;
    }
    Estimate e;
    e.chunks = static_cast<std::int64_t>(sizes.size());
    // Back to back, every stage busy: the slowest stage's work per prompt. Alone: the chunks
    // through the first stage, then the last chunk through the other P - 1.
    e.prefill_tokens_per_s = S / total;
    e.all_groups_prefill_tokens_per_s = layout.n_schedulers() * S / total_busy;
    e.ttft_s = total + (a.pp_size - 1) * longest;
    e.decode_tokens_per_s = 1.0 / (decode_s + decode_comm_bytes_s + decode_comm_latency_s);
    if (B > 0) {
        // The collectives carry every token's bytes and pay their latency once per step.
        e.batch_decode_step_s = with_comm(batch_step_s, B * decode_comm_bytes_s) + decode_comm_latency_s;
        e.batch_decode_tokens_per_s = B * layout.n_schedulers() / e.batch_decode_step_s;
    }
    return e;
}

}  // namespace tessera::planner
