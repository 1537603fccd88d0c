#pragma once
// loader/weight_source.h — the tensors of a model folder: `model.safetensors`, or the
// shards listed in `model.safetensors.index.json`. Lookups check presence and shape and
// fail with errors that name the folder, the file and the tensor. Immutable after open();
// safe to read from any thread.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "loader/safetensors.h"

namespace tessera::loader {

// The dequantization multipliers of one FP8 tensor [n, k]: w[r][c] = code[r][c] · at(r, c).
struct Fp8Scales {
    const TensorView* tensor = nullptr;  // f32 / bf16 / f16
    std::int64_t block_n = 1;            // rows one multiplier covers
    std::int64_t block_k = 1;            // columns one multiplier covers
    std::int64_t cols = 1;               // multipliers per row of blocks
    float at(std::int64_t row, std::int64_t col) const;
};

class WeightSource {
 public:
    // `fp8_block` is quantization_config.weight_block_size of an FP8 checkpoint ({0, 0}: the
    // DeepSeek-V3 / Qwen3-FP8 default of 128 × 128).
    static StatusOr<std::unique_ptr<WeightSource>> open(const std::string& model_dir,
                                                        std::pair<std::int64_t, std::int64_t> fp8_block = {0, 0});
    // --load-format dummy (SGLang's DummyModelLoader, "mainly for profiling"): no files. Each
    // tensor get() asks for is made on the spot in `dtype`, uniform in [-1e-3, 1e-3] from seed
    // 1234 anew per tensor (weight_utils.py initialize_dummy_weights), so every rank of a split
    // makes the same values. `present(name)` says whether an optional tensor exists (contains());
    // find() knows only the tensors made so far.
    static std::unique_ptr<WeightSource> dummy(const std::string& model_dir, DType dtype,
                                               std::function<bool(const std::string&)> present);

    // The tensor `name` with exactly `shape`.
    StatusOr<const TensorView*> get(const std::string& name,
                                    const std::vector<std::int64_t>& shape) const;
    bool contains(const std::string& name) const;
    const TensorView* find(const std::string& name) const;
    const std::string& model_dir() const { return model_dir_; }
    // The multipliers of the fp8 tensor `name` of shape [n, k]: its `<prefix>.weight_scale_inv`
    // of [ceil(n / block_n), ceil(k / block_k)] blocks, or `<prefix>.weight_scale` with one value
    // ([] or [1]) or one per row ([n] or [n, 1]). Fails naming the tensor when none fits.
    StatusOr<Fp8Scales> fp8_scales(const std::string& name, std::int64_t n, std::int64_t k) const;
    // Rows [row_begin, row_begin + rows) of the [n, k] tensor `name` as f32, dequantized when
    // it is fp8.
    StatusOr<std::vector<float>> read_rows_f32(const std::string& name, std::int64_t n, std::int64_t k,
                                               std::int64_t row_begin, std::int64_t rows) const;
    // The dtype most bytes of the unquantized tensors are stored in (what --dtype auto picks).
    DType dominant_dtype() const;
    // SafetensorsFile::drop_resident_pages on every file.
    void drop_resident_pages() const;
    // The same for the whole pages inside [data, data + bytes) of a tensor's mapping: bytes
    // already packed, so that a large tensor's file pages and its packed copy are not both
    // resident at the start-up peak.
    static void drop_resident_pages(const void* data, std::size_t bytes);

 private:
    std::string model_dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::int64_t fp8_block_n_ = 128;
    std::int64_t fp8_block_k_ = 128;

    // dummy(): the tensors made so far, each with its bytes.
    struct MadeTensor {
        TensorView view;
        std::vector<std::byte> bytes;
    };
    std::optional<DType> dummy_dtype_;
    std::function<bool(const std::string&)> dummy_present_;
    mutable std::mutex made_mu_;
    mutable std::map<std::string, std::unique_ptr<MadeTensor>> made_;
};

}  // namespace tessera::loader
