#pragma once
// models/architectures.h — one builder per model file; models/registry.cpp maps each
// config.json architecture to one of them.

#include <memory>

#include "loader/weight_source.h"
#include "models/model.h"

namespace tessera::models {

using ModelBuilder = StatusOr<std::unique_ptr<Model>> (*)(const loader::ModelConfig&, const loader::WeightSource&,
                                                           DType, const LoadOptions&);

StatusOr<std::unique_ptr<Model>> build_llama(const loader::ModelConfig&, const loader::WeightSource&, DType,
                                             const LoadOptions&);  // also Qwen2, Qwen3
StatusOr<std::unique_ptr<Model>> build_qwen_moe(const loader::ModelConfig&, const loader::WeightSource&, DType,
                                                const LoadOptions&);  // Qwen3-MoE, Qwen2-MoE
StatusOr<std::unique_ptr<Model>> build_mixtral(const loader::ModelConfig&, const loader::WeightSource&, DType,
                                               const LoadOptions&);
StatusOr<std::unique_ptr<Model>> build_deepseek_v2(const loader::ModelConfig&, const loader::WeightSource&, DType,
                                                   const LoadOptions&);  // V2 and V3

}  // namespace tessera::models
