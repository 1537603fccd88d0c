#include "loader/weight_source.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace tessera::loader {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<WeightSource>> WeightSource::open(const std::string& model_dir) {
    auto source = std::make_unique<WeightSource>();
    source->model_dir_ = model_dir;
    const fs::path dir(model_dir);
    std::vector<std::string> files;
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(dir / "model.safetensors")) {
        files.push_back((dir / "model.safetensors").string());
    } else if (fs::exists(index)) {
        std::ifstream in(index);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            return Status::DataLoss(index.string() + ": not valid JSON: " + e.what());
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
            return Status::DataLoss(index.string() + ": no \"weight_map\" object");
        std::set<std::string> shard_names;
        for (auto& [name, shard] : j["weight_map"].items()) {
            if (!shard.is_string())
                return Status::DataLoss(index.string() + ": weight_map entry for '" + name +
                                        "' is not a file name");
            shard_names.insert(shard.get<std::string>());
        }
        for (const auto& s : shard_names) files.push_back((dir / s).string());
    } else {
        return Status::NotFound(model_dir +
                                ": no model.safetensors or model.safetensors.index.json in the "
                                "model folder");
    }
    for (const auto& f : files) {
        TSR_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(f));
        source->files_.push_back(std::move(file));
    }
    return source;
}

void WeightSource::drop_resident_pages() const {
    for (const auto& f : files_) f->drop_resident_pages();
}

const TensorView* WeightSource::find(const std::string& name) const {
    for (const auto& f : files_)
        if (const TensorView* t = f->find(name)) return t;
    return nullptr;
}

StatusOr<const TensorView*> WeightSource::get(const std::string& name,
                                              const std::vector<std::int64_t>& shape) const {
    const TensorView* t = find(name);
    if (t == nullptr) {
        std::string where = files_.size() == 1 ? files_[0]->path() : model_dir_ + " (all shards)";
        return Status::NotFound("missing tensor '" + name + "' in " + where);
    }
    if (t->shape != shape) {
        return Status::InvalidArgument(t->file + ": tensor '" + name + "' has shape " +
                                       shape_string(t->shape) + ", but config.json implies " +
                                       shape_string(shape));
    }
    return t;
}

DType WeightSource::dominant_dtype() const {
    std::map<DType, std::size_t> bytes;
    for (const auto& f : files_)
        for (const auto& [name, t] : f->tensors()) bytes[t.dtype] += t.bytes;
    DType best = DType::kF32;
    std::size_t most = 0;
    for (auto [d, b] : bytes)
        if (b > most) most = b, best = d;
    return best;
}

}  // namespace tessera::loader
