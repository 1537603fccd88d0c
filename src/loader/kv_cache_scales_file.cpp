#include "loader/kv_cache_scales_file.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace tessera::loader {
namespace {

using json = nlohmann::json;

// The integer keys of an object ("0", "1", ...), as pydantic reads Dict[int, ...] keys.
StatusOr<std::map<int, const json*>> int_keys(const json& object, const std::string& what) {
    if (!object.is_object()) return Status::InvalidArgument(what + " must be an object");
    std::map<int, const json*> out;
    for (const auto& [key, value] : object.items()) {
        int index = -1;
        const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), index);
        if (error != std::errc() || end != key.data() + key.size() || index < 0)
            return Status::InvalidArgument(what + " has the key \"" + key + "\": keys are integers from 0");
        out[index] = &value;
    }
    return out;
}

StatusOr<std::vector<float>> read_scales(const json& j, const KvCacheScalesQuery& q) {
    if (!j.is_object() || !j.contains("kv_cache"))
        return Status::InvalidArgument("the file has no \"kv_cache\" object (SGLang's QuantParamSchema)");
    const json model_type = j.value("model_type", json());
    if (!q.model_type.empty() && (!model_type.is_string() || model_type.get<std::string>() != q.model_type)) {
        return Status::InvalidArgument("Model type is " + q.model_type +
                                       " but loaded scaling factors belonging to different model type " +
                                       (model_type.is_string() ? model_type.get<std::string>() : model_type.dump()) +
                                       "!");
    }
    const json& kv = j["kv_cache"];
    if (!kv.is_object() || !kv.contains("dtype") || !kv["dtype"].is_string() || !kv.contains("scaling_factor"))
        return Status::InvalidArgument("\"kv_cache\" needs \"dtype\" and \"scaling_factor\"");
    const std::string dtype = kv["dtype"].get<std::string>();
    if (dtype != "float8_e4m3fn") {
        return Status::InvalidArgument("Loaded scaling factors intended for KV cache dtype = " + dtype +
                                       " rather than float8_e4m3fn!");
    }
    TSR_ASSIGN_OR_RETURN(auto ranks, int_keys(kv["scaling_factor"], "\"scaling_factor\""));
    if (static_cast<int>(ranks.size()) != q.tp_size) {
        return Status::InvalidArgument("Loaded dictionary has TP size " + std::to_string(ranks.size()) +
                                       " but LLM engine is currently running with TP size " +
                                       std::to_string(q.tp_size) + ".");
    }
    for (int rank = 0; rank < q.tp_size; ++rank) {
        if (!ranks.contains(rank))
            return Status::InvalidArgument("KV cache scales map for TP rank " + std::to_string(rank) + " not found.");
    }
    const std::string rank_name = std::to_string(q.tp_rank);
    TSR_ASSIGN_OR_RETURN(auto layers, int_keys(*ranks.at(q.tp_rank), "TP rank " + rank_name));
    if (static_cast<int>(layers.size()) != q.num_hidden_layers) {
        return Status::InvalidArgument("KV cache scales map for TP rank " + rank_name + " is malformed. Expected " +
                                       std::to_string(q.num_hidden_layers) + " layers, got " +
                                       std::to_string(layers.size()) + ".");
    }
    std::vector<float> scales(static_cast<std::size_t>(q.num_hidden_layers));
    for (int layer = 0; layer < q.num_hidden_layers; ++layer) {
        const std::string at = "layer " + std::to_string(layer) + " in TP rank " + rank_name;
        if (!layers.contains(layer)) return Status::InvalidArgument("Could not find KV cache scales for " + at + ".");
        const json& value = *layers.at(layer);
        const double factor = value.is_number() ? value.get<double>() : -1.0;
        if (!(std::isfinite(factor) && factor > 0.0))
            return Status::InvalidArgument("the scaling factor of " + at + " is " + value.dump() +
                                           ": it must be a positive number");
        scales[static_cast<std::size_t>(layer)] = static_cast<float>(factor);
    }
    return scales;
}

}  // namespace

StatusOr<std::vector<float>> read_kv_cache_scales_file(const std::string& path, const KvCacheScalesQuery& query) {
    const std::string flag = "--quantization-param-path " + path + ": ";
    std::ifstream in(path);
    if (!in) return Status::NotFound(flag + "File or directory '" + path + "' not found.");
    json j;
    try {
        j = json::parse(in);
    } catch (const json::exception& e) {
        return Status::InvalidArgument(flag + "Error decoding JSON in file '" + path + "': " + e.what());
    }
    StatusOr<std::vector<float>> scales = read_scales(j, query);
    if (!scales.ok()) return Status::InvalidArgument(flag + scales.status().message());
    return scales;
}

}  // namespace tessera::loader
