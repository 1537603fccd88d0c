#pragma once
// planner/sweep.h — `tessera plan --sweep`: every (tp, pp) replica shape on 1 to max_nodes
// nodes of the request's device, replicas filling the remaining devices (DP behind a
// gateway), each planned as make_plan plans one launch; ranked by predicted prefill
// throughput, with an SVG of the best throughput per device count.

#include <string>
#include <vector>

#include "planner/plan.h"

namespace tessera::planner {

struct SweepPoint {
    int nodes = 0;
    int devices = 0;
    int tp = 1, pp = 1, replicas = 1;
    bool fits = false;
    std::string why_not;                 // the first failing check or rule
    double prefill_tokens_per_s = 0;     // replicas x prompt_len / TTFT
    double decode_tokens_per_s = 0;      // replicas x one request's decode speed
};

// Node counts 1, 2, 4, ... up to `max_nodes`.
std::vector<SweepPoint> sweep_layouts(const PlanRequest& base, int max_nodes);

std::string render_sweep(const std::vector<SweepPoint>& points, const PlanRequest& base, int top);
std::string sweep_svg(const std::vector<SweepPoint>& points, const PlanRequest& base);

}  // namespace tessera::planner
