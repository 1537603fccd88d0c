// dist/process_group.cpp — ProcessGroup defaults (every op is Unimplemented naming the backend),
// the shared argument checks, and the world_size == 1 group.

#include "dist/process_group.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

namespace tessera::dist {

// ---- ProcessGroup defaults -----------------------------------------------------------------

Status ProcessGroup::unsupported(const char* op) const {
    return Status::Unimplemented(fmt::format("process group '{}' does not support {} (group '{}')",
                                             backend_name(), op, name_));
}

Status ProcessGroup::all_reduce(std::span<float>, ReduceOp) { return unsupported("all_reduce"); }

template <typename Int>
Status ProcessGroup::all_reduce_integers(std::span<Int> data, ReduceOp op) {
    const int n = size();
    const auto bytes = static_cast<std::int64_t>(data.size_bytes());
    std::vector<std::uint8_t> send(static_cast<std::size_t>(bytes * n));
    for (int r = 0; r < n; ++r) std::memcpy(send.data() + r * bytes, data.data(), static_cast<std::size_t>(bytes));
    std::vector<std::uint8_t> recv(send.size());
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(n), bytes);
    TSR_RETURN_IF_ERROR(all_to_all_v(send, counts, recv, counts));
    const auto* values = reinterpret_cast<const Int*>(recv.data());
    for (std::size_t i = 0; i < data.size(); ++i) {
        Int v = values[i];
        for (int r = 1; r < n; ++r) {
            const Int x = values[r * data.size() + i];
            v = op == ReduceOp::kSum ? static_cast<Int>(v + x) : op == ReduceOp::kMax ? std::max(v, x) : std::min(v, x);
        }
        data[i] = v;
    }
    return Status::Ok();
}

Status ProcessGroup::all_reduce(std::span<std::int64_t> data, ReduceOp op) { return all_reduce_integers(data, op); }
Status ProcessGroup::all_reduce(std::span<std::int32_t> data, ReduceOp op) { return all_reduce_integers(data, op); }
StatusOr<std::vector<std::int64_t>> ProcessGroup::all_gather_rows(std::span<const std::int64_t> mine) {
    std::vector<std::int64_t> rows(static_cast<std::size_t>(size_) * mine.size(), 0);
    std::copy(mine.begin(), mine.end(), rows.begin() + static_cast<std::ptrdiff_t>(rank_ * mine.size()));
    TSR_RETURN_IF_ERROR(all_reduce(std::span<std::int64_t>(rows)));
    return rows;
}

Status ProcessGroup::all_gather(std::span<const float>, std::span<float>) {
    return unsupported("all_gather");
}
Status ProcessGroup::reduce_scatter(std::span<const float>, std::span<float>, ReduceOp) {
    return unsupported("reduce_scatter");
}
Status ProcessGroup::all_to_all_v(std::span<const std::uint8_t>, std::span<const std::int64_t>,
                                  std::span<std::uint8_t>, std::span<const std::int64_t>) {
    return unsupported("all_to_all_v");
}
Status ProcessGroup::broadcast(std::span<std::uint8_t>, int) { return unsupported("broadcast"); }
Status ProcessGroup::barrier() { return unsupported("barrier"); }
StatusOr<std::shared_ptr<Work>> ProcessGroup::isend(std::span<const std::uint8_t>, int, int) {
    return unsupported("isend");
}
StatusOr<std::shared_ptr<Work>> ProcessGroup::irecv(std::span<std::uint8_t>, int, int) {
    return unsupported("irecv");
}

// ---- argument checks -------------------------------------------------------------------------

Status ProcessGroup::check_all_gather(std::size_t in_count, std::size_t out_count) const {
    if (out_count != in_count * static_cast<std::size_t>(size_)) {
        return Status::InvalidArgument(fmt::format(
            "{} group '{}' all_gather: out has {} elements but must be size ({}) x in ({}) = {}",
            backend_name(), name_, out_count, size_, in_count, in_count * size_));
    }
    return Status::Ok();
}

