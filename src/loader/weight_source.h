#pragma once
// loader/weight_source.h — the tensors of a model folder: `model.safetensors`, or the
// shards listed in `model.safetensors.index.json`. Lookups check presence and shape and
// fail with errors that name the folder, the file and the tensor. Immutable after open();
// safe to read from any thread.

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "loader/safetensors.h"

namespace tessera::loader {

class WeightSource {
 public:
    static StatusOr<std::unique_ptr<WeightSource>> open(const std::string& model_dir);

    // The tensor `name` with exactly `shape`.
    StatusOr<const TensorView*> get(const std::string& name,
                                    const std::vector<std::int64_t>& shape) const;
    bool contains(const std::string& name) const { return find(name) != nullptr; }
    const TensorView* find(const std::string& name) const;
    const std::string& model_dir() const { return model_dir_; }
    // The dtype most tensors are stored in (what --dtype auto picks).
    DType dominant_dtype() const;
    // SafetensorsFile::drop_resident_pages on every file.
    void drop_resident_pages() const;

 private:
    std::string model_dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace tessera::loader
