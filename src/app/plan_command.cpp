// `tessera plan`: what a launch would do, from its flags and the model's config.json alone.

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/process_memory.h"
#include "models/model.h"
#include "planner/plan.h"
#include "planner/sweep.h"

namespace tessera::app {

namespace {

struct DeviceOverrides {
    std::string preset = "cpu";
    std::optional<double> memory_gb, bandwidth_gbs, tflops, intra_node_gbs, inter_node_gbs;
    std::optional<double> bandwidth_efficiency, flops_efficiency, expert_efficiency, expert_bandwidth_efficiency,
        collective_latency_us, core_bandwidth_gbs, core_tflops;
    std::optional<int> devices_per_node;
};

StatusOr<planner::DeviceSpec> device_of(const DeviceOverrides& o) {
    TSR_ASSIGN_OR_RETURN(planner::DeviceSpec d, planner::device_preset(o.preset));
    if (o.memory_gb) d.memory_bytes = static_cast<std::int64_t>(*o.memory_gb * 1e9);
    if (o.bandwidth_gbs) d.memory_bandwidth = *o.bandwidth_gbs * 1e9;
    if (o.core_bandwidth_gbs) d.core_bandwidth = *o.core_bandwidth_gbs * 1e9;
    if (o.tflops) d.flops = *o.tflops * 1e12;
    if (o.core_tflops) d.core_flops = *o.core_tflops * 1e12;
    if (o.intra_node_gbs) d.intra_node_bandwidth = *o.intra_node_gbs * 1e9;
    if (o.inter_node_gbs) d.inter_node_bandwidth = *o.inter_node_gbs * 1e9;
    if (o.devices_per_node) d.devices_per_node = *o.devices_per_node;
    if (o.bandwidth_efficiency) d.bandwidth_efficiency = *o.bandwidth_efficiency;
    if (o.flops_efficiency) d.flops_efficiency = *o.flops_efficiency;
    if (o.expert_efficiency) d.expert_efficiency = *o.expert_efficiency;
    if (o.expert_bandwidth_efficiency) d.expert_bandwidth_efficiency = *o.expert_bandwidth_efficiency;
    if (o.collective_latency_us) d.collective_latency_s = *o.collective_latency_us * 1e-6;
    return d;
}

// `plan [plan flags] -- python -m sglang.launch_server FLAGS`: the launch's flags, everything
// up to the module (or `sglang serve`) being the interpreter.
std::vector<std::string> splice_launch_command(std::vector<std::string> args) {
    auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes == args.end()) return args;
    std::vector<std::string> launch(dashes + 1, args.end());
    args.erase(dashes, args.end());
    auto module = std::find_if(launch.begin(), launch.end(),
                               [](const std::string& w) { return w == "sglang.launch_server" || w == "serve"; });
    if (module != launch.end()) launch.erase(launch.begin(), module + 1);
    args.insert(args.end(), launch.begin(), launch.end());
    return args;
}

}  // namespace

Status preflight_check(const server::ServerArgs& args) {
    auto config = models::read_model_config(args.model_path, args.json_model_override_args);
    if (!config.ok()) return Status::Ok();  // the loader reports a bad folder in its own words
    planner::PlanRequest request;
    request.args = args;
    request.config = std::move(config).value();
    TSR_ASSIGN_OR_RETURN(request.device, planner::device_preset("cpu"));
    request.host_memory_bytes = host_memory_bytes();
    auto plan = planner::make_plan(request);
    if (!plan.ok()) return Status::Ok();  // the ranks report layout errors as they start
    for (std::size_t i = 0; i < plan->checks.size(); ++i) {
        const planner::Check& check = plan->checks[i];
        if (check.ok) continue;
        const std::string line = check.what + (check.fix.empty() ? "" : "; fix: " + check.fix);
        // Only what stops a rank stops the launch; a pool smaller than the context is allowed
        // (requests are capped to it, as SGLang does).
        const bool stops = std::any_of(plan->ranks.begin(), plan->ranks.end(),
                                       [](const planner::RankPlan& r) { return !r.error.empty(); });
        if (stops) return Status::ResourceExhausted("pre-launch check: " + line);
        TSR_LOG(WARN, "pre-launch check: {}", line);
    }
    return Status::Ok();
}