Status ProcessGroup::check_reduce_scatter(std::size_t in_count, std::size_t out_count) const {
    if (in_count != out_count * static_cast<std::size_t>(size_)) {
        return Status::InvalidArgument(
            fmt::format("{} group '{}' reduce_scatter: in has {} elements but must be size ({}) x "
                        "out ({}) = {}",
                        backend_name(), name_, in_count, size_, out_count, out_count * size_));
    }
    return Status::Ok();
}

Status ProcessGroup::check_all_to_all_v(std::size_t send_bytes,
                                        std::span<const std::int64_t> send_counts,
                                        std::size_t recv_bytes,
                                        std::span<const std::int64_t> recv_counts) const {
    const auto n = static_cast<std::size_t>(size_);
    if (send_counts.size() != n || recv_counts.size() != n) {
        return Status::InvalidArgument(fmt::format(
            "{} group '{}' all_to_all_v: send_counts has {} and recv_counts {} entries; both need "
            "one per rank ({})",
            backend_name(), name_, send_counts.size(), recv_counts.size(), n));
    }
    auto check = [&](std::span<const std::int64_t> counts, std::size_t bytes, const char* which) {
        std::int64_t total = 0;
        for (std::int64_t c : counts) {
            if (c < 0) {
                return Status::InvalidArgument(
                    fmt::format("{} group '{}' all_to_all_v: negative {} count {}", backend_name(),
                                name_, which, c));
            }
            total += c;
        }
        if (static_cast<std::size_t>(total) > bytes) {
            return Status::InvalidArgument(fmt::format(
                "{} group '{}' all_to_all_v: {} counts sum to {} bytes but the buffer has {}",
                backend_name(), name_, which, total, bytes));
        }
        return Status::Ok();
    };
    TSR_RETURN_IF_ERROR(check(send_counts, send_bytes, "send"));
    return check(recv_counts, recv_bytes, "recv");
}

Status ProcessGroup::check_rank(int peer, const char* op, const char* what) const {
    if (peer < 0 || peer >= size_) {
        return Status::InvalidArgument(fmt::format("{} group '{}' {}: {} {} is not in [0, {})",
                                                   backend_name(), name_, op, what, peer, size_));
    }
    return Status::Ok();
}

// ---- ProcessGroupSingle ----------------------------------------------------------------------

namespace {

// world_size == 1: collectives are the identity (copies where out differs from in).
class ProcessGroupSingle final : public ProcessGroup {
 public:
    explicit ProcessGroupSingle(std::string name) : ProcessGroup(std::move(name), 0, 1) {}

    std::string backend_name() const override { return "single"; }

    // ProcessGroup
    using ProcessGroup::all_reduce;  // the integer overloads
    Status all_reduce(std::span<float>, ReduceOp) override { return Status::Ok(); }
    Status all_gather(std::span<const float> in, std::span<float> out) override {
        TSR_RETURN_IF_ERROR(check_all_gather(in.size(), out.size()));
        if (out.data() != in.data()) std::memmove(out.data(), in.data(), in.size_bytes());
        return Status::Ok();
    }
    Status reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp) override {
        TSR_RETURN_IF_ERROR(check_reduce_scatter(in.size(), out.size()));
        if (out.data() != in.data()) std::memmove(out.data(), in.data(), in.size_bytes());
        return Status::Ok();
    }
    Status all_to_all_v(std::span<const std::uint8_t> send,
                        std::span<const std::int64_t> send_counts, std::span<std::uint8_t> recv,
                        std::span<const std::int64_t> recv_counts) override {
        TSR_RETURN_IF_ERROR(check_all_to_all_v(send.size(), send_counts, recv.size(), recv_counts));
        if (send_counts[0] != recv_counts[0]) {
            return Status::InvalidArgument(fmt::format(
                "single group '{}' all_to_all_v: send_counts[0] ({}) != recv_counts[0] ({})",
                name(), send_counts[0], recv_counts[0]));
        }
        if (send_counts[0] > 0) {
            std::memmove(recv.data(), send.data(), static_cast<std::size_t>(send_counts[0]));
        }
        return Status::Ok();
    }
    Status broadcast(std::span<std::uint8_t>, int root) override {
        return check_rank(root, "broadcast", "root");
    }
    Status barrier() override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_group(std::string name) {
    return std::make_unique<ProcessGroupSingle>(std::move(name));
}

}  // namespace tessera::dist
