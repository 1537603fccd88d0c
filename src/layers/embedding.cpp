#include "layers/embedding.h"

#include <algorithm>
#include <cstring>

#include "loader/weight_source.h"

namespace tessera::layers {

StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::load(const loader::WeightSource& source,
                                                              const std::string& name, std::int64_t vocab,
                                                              std::int64_t hidden, const LayerParallel& par) {
    VocabParallelEmbedding e;
    e.hidden_ = hidden;
    e.shard_ = shard_vocab(vocab, par.tp);
    TSR_ASSIGN_OR_RETURN(auto t, source.get(name, {vocab, hidden}));
    e.dtype_ = t->dtype == DType::kF16 ? DType::kF32 : t->dtype;
    const std::int64_t rows = e.shard_.rows.count;
    e.table_ = AlignedBuffer(static_cast<std::size_t>(rows * hidden) * dtype_size(e.dtype_));
    const auto* first = reinterpret_cast<const unsigned char*>(t->data) +
                        static_cast<std::size_t>(e.shard_.rows.begin * hidden) * dtype_size(t->dtype);
    if (t->dtype == DType::kF16) {
        convert_to_f32(first, t->dtype, e.table_.as<float>(), static_cast<std::size_t>(rows * hidden));
    } else {
        std::memcpy(e.table_.data(), first, e.table_.size());
    }
    return e;
}

Status VocabParallelEmbedding::forward(std::span<const std::int32_t> tokens, float* out,
                                       const LayerParallel& par) const {
    const std::size_t row_bytes = static_cast<std::size_t>(hidden_) * dtype_size(dtype_);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::int64_t row = tokens[i] - shard_.rows.begin;
        float* dst = out + static_cast<std::int64_t>(i) * hidden_;
        if (row < 0 || row >= shard_.rows.count) {
            std::fill(dst, dst + hidden_, 0.0f);  // another rank's row: it arrives through the all-reduce
        } else {
            convert_to_f32(table_.data() + static_cast<std::size_t>(row) * row_bytes, dtype_, dst,
                           static_cast<std::size_t>(hidden_));
        }
    }
    return par.all_reduce({out, tokens.size() * static_cast<std::size_t>(hidden_)});
}

}  // namespace tessera::layers
