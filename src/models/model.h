#pragma once
// models/model.h — the Model interface: one forward step of a run of tokens of one sequence
// over its KV cache, returning logits. Models are immutable after load; forward() is called
// by one thread at a time per KvCache (the executor thread).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvcache/kv_cache.h"
#include "loader/model_config.h"

namespace tessera {
class ThreadPool;
}
namespace tessera::dist {
class ProcessGroup;
}

namespace tessera::models {

struct ForwardInput {
    std::span<const std::int32_t> tokens;  // I32 [n_tokens]
    std::int64_t start_pos = 0;            // position of tokens[0]; the cache holds 0..start_pos-1
    bool all_logits = false;               // logits for every token, else only the last
};

class Model {
 public:
    virtual ~Model() = default;
    Model() = default;
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    virtual const loader::ModelConfig& config() const = 0;
    virtual kvcache::KvCacheShape kv_cache_shape() const = 0;
    virtual DType compute_dtype() const = 0;
    virtual std::size_t weight_bytes() const = 0;
    // Weight bytes streamed from memory for one decode token (what bounds decode speed).
    virtual std::size_t weight_bytes_per_token() const = 0;
    // Multiply-add FLOPs of the linear layers for one token (2 per multiply-add), and of
    // attention for a token at position `pos`: what a forward of n tokens must compute.
    virtual double linear_flops_per_token() const = 0;
    virtual double attention_flops_at(std::int64_t pos) const = 0;

    // logits f32 [n_tokens or 1, vocab_size]; writes K/V of the new tokens into `cache`.
    virtual Status forward(const ForwardInput& input, kvcache::KvCache& cache, ThreadPool* pool,
                           std::vector<float>* logits) = 0;
};

struct LoadOptions {
    std::string model_path;
    std::string dtype = "auto";  // auto (the checkpoint's), f32, bf16
    // Tensor parallelism: this rank's place in its TP group, and the group (nullptr when
    // tp_size is 1). The model keeps only its shard of every weight.
    int tp_rank = 0;
    int tp_size = 1;
    dist::ProcessGroup* tp_group = nullptr;
};

// Reads config.json and the weights; fails with errors naming the file and tensor.
StatusOr<std::unique_ptr<Model>> load_model(const LoadOptions& options);

}  // namespace tessera::models
