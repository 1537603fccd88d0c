#pragma once
// models/weights_source.h — where /update_weights_from_disk reads a served model's new
// weights: a folder of the same model with other values (SGLang's io_struct.py
// UpdateWeightFromDiskReqInput model_path and load_format), and which of the update's two
// control steps carries it. Plain data.

#include <cstdint>
#include <string>

namespace tessera::models {

// kLoad: every rank loads its share beside the served weights (its TP group agrees on the
// outcome); then kCommit swaps them in on every rank, or kDiscard drops them, as the leader
// decides from every pipeline stage's outcome.
enum class WeightsPhase : std::int8_t { kLoad, kCommit, kDiscard };

struct WeightsSource {
    std::string model_path;
    std::string load_format;  // auto or safetensors; "": the launch's --load-format
    WeightsPhase phase = WeightsPhase::kLoad;
    // kLoad under pipeline parallelism: every earlier stage loaded its share (a later stage
    // then does not try).
    bool earlier_stages_loaded = true;
};

}  // namespace tessera::models
