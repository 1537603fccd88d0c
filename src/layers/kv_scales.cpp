#include "layers/kv_scales.h"

#include <algorithm>
#include <optional>
#include <span>

#include "loader/weight_source.h"
#include "tensor/dtype.h"

namespace tessera::layers {
namespace {

constexpr const char* kGqaK[] = {"k_scale", "attn.k_scale", "k_proj.k_scale", "kv_scale"};
constexpr const char* kGqaV[] = {"v_scale", "attn.v_scale", "v_proj.v_scale"};
constexpr const char* kMlaK[] = {"attn_mqa.k_scale", "k_proj.k_scale"};
constexpr const char* kMlaV[] = {"attn_mqa.v_scale", "v_proj.v_scale"};

// The value of the first of `names` under `prefix`, if the checkpoint has one.
StatusOr<std::optional<float>> read_scale(const loader::WeightSource& source, const std::string& prefix,
                                          std::span<const char* const> names) {
    for (const char* name : names) {
        const loader::TensorView* t = source.find(prefix + name);
        if (t == nullptr) continue;
        if (t->numel() != 1) {
            return Status::InvalidArgument(prefix + name + " has shape " + loader::shape_string(t->shape) +
                                           ": only per-tensor scaling factors are supported for an fp8 KV cache");
        }
        float value = 0.0f;
        convert_to_f32(t->data, t->dtype, &value, 1);
        return std::optional<float>(value);
    }
    return std::optional<float>();
}

StatusOr<KvScales> load_scales(const loader::WeightSource& source, const std::string& prefix,
                               std::span<const char* const> k_names, std::span<const char* const> v_names) {
    TSR_ASSIGN_OR_RETURN(std::optional<float> k, read_scale(source, prefix, k_names));
    TSR_ASSIGN_OR_RETURN(std::optional<float> v, read_scale(source, prefix, v_names));
    const float k_value = k.value_or(-1.0f), v_value = v.value_or(-1.0f);
    if (k_value > 0.0f && v_value > 0.0f) return KvScales{k_value, v_value, "the checkpoint"};
    if (k_value <= 0.0f && v_value <= 0.0f) return KvScales{};
    const float both = std::max(k_value, v_value);
    return KvScales{both, both, "the checkpoint"};
}

}  // namespace

StatusOr<KvScales> load_kv_scales(const loader::WeightSource& source, const std::string& prefix) {
    return load_scales(source, prefix, kGqaK, kGqaV);
}

StatusOr<KvScales> load_mla_kv_scales(const loader::WeightSource& source, const std::string& prefix) {
    return load_scales(source, prefix, kMlaK, kMlaV);
}

}  // namespace tessera::layers
