#include "layers/logits_head.h"

#include <algorithm>

#include "dist/process_group.h"

namespace tessera::layers {

StatusOr<LogitsHead> LogitsHead::load(const loader::WeightSource& source, const std::string& name,
                                      std::int64_t vocab, std::int64_t hidden, DType compute_dtype,
                                      const LayerParallel& par) {
    LogitsHead head;
    head.vocab_ = vocab;
    head.shard_ = shard_vocab(vocab, par.tp);
    TSR_ASSIGN_OR_RETURN(head.proj_,
                         Linear::load(source, {{{name, vocab, head.shard_.rows.begin, head.shard_.rows.count}},
                                               hidden, 0, -1, false, compute_dtype}));
    return head;
}

Status LogitsHead::forward(const float* hidden, std::int64_t rows, std::vector<float>* logits, ThreadPool* pool,
                           const LayerParallel& par) {
    const std::int64_t local = shard_.rows.count;
    logits->resize(static_cast<std::size_t>(rows * vocab_));
    if (par.tp_group == nullptr) {
        proj_.forward(hidden, rows, logits->data(), pool);
        return Status::Ok();
    }
    shard_logits_.resize(static_cast<std::size_t>(rows * local));
    proj_.forward(hidden, rows, shard_logits_.data(), pool);
    // Every shard is padded to rows_per_rank columns so that all ranks send the same count.
    const std::int64_t per = shard_.rows_per_rank;
    padded_.assign(static_cast<std::size_t>(rows * per), 0.0f);
    for (std::int64_t r = 0; r < rows; ++r)
        std::copy(shard_logits_.begin() + r * local, shard_logits_.begin() + (r + 1) * local, padded_.begin() + r * per);
    gathered_.resize(static_cast<std::size_t>(par.tp.size * rows * per));
    TSR_RETURN_IF_ERROR(par.tp_group->all_gather(padded_, gathered_));
    for (int rank = 0; rank < par.tp.size; ++rank) {
        const std::int64_t begin = rank * per;
        const std::int64_t count = std::max<std::int64_t>(0, std::min(vocab_, begin + per) - begin);
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* src = gathered_.data() + (rank * rows + r) * per;
            std::copy(src, src + count, logits->data() + r * vocab_ + begin);
        }
    }
    return Status::Ok();
}

}  // namespace tessera::layers
