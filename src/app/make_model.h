#pragma once
// app/make_model.h — `tessera make-model`: random-weight Hugging Face model folders with the
// real architectures' config.json fields and tensor names, for tests and benchmarks.

#include <cstdint>
#include <string>

#include "base/status.h"

namespace tessera::app {

struct MakeModelOptions {
    std::string arch = "qwen3";     // llama, qwen2, qwen3, qwen3-moe, qwen2-moe, mixtral, deepseek-v2, deepseek-v3
    std::string preset = "tiny";    // tiny (unit tests), small (Qwen3-0.6B shapes)
    std::string dtype = "bf16";     // f32, bf16
    std::string tokenizer;          // "", qwen3, llama3: copy the real tokenizer files in; gpt2: GPT-2 style from qwen3
    std::string tokenizer_dir;      // folder holding <tokenizer>/tokenizer.json
    std::uint64_t seed = 0;
    int num_layers = 0;             // > 0: override the preset's decoder layer count
    double router_skew = 0.0;       // deepseek-v3: a bias toward the low experts (EPLB benchmarks)
    std::int64_t fp8_block = 0;     // > 0: an FP8 checkpoint (e4m3, fp8_block² scale tiles)
    std::string out;
};

Status make_model(const MakeModelOptions& options);

}  // namespace tessera::app
