#pragma once
// layers/kv_scales.h — the per-tensor scales an fp8 KV cache takes from a checkpoint. The
// cache holds K / k_scale and V / v_scale; attention multiplies its scores by k_scale and its
// output by v_scale, so the products see the original values. Names and rules as SGLang
// reads them (model_loader/weight_utils.py maybe_remap_kv_scale_name; layers/quantization/
// kv_cache.py BaseKVCacheMethod.process_weights_after_loading):
//   <attn>.k_scale / .v_scale, the same under <attn>.attn., ModelOpt's <attn>.k_proj.k_scale /
//   <attn>.v_proj.v_scale, and the deprecated single <attn>.kv_scale (taken as k_scale);
//   both positive: used as they are; neither (absent or not positive): 1; one of them: the
//   larger value for both.
// DeepSeek's MLA attention keeps them on its attn_mqa module (models/deepseek_v2.py
// load_weights maps ModelOpt's k_proj / v_proj names there). Its cache holds one latent that
// serves as keys and values, stored divided by k_scale as SGLang's MLA backends store it.
// Only per-tensor scales: a tensor of more than one value is refused.

#include <string>

#include "base/status.h"

namespace tessera::loader {
class WeightSource;
}

namespace tessera::layers {

struct KvScales {
    float k = 1.0f;
    float v = 1.0f;
    // Where they came from: "" (nowhere: both 1), "the checkpoint" or "the --quantization-param-path file".
    std::string source;
};

// `prefix`: the attention module, "model.layers.{i}.self_attn.".
StatusOr<KvScales> load_kv_scales(const loader::WeightSource& source, const std::string& prefix);
StatusOr<KvScales> load_mla_kv_scales(const loader::WeightSource& source, const std::string& prefix);

}  // namespace tessera::layers
