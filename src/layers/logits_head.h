#pragma once
// layers/logits_head.h — the LM head: the final hidden rows times this rank's vocabulary
// shard (column parallel), then the shards gathered over the TP group in rank order with the
// padding of the last shard dropped (SGLang's layers/logits_processor.py
// LogitsProcessor._get_logits). Immutable after load; forward() by one thread.

#include <cstdint>
#include <string>
#include <vector>

#include "layers/linear.h"
#include "layers/parallel.h"

namespace tessera::layers {

class LogitsHead {
 public:
    static StatusOr<LogitsHead> load(const loader::WeightSource& source, const std::string& name,
                                     std::int64_t vocab, std::int64_t hidden, DType compute_dtype,
                                     const LayerParallel& par);

    // logits f32 [rows, vocab] from hidden f32 [rows, hidden]; every rank of the TP group
    // calls it with the same rows.
    Status forward(const float* hidden, std::int64_t rows, std::vector<float>* logits, ThreadPool* pool,
                   const LayerParallel& par);
    std::size_t weight_bytes() const { return proj_.weight_bytes(); }
    const Linear& projection() const { return proj_; }

 private:
    std::int64_t vocab_ = 0;
    VocabShard shard_;
    Linear proj_;
    std::vector<float> shard_logits_, padded_, gathered_;
};

}  // namespace tessera::layers
