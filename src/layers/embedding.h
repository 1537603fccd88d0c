#pragma once
// layers/embedding.h — the vocabulary-parallel token embedding (SGLang's
// layers/vocab_parallel_embedding.py VocabParallelEmbedding): rank r keeps rows
// [r·v, (r+1)·v) with v = ceil(vocab / tp); ids outside the shard read as zero and the
// partial rows are summed over the TP group. Immutable after load; forward() by one thread.

#include <cstdint>
#include <span>
#include <string>

#include "base/aligned_buffer.h"
#include "layers/parallel.h"
#include "tensor/dtype.h"

namespace tessera::loader {
class WeightSource;
}

namespace tessera::layers {

class VocabParallelEmbedding {
 public:
    static StatusOr<VocabParallelEmbedding> load(const loader::WeightSource& source, const std::string& name,
                                                 std::int64_t vocab, std::int64_t hidden, const LayerParallel& par);

    // out f32 [tokens, hidden], complete on every rank (all-reduced).
    Status forward(std::span<const std::int32_t> tokens, float* out, const LayerParallel& par) const;
    std::size_t weight_bytes() const { return table_.size(); }

 private:
    std::int64_t hidden_ = 0;
    VocabShard shard_;
    DType dtype_ = DType::kF32;
    AlignedBuffer table_;  // dtype_ [shard_.rows.count, hidden], as stored (f16 widened to f32)
};

}  // namespace tessera::layers
