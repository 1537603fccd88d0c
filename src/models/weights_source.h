#pragma once
// models/weights_source.h — where /update_weights_from_disk reads a served model's new
// weights: a folder of the same model with other values (SGLang's io_struct.py
// UpdateWeightFromDiskReqInput model_path and load_format). Plain data.

#include <string>

namespace tessera::models {

struct WeightsSource {
    std::string model_path;
    std::string load_format;  // auto or safetensors; "": the launch's --load-format
};

}  // namespace tessera::models
