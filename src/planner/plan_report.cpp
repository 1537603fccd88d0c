// How a plan is shown: tables for people (render_plan) and one JSON object (plan_json).

#include <fmt/core.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/plan.h"

namespace tessera::planner {

namespace {

std::string gb(std::int64_t bytes) { return bytes_text(bytes); }

const char* phase_name(TrafficPhase phase) {
    switch (phase) {
        case TrafficPhase::kPrefill: return "prefill";
        case TrafficPhase::kDecode: return "decode";
        case TrafficPhase::kEvery: break;
    }
    return "every";
}

std::string phase_note(TrafficPhase phase) {
    return phase == TrafficPhase::kEvery ? "" : fmt::format(", {} only", phase_name(phase));
}

std::string coords_text(const dist::RankCoords& c, const dist::ParallelConfig& p) {
    std::string s = fmt::format("tp {} pp {}", c.tp_rank, c.pp_rank);
    if (p.dp_size > 1 && !p.enable_dp_attention) s += fmt::format(" dp {}", c.replica);
    if (p.enable_dp_attention) s += fmt::format(" attn_dp {} attn_tp {}", c.attn_dp_rank, c.attn_tp_rank);
    if (p.ep_size > 1) s += fmt::format(" ep {} moe_tp {}", c.moe_ep_rank, c.moe_tp_rank);
    return s;
}

}  // namespace

std::string render_plan(const Plan& p, const PlanRequest& req) {
    std::ostringstream out;
    const server::ServerArgs& a = req.args;
    const loader::ModelConfig& c = req.config;
    out << fmt::format("model: {} ({} layers, hidden {}, {}{})\n", c.architecture, c.num_hidden_layers, c.hidden_size,
                       c.is_moe() ? fmt::format("{} experts top-{}", c.moe.num_experts, c.moe.num_experts_per_tok)
                                  : std::string("dense"),
                       c.is_mla() ? ", MLA" : "");
    out << fmt::format("device: {} ({}), {} per node\n", req.device.name, req.device.source, req.device.devices_per_node);
    out << fmt::format("layout: tp {} x pp {} x dp {}{}{} = {} ranks on {} node(s)\n", a.tp_size, a.pp_size, a.dp_size,
                       a.enable_dp_attention ? " (DP-attention)" : "", a.ep_size > 1 ? fmt::format(", ep {}", a.ep_size) : "",
                       p.world_size, a.nnodes);
    for (const std::string& note : p.rewrites) out << "rewritten as SGLang does: " << note << "\n";
    if (!p.tessera_refusal.empty()) out << "tessera serve on this CPU build would refuse: " << p.tessera_refusal << "\n";
    for (const std::string& caveat : p.caveats) out << "not in the estimates: " << caveat << "\n";

    out << "\nranks (node: global rank, coordinates, weights, KV bytes per token, own KV pool tokens)\n";
    for (const RankPlan& r : p.ranks) {
        out << fmt::format("  node {}: rank {:>3}  {:<34} weights {:>10}  kv {:>7} B/token  ", r.coords.node,
                           r.coords.global_rank, coords_text(r.coords, p.parallel), gb(r.size.weight_bytes),
                           r.size.kv_bytes_per_token);
        out << (r.error.empty() ? fmt::format("pool {} tokens", r.own_max_total_num_tokens) : "cannot start: " + r.error)
            << "\n";
    }

    out << "\nmemory per rank\n";
    out << fmt::format("  weights {} / KV pool at --mem-fraction-static {:.3f} / capacity {}\n",
                       gb(p.ranks.front().size.weight_bytes), p.mem_fraction_static, gb(p.ranks.front().capacity_bytes));
    if (!p.startup_line.empty()) out << "  start-up line of rank 0: " << p.startup_line << "\n";

    out << "\ncommunication per token (each rank)\n";
    if (p.traffic.empty()) out << "  none: one rank\n";
    for (const Traffic& t : p.traffic)
        out << fmt::format("  {:<30} {:>9} B per layer x {:>3} = {:>10} B  ({}{}; {})\n", t.kind,
                           t.bytes_per_token_per_layer, t.layers, t.bytes_per_token_per_layer * t.layers,
                           t.inter_node ? "between nodes" : "inside a node", phase_note(t.phase), t.formula);
    if (p.pp_size > 1)
        out << fmt::format("\npipeline bubble for a {}-token prompt: (P-1)/(P-1+M) = {}/{} = {:.3f} (M = {} chunks, {} {})\n",
                           req.prompt_len, p.pp_size - 1, p.pp_size - 1 + p.micro_batches, p.bubble, p.micro_batches,
                           a.enable_dynamic_chunking
                               ? fmt::format("dynamic with smooth factor {}, the first of", req.dynamic_chunking_smooth_factor)
                               : "of",
                           p.chunked_prefill_size);
    if (p.ttft_s > 0)
        out << fmt::format("\nestimate (roofline at {:.2f} of bandwidth, {:.2f} of FLOP/s): TTFT of a {}-token prompt "
                           "{:.3f} s; prompts back to back {:.0f} tokens/s; one request decodes at {:.1f} tokens/s\n",
                           req.device.bandwidth_efficiency, req.device.flops_efficiency, req.prompt_len, p.ttft_s,
                           p.prefill_tokens_per_s, p.decode_tokens_per_s);
    if (p.all_groups_prefill_tokens_per_s > p.prefill_tokens_per_s)
        out << fmt::format("every DP group prefilling at once: {:.0f} input tokens/s, {:.0f} per device\n",
                           p.all_groups_prefill_tokens_per_s, p.all_groups_prefill_tokens_per_s / p.world_size);
    if (p.batch_decode_tokens_per_s > 0)
        out << fmt::format("batched decode ({} requests per DP group x {} groups, context {}): step {:.1f} ms, "
                           "{:.0f} output tokens/s, {:.0f} per device\n",
                           req.decode_batch, p.parallel.dp_size,
                           req.prompt_len, 1e3 * p.batch_decode_step_s, p.batch_decode_tokens_per_s,
                           p.batch_decode_tokens_per_s / p.world_size);
    if (p.ttft_s > 0 && a.enable_two_batch_overlap)
        out << "two-batch overlap: a prompt's and a decode batch's traffic moves while their other half computes "
               "(the slower of the two counts); a lone decoding request is not split\n";

    out << "\nchecks\n";
    for (const Check& check : p.checks)
        out << (check.ok ? "  ok    " : "  FAIL  ") << check.what << (check.fix.empty() ? "" : "\n        fix: " + check.fix)
            << "\n";
    return out.str();
}

std::string plan_json(const Plan& p, const PlanRequest& req) {
    nlohmann::json j;
    const server::ServerArgs& a = req.args;
    j["model"] = req.config.architecture;
    j["device"] = req.device.name;
    j["layout"] = {{"tp_size", a.tp_size},       {"pp_size", a.pp_size}, {"dp_size", a.dp_size},
                   {"ep_size", a.ep_size},       {"enable_dp_attention", a.enable_dp_attention},
                   {"nnodes", a.nnodes},         {"world_size", p.world_size}};
    j["rewrites"] = p.rewrites;
    j["tessera_refusal"] = p.tessera_refusal;
    j["caveats"] = p.caveats;
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankPlan& r : p.ranks) {
        const dist::RankCoords& c = r.coords;
        ranks.push_back({{"rank", c.global_rank},        {"node", c.node},
                         {"tp_rank", c.tp_rank},         {"pp_rank", c.pp_rank},
                         {"dp_rank", c.replica},         {"attn_dp_rank", c.attn_dp_rank},
                         {"attn_tp_rank", c.attn_tp_rank}, {"moe_ep_rank", c.moe_ep_rank},
                         {"moe_tp_rank", c.moe_tp_rank}, {"capacity_bytes", r.capacity_bytes},
                         {"weight_bytes", r.size.weight_bytes}, {"kv_bytes_per_token", r.size.kv_bytes_per_token},
                         {"layers", {r.size.first_layer, r.size.end_layer}},
                         {"own_max_total_num_tokens", r.own_max_total_num_tokens}, {"error", r.error}});
    }
    j["ranks"] = ranks;
    j["memory"] = {{"mem_fraction_static", p.mem_fraction_static},
                   {"chunked_prefill_size", p.chunked_prefill_size},
                   {"max_total_num_tokens", p.max_total_num_tokens},
                   {"max_running_requests", p.max_running_requests},
                   {"context_len", p.context_len},
                   {"available_gb_rank0", p.available_gb_rank0},
                   {"startup_line", p.startup_line}};
    nlohmann::json traffic = nlohmann::json::array();
    for (const Traffic& t : p.traffic)
        traffic.push_back({{"kind", t.kind},
                           {"bytes_per_token_per_layer", t.bytes_per_token_per_layer},
                           {"layers", t.layers},
                           {"syncs", t.syncs},
                           {"total_layers", t.total_layers},
                           {"bytes_per_token", t.bytes_per_token_per_layer * t.layers},
                           {"inter_node", t.inter_node},
                           {"phase", phase_name(t.phase)},
                           {"formula", t.formula}});
    j["traffic"] = traffic;
    j["pipeline"] = {{"pp_size", p.pp_size}, {"micro_batches", p.micro_batches}, {"bubble", p.bubble},
                     {"prompt_len", req.prompt_len},
                     {"dynamic_chunking", req.args.enable_dynamic_chunking && p.pp_size > 1},
                     {"dynamic_chunking_smooth_factor", req.dynamic_chunking_smooth_factor}};
    j["estimate"] = {{"ttft_s", p.ttft_s},
                     {"prefill_tokens_per_s", p.prefill_tokens_per_s},
                     {"all_groups_prefill_tokens_per_s", p.all_groups_prefill_tokens_per_s},
                     {"decode_tokens_per_s", p.decode_tokens_per_s},
                     {"decode_batch", req.decode_batch},
                     {"batch_decode_step_s", p.batch_decode_step_s},
                     {"batch_decode_tokens_per_s", p.batch_decode_tokens_per_s},
                     {"bandwidth_efficiency", req.device.bandwidth_efficiency},
                     {"flops_efficiency", req.device.flops_efficiency},
                     {"expert_efficiency", req.device.expert_efficiency},
                     {"expert_bandwidth_efficiency", req.device.expert_bandwidth_efficiency},
                     {"collective_latency_s", req.device.collective_latency_s}};
    nlohmann::json checks = nlohmann::json::array();
    for (const Check& c : p.checks) checks.push_back({{"ok", c.ok}, {"what", c.what}, {"fix", c.fix}});
    j["checks"] = checks;
    j["fits"] = p.fits();
    return j.dump(2);
}

}  // namespace tessera::planner