int run_plan(int argc, char** argv) {
    CLI::App app{"tessera plan: what a launch would do (ranks, memory, KV pool, traffic, bubble, estimates, checks) "
                 "from the same flags as `tessera serve` and the model's config.json alone; or `tessera plan [plan "
                 "flags] -- python -m sglang.launch_server ...`"};
    server::ServerArgs args;
    server::FlagTable flags(app, args, server::FlagTable::Mode::kServe);
    DeviceOverrides device;
    std::int64_t prompt_len = 4096;
    bool json = false;
    app.add_option("--device-preset", device.preset,
                   "the devices: cpu (this host, its memory shared by its ranks), h20, h800, h100, a100")
        ->capture_default_str();
    app.add_option("--device-memory-gb", device.memory_gb, "memory per device in GB (overrides the preset)");
    app.add_option("--devices-per-node", device.devices_per_node, "devices per node");
    app.add_option("--device-bandwidth-gbs", device.bandwidth_gbs, "memory bandwidth per device, GB/s");
    app.add_option("--device-tflops", device.tflops, "dense bf16 TFLOP/s per device");
    app.add_option("--core-bandwidth-gbs", device.core_bandwidth_gbs,
                   "cpu: GB/s one thread streams alone (a rank's share when fewer ranks than cores run at once)");
    app.add_option("--core-tflops", device.core_tflops,
                   "cpu: TFLOP/s one thread computes at when it runs alone (default: the host's / its cores)");
    app.add_option("--intra-node-gbs", device.intra_node_gbs, "link bandwidth inside a node, GB/s per device");
    app.add_option("--inter-node-gbs", device.inter_node_gbs, "link bandwidth between nodes, GB/s per device");
    app.add_option("--bandwidth-efficiency", device.bandwidth_efficiency,
                   "fraction of the memory bandwidth decode reaches (bench/plan_calibration.py fits it)")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--flops-efficiency", device.flops_efficiency, "fraction of peak FLOP/s prefill reaches")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--expert-efficiency", device.expert_efficiency,
                   "FLOP/s of routed-expert GEMMs relative to dense ones (bench/plan_calibration.py fits it)")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--expert-bandwidth-efficiency", device.expert_bandwidth_efficiency,
                   "the rate decode streams routed experts at, relative to dense weights")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--collective-latency-us", device.collective_latency_us, "fixed cost of one collective, microseconds");
    app.add_option("--prompt-len", prompt_len, "the prompt TTFT and the pipeline bubble are estimated for")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
        ->capture_default_str();
    std::int64_t decode_batch = 0;
    app.add_option("--decode-batch", decode_batch,
                   "also estimate decode with this many requests at once in every DP group (at --prompt-len of "
                   "context): output tokens/s of the launch and per device")
        ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
    app.add_flag("--json", json, "one JSON object on stdout");
    bool sweep = false;
    int max_nodes = 8;
    std::string svg_path;
    int top = 15;
    app.add_flag("--sweep", sweep,
                 "plan every tp x pp replica shape on 1, 2, 4, ... --max-nodes nodes (replicas fill the rest) and rank "
                 "them by predicted prefill throughput");
    app.add_option("--max-nodes", max_nodes, "largest cluster of the sweep")->check(CLI::Range(1, 4096))->capture_default_str();
    app.add_option("--sweep-svg", svg_path, "write the sweep's best throughput per device count as an SVG plot");
    app.add_option("--top", top, "layouts the sweep lists")->check(CLI::Range(1, 100000))->capture_default_str();

    auto read = flags.read_command_line(splice_launch_command({argv + 1, argv + argc}));
    if (!read.ok()) {
        TSR_LOG(ERROR, "{}", read.status().message());
        return 2;
    }
    std::vector<std::string> reversed(read.value().rbegin(), read.value().rend());
    try {
        app.parse(reversed);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    // SGLang's rewrites and rules; what this CPU build cannot run is reported, not refused:
    // a plan may describe a GPU cluster.
    if (Status s = args.resolve(); !s.ok()) {
        if (json) std::printf("%s\n", nlohmann::json{{"rejected", s.message()}}.dump().c_str());
        TSR_LOG(ERROR, "SGLang refuses this launch: {}", s.message());
        return 2;
    }
    planner::PlanRequest request;
    request.args = args;
    request.prompt_len = prompt_len;
    request.decode_batch = decode_batch;
    // The launch's environment, as `tessera serve` reads it at start-up.
    auto smooth = scheduler::parse_dynamic_chunking_smooth_factor(env().dynamic_chunking_smooth_factor);
    if (!smooth.ok()) {
        TSR_LOG(ERROR, "{}", smooth.status().message());
        return 2;
    }
    request.dynamic_chunking_smooth_factor = *smooth;
    request.host_memory_bytes = host_memory_bytes();
    auto config = models::read_model_config(args.model_path, args.json_model_override_args);
    auto spec = device_of(device);
    if (!config.ok() || !spec.ok()) {
        TSR_LOG(ERROR, "{}", (config.ok() ? spec.status() : config.status()).message());
        return 2;
    }
    request.config = std::move(config).value();
    request.device = std::move(spec).value();
    if (sweep) {
        const std::vector<planner::SweepPoint> points = planner::sweep_layouts(request, max_nodes);
        const std::string text = planner::render_sweep(points, request, top);
        std::fwrite(text.data(), 1, text.size(), stdout);
        if (!svg_path.empty()) {
            std::ofstream(svg_path) << planner::sweep_svg(points, request);
            TSR_LOG(INFO, "sweep plot written to {}", svg_path);
        }
        return 0;
    }
    auto plan = planner::make_plan(request);
    if (!plan.ok()) {
        TSR_LOG(ERROR, "{}", plan.status().message());
        return 2;
    }
    const std::string text = json ? planner::plan_json(*plan, request) : planner::render_plan(*plan, request);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (json) std::fputc('\n', stdout);
    return plan->fits() ? 0 : 1;
}

}  // namespace tessera::app
