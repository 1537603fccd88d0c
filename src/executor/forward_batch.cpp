#include "executor/forward_batch.h"

namespace tessera::executor {

Status BatchRunner::launch(const ForwardBatch& batch) {
    // A failed step is reported by collect(), where the caller learns which step it was.
    finished_.push_back(run(batch));
    return Status::Ok();
}

StatusOr<std::vector<SampledToken>> BatchRunner::collect() {
    if (finished_.empty()) return Status::Internal("collect() without a launched step");
    StatusOr<std::vector<SampledToken>> result = std::move(finished_.front());
    finished_.pop_front();
    return result;
}

}  // namespace tessera::executor
