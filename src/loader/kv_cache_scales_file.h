#pragma once
// loader/kv_cache_scales_file.h — the KV cache scaling factors of --quantization-param-path:
// SGLang's JSON (model_loader/weight_utils.py QuantParamSchema, kv_cache_scales_loader),
//   {"model_type": "llama",
//    "kv_cache": {"dtype": "float8_e4m3fn",
//                 "scaling_factor": {"0": {"0": 0.03, "1": 0.05, ...}, "1": {...}}}}
// one factor per TP rank and layer (every layer of the model, whatever the pipeline stage),
// taken as both k_scale and v_scale of that layer. SGLang's checks and messages; where SGLang
// logs an error and falls back to 1.0, the launch stops instead: a user who names a file
// means its scales to be used.

#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::loader {

struct KvCacheScalesQuery {
    int tp_rank = 0;
    int tp_size = 1;
    int num_hidden_layers = 0;
    std::string model_type;  // config.json's; the file must name the same (unchecked when empty)
};

// This TP rank's factor per layer, [num_hidden_layers], each finite and positive.
StatusOr<std::vector<float>> read_kv_cache_scales_file(const std::string& path, const KvCacheScalesQuery& query);

}  // namespace tessera::loader
