// `tessera eplb`: DeepSeek's expert placement (eplb/balancer.h) offline, one JSON object per
// line on stdin → one per line on stdout, so a recorded load can be planned and checked
// against the reference before a launch:
//   in:  {"weight": [[...]], "num_replicas": R, "num_groups": G, "num_nodes": N, "num_gpus": M}
//        (optional "algorithm": auto | deepseek | deepseek_hierarchical; auto = hierarchical
//        when num_groups % num_nodes == 0, as the reference's rebalance_experts)
//   out: {"phy2log": [[...]], "log2phy": [[[...]]], "logcnt": [[...]]}
// log2phy is as wide as the largest copy count (the reference's maxlogcnt). A line that cannot
// be placed yields {"error": "..."} in its place and the exit code becomes 1.

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "eplb/balancer.h"

namespace tessera::app {

namespace {

using json = nlohmann::json;

StatusOr<json> place(const json& in) {
    if (!in.is_object()) return Status::InvalidArgument("expected a JSON object");
    for (const char* key : {"weight", "num_replicas", "num_groups", "num_nodes", "num_gpus"})
        if (!in.contains(key)) return Status::InvalidArgument(std::string("missing \"") + key + "\"");
    const json& w = in["weight"];
    if (!w.is_array() || w.empty() || !w[0].is_array() || w[0].empty())
        return Status::InvalidArgument("\"weight\" must be a [layers][experts] array of numbers");
    eplb::BalancerInput b;
    b.num_layers = static_cast<std::int64_t>(w.size());
    b.num_logical = static_cast<std::int64_t>(w[0].size());
    for (const json& row : w) {
        if (!row.is_array() || static_cast<std::int64_t>(row.size()) != b.num_logical)
            return Status::InvalidArgument("\"weight\" rows must all have " + std::to_string(b.num_logical) + " numbers");
        for (const json& v : row) {
            if (!v.is_number() || v.get<double>() < 0) return Status::InvalidArgument("\"weight\" holds a non-number or a negative value");
            b.weight.push_back(v.get<float>());
        }
    }
    for (const char* key : {"num_replicas", "num_groups", "num_nodes", "num_gpus"})
        if (!in[key].is_number_integer() || in[key].get<std::int64_t>() < 1)
            return Status::InvalidArgument(std::string("\"") + key + "\" must be a positive integer");
    b.num_replicas = in["num_replicas"].get<std::int64_t>();
    b.num_groups = in["num_groups"].get<std::int64_t>();
    b.num_nodes = in["num_nodes"].get<std::int64_t>();
    b.num_gpus = in["num_gpus"].get<std::int64_t>();
    eplb::EplbAlgorithm algorithm = eplb::EplbAlgorithm::kAuto;
    if (in.contains("algorithm")) {
        if (!in["algorithm"].is_string()) return Status::InvalidArgument("\"algorithm\" must be a string");
        TSR_ASSIGN_OR_RETURN(algorithm, eplb::parse_eplb_algorithm(in["algorithm"].get<std::string>()));
    }
    const bool hierarchical = algorithm == eplb::EplbAlgorithm::kAuto ? b.num_groups % b.num_nodes == 0
                                                                      : algorithm == eplb::EplbAlgorithm::kDeepseekHierarchical;
    TSR_ASSIGN_OR_RETURN(eplb::Placement p, eplb::rebalance_experts(b, hierarchical));
    std::int64_t width = 1;
    for (std::int32_t c : p.logcnt) width = std::max<std::int64_t>(width, c);
    json phy2log = json::array(), log2phy = json::array(), logcnt = json::array();
    for (std::int64_t l = 0; l < p.num_layers; ++l) {
        phy2log.push_back(std::vector<std::int32_t>(p.phy2log.begin() + l * p.num_physical,
                                                    p.phy2log.begin() + (l + 1) * p.num_physical));
        logcnt.push_back(std::vector<std::int32_t>(p.logcnt.begin() + l * p.num_logical,
                                                   p.logcnt.begin() + (l + 1) * p.num_logical));
        json experts = json::array();
        for (std::int64_t e = 0; e < p.num_logical; ++e) {
            const auto at = p.log2phy.begin() + (l * p.num_logical + e) * p.max_copies;
            experts.push_back(std::vector<std::int32_t>(at, at + width));
        }
        log2phy.push_back(std::move(experts));
    }
    return json{{"phy2log", std::move(phy2log)}, {"log2phy", std::move(log2phy)}, {"logcnt", std::move(logcnt)}};
}

}  // namespace

int run_eplb() {
    int exit_code = 0;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const json in = json::parse(line, nullptr, /*allow_exceptions=*/false);
        StatusOr<json> out = in.is_discarded() ? StatusOr<json>(Status::InvalidArgument("not valid JSON")) : place(in);
        if (out.ok()) {
            std::cout << out->dump() << "\n";
        } else {
            std::cout << json{{"error", out.status().message()}}.dump() << "\n";
            exit_code = 1;
        }
        std::cout.flush();
    }
    return exit_code;
}

}  // namespace tessera::app
