#include "planner/sweep.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/core.h>

namespace tessera::planner {

namespace {

bool better(const SweepPoint& a, const SweepPoint& b) { return a.prefill_tokens_per_s > b.prefill_tokens_per_s; }

}  // namespace

std::vector<SweepPoint> sweep_layouts(const PlanRequest& base, int max_nodes) {
    std::vector<SweepPoint> points;
    const int per_node = std::max(1, base.device.devices_per_node);
    for (int nodes = 1; nodes <= max_nodes; nodes *= 2) {
        const int devices = nodes * per_node;
        for (int tp = 1; tp <= devices; tp *= 2) {
            for (int pp = 1; tp * pp <= devices; ++pp) {
                if (devices % (tp * pp) != 0 || pp > base.config.num_hidden_layers) continue;
                SweepPoint point;
                point.nodes = nodes;
                point.devices = devices;
                point.tp = tp;
                point.pp = pp;
                point.replicas = devices / (tp * pp);
                PlanRequest r = base;
                r.suggest_fixes = false;
                r.args.tp_size = tp;
                r.args.pp_size = pp;
                r.args.dp_size = 1;
                r.args.enable_dp_attention = false;
                r.args.nnodes = std::max(1, (tp * pp + per_node - 1) / per_node);
                if (r.args.nnodes > 1 && r.args.dist_init_addr.empty()) r.args.dist_init_addr = "planned:0";
                r.args.notes.clear();
                if (Status s = r.args.resolve(); !s.ok()) {
                    point.why_not = s.message();
                    points.push_back(point);
                    continue;
                }
                auto plan = make_plan(r);
                if (!plan.ok()) {
                    point.why_not = plan.status().message();
                } else if (!plan->fits()) {
                    for (const Check& c : plan->checks)
                        if (!c.ok && point.why_not.empty()) point.why_not = c.what;
                } else {
                    point.fits = true;
                    point.prefill_tokens_per_s = point.replicas * static_cast<double>(base.prompt_len) / plan->ttft_s;
                    point.decode_tokens_per_s = point.replicas * plan->decode_tokens_per_s;
                }
                points.push_back(point);
            }
        }
    }
    return points;
}

std::string render_sweep(const std::vector<SweepPoint>& points, const PlanRequest& base, int top) {
    std::vector<SweepPoint> fitting;
    for (const SweepPoint& p : points)
        if (p.fits) fitting.push_back(p);
    std::sort(fitting.begin(), fitting.end(), better);
    std::ostringstream out;
    out << fmt::format("sweep: {} layouts on 1..{} nodes of {} x {}, {} fit; ranked by predicted prefill throughput "
                       "of {}-token prompts (roofline, not calibrated)\n",
                       points.size(), points.empty() ? 0 : points.back().nodes, base.device.devices_per_node,
                       base.device.name, fitting.size(), base.prompt_len);
    out << fmt::format("  {:>4} {:>6} {:>7} {:>4} {:>4} {:>8} {:>14} {:>14} {:>12}\n", "rank", "nodes", "devices", "tp",
                       "pp", "replicas", "prefill tok/s", "decode tok/s", "per device");
    for (int i = 0; i < std::min<int>(top, static_cast<int>(fitting.size())); ++i) {
        const SweepPoint& p = fitting[i];
        out << fmt::format("  {:>4} {:>6} {:>7} {:>4} {:>4} {:>8} {:>14.0f} {:>14.1f} {:>12.0f}\n", i + 1, p.nodes,
                           p.devices, p.tp, p.pp, p.replicas, p.prefill_tokens_per_s, p.decode_tokens_per_s,
                           p.prefill_tokens_per_s / p.devices);
    }
    return out.str();
}

std::string sweep_svg(const std::vector<SweepPoint>& points, const PlanRequest& base) {
    // The best layout per device count: prefill and decode throughput, log-log.
    std::map<int, SweepPoint> best;
    for (const SweepPoint& p : points)
        if (p.fits && (!best.count(p.devices) || better(p, best[p.devices]))) best[p.devices] = p;
    const double w = 640, h = 400, left = 70, right = 20, top = 40, bottom = 50;
    double ymax = 1, xmax = 1;
    for (const auto& [devices, p] : best) {
        ymax = std::max({ymax, p.prefill_tokens_per_s, p.decode_tokens_per_s});
        xmax = std::max(xmax, static_cast<double>(devices));
    }
    auto lg = [](double v) { return std::log10(std::max(v, 1e-9)); };
    const double ymin_log = 0, ymax_log = std::ceil(lg(ymax)), xmax_log = std::max(1.0, std::ceil(lg(xmax)));
    auto x = [&](double d) { return left + (w - left - right) * lg(d) / xmax_log; };
    auto y = [&](double v) { return h - bottom - (h - top - bottom) * (lg(v) - ymin_log) / (ymax_log - ymin_log); };
    std::ostringstream svg;
    svg << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
                       "font-size=\"12\">\n",
                       w, h);
    svg << fmt::format("<text x=\"{}\" y=\"20\">{} on {}: best predicted throughput per device count (tessera plan "
                       "--sweep)</text>\n",
                       left, base.config.architecture, base.device.name);
    svg << fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", left, h - bottom, w - right);
    svg << fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", left, h - bottom, top);
    for (int e = 0; e <= static_cast<int>(xmax_log); ++e)
        svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(std::pow(10.0, e)),
                           h - bottom + 16, static_cast<long>(std::pow(10.0, e)));
    for (int e = 0; e <= static_cast<int>(ymax_log); ++e)
        svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">1e{}</text>\n", left - 6, y(std::pow(10.0, e)) + 4, e);
    svg << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">devices</text>\n", (left + w - right) / 2, h - 12);
    svg << fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">tokens/s</text>\n",
                       (top + h - bottom) / 2, (top + h - bottom) / 2);
    const std::pair<const char*, const char*> series[] = {{"prefill", "#1f77b4"}, {"decode (one request per replica)", "#d62728"}};
    for (int s = 0; s < 2; ++s) {
        std::string path;
        for (const auto& [devices, p] : best) {
            const double v = s == 0 ? p.prefill_tokens_per_s : p.decode_tokens_per_s;
            path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", x(devices), y(v));
            svg << fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{} devices: tp {} pp {} x {} "
                               "replicas</title></circle>\n",
                               x(devices), y(v), series[s].second, devices, p.tp, p.pp, p.replicas);
        }
        svg << fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\"/>\n", path, series[s].second);
        svg << fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", left + 10, top + 14 + 16 * s,
                           series[s].second, series[s].first);
    }
    svg << "</svg>\n";
    return svg.str();
}

}  // namespace tessera::planner
