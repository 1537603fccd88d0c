#pragma once
// planner/cost_model.h — the roofline behind `tessera plan`'s estimates, per pipeline stage:
//   decode (one request at a context of prompt_len): every weight a token reads (a MoE
//     layer's top-k experts only) and its KV over the memory bandwidth, plus the collectives'
//     latency and bytes over the link;
//   prefill: the linear FLOPs (2 per weight element) and causal attention (S² x heads x
//     (d_qk + d_v) per layer) over peak FLOP/s, plus the traffic over the link, chunk by
//     chunk (fixed chunks, or dynamic ones as the scheduler's predictor cuts them); the slowest stage
//     sets the pace, and a lone prompt's last chunk crosses the other P - 1 stages;
//   prefill with every DP group busy: each group's prompts back to back, a rank doing its
//     share of every group's expert work per token of its own group;
//   batched decode (decode_batch requests per DP group): per step, the larger of the bytes
//     read (each rank's dense weights, the local experts some token chose, every request's
//     KV) over the bandwidth and the FLOPs (2 per dense weight and token, the chosen
//     experts', attention over the context) over peak, plus the collectives' bytes for every
//     token and their latency once.
// Knobs: DeviceSpec's efficiencies and latency, fitted by bench/plan_calibration.py.

#include <cstdint>

#include "dist/parallel_layout.h"
#include "planner/plan.h"

namespace tessera::planner {

struct Estimate {
    std::int64_t chunks = 1;  // prefill chunks of the prompt (dynamic chunking makes more)
    double ttft_s = 0;
    double prefill_tokens_per_s = 0;
    double decode_tokens_per_s = 0;
    double all_groups_prefill_tokens_per_s = 0;  // every DP group (and replica) prefilling at once
    double batch_decode_tokens_per_s = 0;  // 0 without PlanRequest::decode_batch
    double batch_decode_step_s = 0;
};

Estimate estimate(const PlanRequest& request, const Plan& plan, const dist::ParallelLayout& layout);

}  // namespace tessera::planner
