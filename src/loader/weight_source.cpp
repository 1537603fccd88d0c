#include "loader/weight_source.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace tessera::loader {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<WeightSource>> WeightSource::open(const std::string& model_dir,
                                                           std::pair<std::int64_t, std::int64_t> fp8_block) {
    auto source = std::make_unique<WeightSource>();
    source->model_dir_ = model_dir;
    if (fp8_block.first > 0 && fp8_block.second > 0) {
        source->fp8_block_n_ = fp8_block.first;
        source->fp8_block_k_ = fp8_block.second;
    }
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

std::unique_ptr<WeightSource> WeightSource::dummy(const std::string& model_dir, DType dtype,
                                                  std::function<bool(const std::string&)> present) {
    auto source = std::make_unique<WeightSource>();
    source->model_dir_ = model_dir;
    source->dummy_dtype_ = dtype;
    source->dummy_present_ = std::move(present);
    return source;
}

bool WeightSource::contains(const std::string& name) const {
    return dummy_dtype_ ? dummy_present_(name) : find(name) != nullptr;
}

void WeightSource::drop_resident_pages() const {
    for (const auto& f : files_) f->drop_resident_pages();
}

void WeightSource::drop_resident_pages(const void* data, std::size_t bytes) {
    SafetensorsFile::drop_resident_pages(data, bytes);
}

const TensorView* WeightSource::find(const std::string& name) const {
    if (dummy_dtype_) {
        std::lock_guard<std::mutex> lock(made_mu_);
        const auto it = made_.find(name);
        return it == made_.end() ? nullptr : &it->second->view;
    }
    for (const auto& f : files_)
        if (const TensorView* t = f->find(name)) return t;
    return nullptr;
}

namespace {

// uniform(-1e-3, 1e-3) from a fixed seed, the same sequence for every tensor (torch's values
// differ; what matters is that every rank and every run makes the same ones).
void fill_dummy(std::vector<std::byte>& bytes, DType dtype, std::int64_t n) {
    std::vector<float> values(static_cast<std::size_t>(n));
    std::uint64_t state = 1234;
    for (float& v : values) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;  // PCG's LCG step
        const double unit = static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
        v = static_cast<float>((unit * 2.0 - 1.0) * 1e-3);
    }
    bytes.resize(static_cast<std::size_t>(n) * dtype_size(dtype));
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (dtype == DType::kF32) {
            std::memcpy(bytes.data() + i * 4, &values[i], 4);
        } else {
            const std::uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
            std::memcpy(bytes.data() + i * 2, &h, 2);
        }
    }
}

}  // namespace

StatusOr<const TensorView*> WeightSource::get(const std::string& name,
                                              const std::vector<std::int64_t>& shape) const {
    if (dummy_dtype_ && find(name) == nullptr) {
        auto made = std::make_unique<MadeTensor>();
        made->view.name = name;
        made->view.file = model_dir_ + " (--load-format dummy)";
        made->view.dtype = *dummy_dtype_;
        made->view.shape = shape;
        fill_dummy(made->bytes, *dummy_dtype_, made->view.numel());
        made->view.data = made->bytes.data();
        made->view.bytes = made->bytes.size();
        std::lock_guard<std::mutex> lock(made_mu_);
        made_.try_emplace(name, std::move(made));
    }
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

float Fp8Scales::at(std::int64_t row, std::int64_t col) const {
    const std::int64_t index = (row / block_n) * cols + col / block_k;
    float v;
    convert_to_f32(static_cast<const std::byte*>(tensor->data) + index * static_cast<std::int64_t>(dtype_size(tensor->dtype)),
                   tensor->dtype, &v, 1);
    return v;
}

StatusOr<Fp8Scales> WeightSource::fp8_scales(const std::string& name, std::int64_t n, std::int64_t k) const {
    const auto dot = name.rfind(".weight");
    const std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
    Fp8Scales s;
    const auto is_float = [](const TensorView* t) { return !is_fp8(t->dtype); };
    if (const TensorView* t = find(prefix + ".weight_scale_inv")) {
        const std::int64_t rows = (n + fp8_block_n_ - 1) / fp8_block_n_;
        const std::int64_t cols = (k + fp8_block_k_ - 1) / fp8_block_k_;
        if (t->shape != std::vector<std::int64_t>{rows, cols} || !is_float(t))
            return Status::InvalidArgument(t->file + ": '" + prefix + ".weight_scale_inv' has shape " +
                                           shape_string(t->shape) + ", but a [" + std::to_string(n) + ", " +
                                           std::to_string(k) + "] weight in " + std::to_string(fp8_block_n_) + " x " +
                                           std::to_string(fp8_block_k_) + " blocks (weight_block_size) needs [" +
                                           std::to_string(rows) + ", " + std::to_string(cols) + "] floats");
        s.tensor = t;
        s.block_n = fp8_block_n_;
        s.block_k = fp8_block_k_;
        s.cols = cols;
        return s;
    }
    if (const TensorView* t = find(prefix + ".weight_scale"); t != nullptr && is_float(t)) {
        const std::int64_t count = t->numel();
        s.tensor = t;
        s.block_k = k;
        if (count == 1) {
            s.block_n = n;
            return s;
        }
        if (count == n && (t->shape.size() == 1 || (t->shape.size() == 2 && t->shape[1] == 1))) return s;
        return Status::InvalidArgument(t->file + ": '" + prefix + ".weight_scale' has shape " + shape_string(t->shape) +
                                       "; tessera reads one scale per tensor or one per row ([" + std::to_string(n) +
                                       "]) of an fp8 weight");
    }
    return Status::NotFound("fp8 tensor '" + name + "' has no '" + prefix + ".weight_scale_inv' or '" + prefix +
                            ".weight_scale' in " + model_dir_);
}

StatusOr<std::vector<float>> WeightSource::read_rows_f32(const std::string& name, std::int64_t n, std::int64_t k,
                                                         std::int64_t row_begin, std::int64_t rows) const {
    TSR_ASSIGN_OR_RETURN(const TensorView* t, get(name, {n, k}));
    std::vector<float> out(static_cast<std::size_t>(rows * k));
    const auto* base = static_cast<const std::byte*>(t->data) + row_begin * k * static_cast<std::int64_t>(dtype_size(t->dtype));
    convert_to_f32(base, t->dtype, out.data(), out.size());
    if (is_fp8(t->dtype)) {
        TSR_ASSIGN_OR_RETURN(Fp8Scales scales, fp8_scales(name, n, k));
        for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c0 = 0; c0 < k; c0 += scales.block_k) {
                const float scale = scales.at(row_begin + r, c0);
                for (std::int64_t c = c0; c < std::min(k, c0 + scales.block_k); ++c) out[r * k + c] *= scale;
            }
        }
    }
    return out;
}

DType WeightSource::dominant_dtype() const {
    if (dummy_dtype_) return *dummy_dtype_;
    std::map<DType, std::size_t> bytes;
    for (const auto& f : files_)
        for (const auto& [name, t] : f->tensors())
            if (!is_fp8(t.dtype)) bytes[t.dtype] += t.bytes;
    DType best = DType::kF32;
    std::size_t most = 0;
    for (auto [d, b] : bytes)
        if (b > most) most = b, best = d;
    return best;
}

}  // namespace tessera::loader
