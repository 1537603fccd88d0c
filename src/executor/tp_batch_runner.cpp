#include "executor/tp_batch_runner.h"

#include <cstring>

#include "base/logging.h"
#include "dist/process_group.h"

namespace tessera::executor {

namespace {

class Writer {
 public:
    void i64(std::int64_t v) { append(&v, sizeof(v)); }
    void i32s(const std::vector<std::int32_t>& v) {
        i64(static_cast<std::int64_t>(v.size()));
        append(v.data(), v.size() * sizeof(std::int32_t));
    }
    std::vector<std::uint8_t> take() { return std::move(bytes_); }

 private:
    void append(const void* p, std::size_t n) {
        const auto* b = static_cast<const std::uint8_t*>(p);
        bytes_.insert(bytes_.end(), b, b + n);
    }
    std::vector<std::uint8_t> bytes_;
};

class Reader {
 public:
    explicit Reader(const std::vector<std::uint8_t>& b) : bytes_(b) {}
    bool i64(std::int64_t* v) { return take(v, sizeof(*v)); }
    bool i32s(std::vector<std::int32_t>* v) {
        std::int64_t n = 0;
        if (!i64(&n) || n < 0 || static_cast<std::size_t>(n) > (bytes_.size() - pos_) / sizeof(std::int32_t))
            return false;
        v->resize(static_cast<std::size_t>(n));
        return take(v->data(), v->size() * sizeof(std::int32_t));
    }
    bool done() const { return pos_ == bytes_.size(); }

 private:
    bool take(void* out, std::size_t n) {
        if (bytes_.size() - pos_ < n) return false;
        std::memcpy(out, bytes_.data() + pos_, n);
        pos_ += n;
        return true;
    }
    const std::vector<std::uint8_t>& bytes_;
    std::size_t pos_ = 0;
};

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

std::vector<std::uint8_t> encode_step(const ForwardBatch& batch) {
    Writer w;
    w.i64(static_cast<std::int64_t>(batch.seqs.size()));
    for (const auto& s : batch.seqs) {
        w.i32s(s.tokens);
        w.i64(s.start_pos);
        w.i32s(s.slots);
        w.i64(s.need_token ? 1 : 0);
    }
    return w.take();
}

StatusOr<ForwardBatch> decode_step(const std::vector<std::uint8_t>& bytes) {
    Reader r(bytes);
    ForwardBatch batch;
    std::int64_t n = 0;
    if (!r.i64(&n) || n < 0 || n > (1 << 20)) return Status::DataLoss("corrupt step header from the TP leader");
    batch.seqs.resize(static_cast<std::size_t>(n));
    for (auto& s : batch.seqs) {
        std::int64_t need = 0;
        if (!r.i32s(&s.tokens) || !r.i64(&s.start_pos) || !r.i32s(&s.slots) || !r.i64(&need))
            return Status::DataLoss("corrupt step from the TP leader");
        s.need_token = need != 0;
    }
    if (!r.done()) return Status::DataLoss("trailing bytes in a step from the TP leader");
    return batch;
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
    auto size = static_cast<std::int64_t>(bytes.size());
    TSR_RETURN_IF_ERROR(broadcast_size(tp_group_, &size));
    TSR_RETURN_IF_ERROR(tp_group_.broadcast(bytes, 0));
    return local_.run(batch);
}

Status TpLeaderRunner::stop_followers() {
    if (stopped_) return Status::Ok();
    stopped_ = true;
    std::int64_t size = kStop;
    return broadcast_size(tp_group_, &size);
}

Status follow_leader(models::Model& model, const kvcache::KvView& kv, ThreadPool* pool,
                     dist::ProcessGroup& tp_group) {
    std::vector<float> logits;
    std::vector<std::uint8_t> bytes;
    while (true) {
        std::int64_t size = 0;
        TSR_RETURN_IF_ERROR(broadcast_size(tp_group, &size));
        if (size == kStop) return Status::Ok();
        bytes.assign(static_cast<std::size_t>(size), 0);
        TSR_RETURN_IF_ERROR(tp_group.broadcast(bytes, 0));
        TSR_ASSIGN_OR_RETURN(ForwardBatch batch, decode_step(bytes));
        models::BatchInput input;
        std::vector<std::int32_t> tokens;
        for (const auto& s : batch.seqs) {
            if (static_cast<std::int64_t>(s.slots.size()) < s.start_pos + static_cast<std::int64_t>(s.tokens.size()))
                return Status::DataLoss("step from the TP leader has fewer KV slots than positions");
            tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
            input.seqs.push_back({static_cast<std::int64_t>(s.tokens.size()), s.start_pos, s.slots.data(),
                                  s.need_token ? models::LogitsMode::kLast : models::LogitsMode::kNone});
        }
        input.tokens = tokens;
        TSR_RETURN_IF_ERROR(model.forward(input, kv, pool, &logits));
    }
}

}  // namespace tessera::executor
