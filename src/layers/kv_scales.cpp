#include "layers/kv_scales.h"

#include <algorithm>
#include <array>
#include <optional>
#include <span>

#include "loader/weight_source.h"
#include "tensor/dtype.h"

namespace tessera::layers {
namespace {

struct ScaleNames {
    std::array<const char*, 3> k;
    std::array<const char*, 3> v;
    const char* kv;
};
constexpr ScaleNames kNames{{"k_scale", "attn.k_scale", "k_proj.k_scale"},
                            {"v_scale", "attn.v_scale", "v_proj.v_scale"},
                            "kv_scale"};

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

}  // namespace

StatusOr<KvScales> load_kv_scales(const loader::WeightSource& source, const std::string& prefix) {
    TSR_ASSIGN_OR_RETURN(std::optional<float> k, read_scale(source, prefix, kNames.k));
    TSR_ASSIGN_OR_RETURN(std::optional<float> v, read_scale(source, prefix, kNames.v));
    if (!k) {
        const std::array<const char*, 1> kv{kNames.kv};
        TSR_ASSIGN_OR_RETURN(k, read_scale(source, prefix, kv));
    }
    const float k_value = k.value_or(-1.0f), v_value = v.value_or(-1.0f);
    if (k_value > 0.0f && v_value > 0.0f) return KvScales{k_value, v_value, true};
    if (k_value <= 0.0f && v_value <= 0.0f) return KvScales{};
    const float both = std::max(k_value, v_value);
    return KvScales{both, both, true};
}

bool has_kv_scales(const loader::WeightSource& source, const std::string& prefix) {
    const auto any = [&](std::span<const char* const> names) {
        return std::any_of(names.begin(), names.end(), [&](const char* n) { return source.contains(prefix + n); });
    };
    return any(kNames.k) || any(kNames.v) || source.contains(prefix + kNames.kv);
}

}  // namespace tessera::layers
