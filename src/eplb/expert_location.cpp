#include "eplb/expert_location.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::eplb {

namespace {

using I64 = std::int64_t;

std::string ends(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0 ? suffix : "";
}

// A JSON array of numbers of any nesting, flattened, with its shape.
Status flatten(const nlohmann::json& j, std::vector<I64>& shape, std::vector<double>& values, std::size_t depth,
               const std::string& key) {
    if (j.is_number()) {
        if (depth != shape.size()) return Status::InvalidArgument("\"" + key + "\" is a ragged array");
        values.push_back(j.get<double>());
        return Status::Ok();
    }
    if (!j.is_array() || depth > 4) return Status::InvalidArgument("\"" + key + "\" must be an array of numbers");
    if (depth == shape.size()) {
        if (!values.empty()) return Status::InvalidArgument("\"" + key + "\" is a ragged array");
        shape.push_back(static_cast<I64>(j.size()));
    } else if (shape[depth] != static_cast<I64>(j.size())) {
        return Status::InvalidArgument("\"" + key + "\" is a ragged array");
    }
    for (const auto& item : j) TSR_RETURN_IF_ERROR(flatten(item, shape, values, depth + 1, key));
    return Status::Ok();
}

std::string shape_text(const std::vector<I64>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

StatusOr<ExpertLocation> ExpertLocation::trivial(I64 num_layers, I64 num_logical, I64 num_physical, int ep_size) {
    std::vector<std::int32_t> phy2log(static_cast<std::size_t>(num_layers * num_physical));
    for (I64 l = 0; l < num_layers; ++l)
        for (I64 p = 0; p < num_physical; ++p) phy2log[l * num_physical + p] = static_cast<std::int32_t>(p % num_logical);
    return from_placement(placement_from_phy2log(std::move(phy2log), num_layers, num_logical, num_physical), ep_size);
}

StatusOr<ExpertLocation> ExpertLocation::from_placement(Placement placement, int ep_size) {
    const I64 E = placement.num_logical, P = placement.num_physical;
    if (ep_size < 1 || P % ep_size != 0)
        return Status::InvalidArgument(std::to_string(P) + " physical experts (experts + --ep-num-redundant-experts) "
                                       "do not split evenly over --ep-size " + std::to_string(ep_size));
    if (P < E)
        return Status::InvalidArgument(std::to_string(P) + " physical experts cannot hold " + std::to_string(E) +
                                       " logical experts");
    for (I64 l = 0; l < placement.num_layers; ++l) {
        for (I64 p = 0; p < P; ++p) {
            const std::int32_t e = placement.phy2log[l * P + p];
            if (e < 0 || e >= E)
                return Status::InvalidArgument("layer " + std::to_string(l) + " slot " + std::to_string(p) +
                                               " names expert " + std::to_string(e) + ", outside [0, " +
                                               std::to_string(E) + ")");
        }
        for (I64 e = 0; e < E; ++e)
            if (placement.logcnt[l * E + e] == 0)
                return Status::InvalidArgument("layer " + std::to_string(l) + " places no copy of expert " +
                                               std::to_string(e));
    }
    ExpertLocation location;
    location.placement_ = std::move(placement);
    location.ep_size_ = ep_size;
    return location;
}

StatusOr<ExpertLocation> balanced_expert_location(const std::vector<float>& logical_count,
                                                  const ExpertLocationShape& shape) {
    BalancerInput in;
    in.weight = logical_count;
    in.num_layers = shape.num_layers;
    in.num_logical = shape.num_logical;
    in.num_replicas = shape.num_physical;
    in.num_groups = shape.num_groups > 0 ? shape.num_groups : 1;
    in.num_nodes = shape.num_nodes;
    in.num_gpus = shape.ep_size;
    const EplbAlgorithm algorithm = resolve_eplb_algorithm(shape.algorithm, shape.num_groups, shape.num_nodes);
    TSR_ASSIGN_OR_RETURN(Placement placement,
                         rebalance_experts(in, algorithm == EplbAlgorithm::kDeepseekHierarchical));
    return ExpertLocation::from_placement(std::move(placement), shape.ep_size);
}

StatusOr<ExpertLocation> init_expert_location(const std::string& spec, const ExpertLocationShape& shape) {
    if (spec.empty() || spec == "trivial")
        return ExpertLocation::trivial(shape.num_layers, shape.num_logical, shape.num_physical, shape.ep_size);
    if (!ends(spec, ".pt").empty())
        return Status::InvalidArgument("--init-expert-location " + spec +
                                       ": .pt files are not read (tessera loads no pickles); write the same "
                                       "physical_to_logical_map or logical_count as JSON (a file or inline)");
    std::string text = spec;
    const bool inline_json = ends(spec, ".json").empty();
    if (!inline_json) {
        std::ifstream in(spec);
        if (!in)
            return Status::NotFound("--init-expert-location " + spec +
                                    ": no such file (expected trivial, a .json file or inline JSON)");
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const std::string where = "--init-expert-location" + (inline_json ? std::string() : " " + spec);
    if (j.is_discarded() || !j.is_object())
        return Status::InvalidArgument(where + ": not a JSON object (expected trivial, a file ending in .json, or "
                                       "inline JSON with a physical_to_logical_map or a logical_count)");
    const I64 L = shape.num_layers, E = shape.num_logical, P = shape.num_physical;
    std::vector<I64> dims;
    std::vector<double> values;
    if (j.contains("physical_to_logical_map")) {
        TSR_RETURN_IF_ERROR(flatten(j["physical_to_logical_map"], dims, values, 0, "physical_to_logical_map"));
        std::vector<std::int32_t> phy2log;
        if (dims != std::vector<I64>{L, P})
            return Status::InvalidArgument(where + ": physical_to_logical_map has shape " + shape_text(dims) +
                                           ", expected [" + std::to_string(L) + ", " + std::to_string(P) +
                                           "] (layers x physical experts)");
        for (double v : values) phy2log.push_back(static_cast<std::int32_t>(v));
        auto location = ExpertLocation::from_placement(placement_from_phy2log(std::move(phy2log), L, E, P), shape.ep_size);
        if (!location.ok()) return Status::InvalidArgument(where + ": " + location.status().message());
        return location;
    }
    if (j.contains("logical_count")) {
        TSR_RETURN_IF_ERROR(flatten(j["logical_count"], dims, values, 0, "logical_count"));
        std::vector<float> count(static_cast<std::size_t>(L * E), 0.0f);
        if (dims.size() == 3 && dims[1] == L && dims[2] == E) {
            for (std::size_t i = 0; i < values.size(); ++i) count[i % count.size()] += static_cast<float>(values[i]);
        } else if (dims == std::vector<I64>{L, E}) {
            for (std::size_t i = 0; i < values.size(); ++i) count[i] = static_cast<float>(values[i]);
        } else {
            return Status::InvalidArgument(where + ": logical_count has shape " + shape_text(dims) + ", expected [" +
                                           std::to_string(L) + ", " + std::to_string(E) +
                                           "] (layers x experts) or [passes, layers, experts]");
        }
        return balanced_expert_location(count, shape);
    }
    return Status::InvalidArgument(where + ": expected a \"physical_to_logical_map\" or a \"logical_count\"");
}

}  // namespace tessera::eplb
