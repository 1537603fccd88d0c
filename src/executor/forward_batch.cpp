#include "executor/forward_batch.h"

#include "dist/process_group.h"

namespace tessera::executor {

Status BatchRunner::launch(const ForwardBatch& batch) {
    // A failed step is reported by collect(), where the caller learns which step it was.
    finished_.push_back(run(batch));
    return Status::Ok();
}

Status BatchRunner::note_failure(Status s) {
    if (!s.ok() && fatal_.ok() && dist::breaks_group(s)) fatal_ = s;
    return s;
}

StatusOr<std::vector<SampledToken>> BatchRunner::collect() {
    if (finished_.empty()) return Status::Internal("collect() without a launched step");
    StatusOr<std::vector<SampledToken>> result = std::move(finished_.front());
    finished_.pop_front();
    return result;
}

}  // namespace tessera::executor
