#include "executor/tp_batch_runner.h"

#include <cstring>

#include "base/logging.h"
#include "dist/process_group.h"
#include "executor/step_codec.h"

namespace tessera::executor {

namespace {

// The first broadcast of every step carries the payload size; 0 means "stop".
constexpr std::int64_t kStop = 0;

Status broadcast_size(dist::ProcessGroup& group, std::int64_t* size) {
    std::uint8_t buf[sizeof(std::int64_t)];
    std::memcpy(buf, size, sizeof(buf));
    TSR_RETURN_IF_ERROR(group.broadcast(std::span<std::uint8_t>(buf, sizeof(buf)), 0));
    std::memcpy(size, buf, sizeof(buf));
    return Status::Ok();
}

}  // namespace

Status broadcast_step(dist::ProcessGroup& tp_group, std::vector<std::uint8_t>& bytes) {
    auto size = static_cast<std::int64_t>(bytes.size());
    TSR_RETURN_IF_ERROR(broadcast_size(tp_group, &size));
    if (size == kStop) return Status::Ok();
    return tp_group.broadcast(bytes, 0);
}

StatusOr<std::vector<std::uint8_t>> receive_step(dist::ProcessGroup& tp_group) {
    std::int64_t size = 0;
    TSR_RETURN_IF_ERROR(broadcast_size(tp_group, &size));
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size), 0);
    if (size != kStop) TSR_RETURN_IF_ERROR(tp_group.broadcast(bytes, 0));
    return bytes;
}

TpLeaderRunner::TpLeaderRunner(BatchRunner& local, dist::ProcessGroup& tp_group)
    : local_(local), tp_group_(tp_group) {}

TpLeaderRunner::~TpLeaderRunner() {
    Status s = stop_followers();
    if (!s.ok()) TSR_LOG_C(WARN, "executor", "stopping TP followers: {}", s.message());
}

StatusOr<std::vector<SampledToken>> TpLeaderRunner::run(const ForwardBatch& batch) {
    if (stopped_) return Status::Internal("TP followers were already stopped");
    std::vector<std::uint8_t> bytes = encode_step(batch);
    TSR_RETURN_IF_ERROR(note_failure(broadcast_step(tp_group_, bytes)));
    StatusOr<std::vector<SampledToken>> result = local_.run(batch);  // its collectives span the group
    if (!result.ok()) return note_failure(result.status());
    return result;
}

Status TpLeaderRunner::stop_followers() {
    // After a fatal error the followers are stalled or gone; the launcher ends them.
    if (stopped_ || !fatal_error().ok()) return Status::Ok();
    stopped_ = true;
    std::vector<std::uint8_t> stop;
    return broadcast_step(tp_group_, stop);
}

Status follow_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                     dist::ProcessGroup& tp_group) {
    std::vector<float> logits;
    std::vector<std::int32_t> tokens;
    while (true) {
        TSR_ASSIGN_OR_RETURN(std::vector<std::uint8_t> bytes, receive_step(tp_group));
        if (bytes.empty()) return Status::Ok();
        TSR_ASSIGN_OR_RETURN(ForwardBatch batch, decode_step(bytes));
        TSR_ASSIGN_OR_RETURN(models::BatchInput input, batch_input(batch, &tokens));
        TSR_RETURN_IF_ERROR(model.forward(input, kv, pool, &logits));
    }
}

}  // namespace tessera::executor
