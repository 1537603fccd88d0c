// dist/gloo/process_group_gloo.cpp — see process_group_gloo.h.
// Gloo facts this relies on (Debian 0.0~git20220518): new-style ops take Options with a tag
// and a timeout; reduce_scatter only exists as the legacy ReduceScatterHalvingDoubling (not
// used: wrong results for 3-4 ranks here); a timed-out wait closes every pair of the context, so a
// group never recovers from one.

#include "dist/gloo/process_group_gloo.h"

#include <fmt/core.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "base/logging.h"
#include "dist/store.h"

namespace tessera::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Slot layout for our own piecewise transfers: Gloo's collectives use small 8-bit prefixes
// and the legacy algorithms count up from 0, so the top prefixes are free.
constexpr std::uint64_t kP2pSlotPrefix = 0xF0;
constexpr std::uint64_t kAllToAllSlotPrefix = 0xF1;
constexpr std::uint64_t kMaxPieces = 1ull << 24;

std::uint64_t make_slot(std::uint64_t prefix, std::uint32_t tag, std::uint64_t piece) {
    return (prefix << 56) | (static_cast<std::uint64_t>(tag) << 24) | piece;
}

std::size_t piece_count(std::size_t bytes) {
    return (bytes + ProcessGroupGloo::kMaxPieceBytes - 1) / ProcessGroupGloo::kMaxPieceBytes;
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
}

bool is_timeout(const std::string& what) {
    return what.find("Timed out") != std::string::npos ||
           what.find("timed out") != std::string::npos || what.find("Timeout") != std::string::npos;
}

// Converts the exception in flight into a Status (call from a catch block only).
Status status_from_exception(const std::string& context) {
    std::string what;
    try {
        throw;
    } catch (const std::exception& e) {
        what = e.what();
    } catch (...) {
        what = "unknown exception";
    }
    return Status(is_timeout(what) ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
                  fmt::format("{}: {}", context, what));
}

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this process
// with SIGPIPE instead of surfacing as an error. Ignore SIGPIPE process-wide (only when it
// still has the default action, so an application handler is kept).
void ignore_sigpipe() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction old {};
        if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
            ::signal(SIGPIPE, SIG_IGN);
        }
    });
}

// Our Store seen through Gloo's rendezvous interface (throws gloo::IoException on failure,
// as Gloo expects; the throw never escapes make_gloo_group).
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
    GlooStoreAdapter(dist::Store& store, std::chrono::milliseconds timeout)
        : store_(store), timeout_(timeout) {}

    void set(const std::string& key, const std::vector<char>& data) override {
        std::vector<std::uint8_t> bytes(data.begin(), data.end());
        Status s = store_.set(key, bytes);
        if (!s.ok()) throw gloo::IoException(s.message());
    }
    std::vector<char> get(const std::string& key) override {
        auto r = store_.get(key, timeout_);
        if (!r.ok()) throw gloo::IoException(r.status().message());
        return std::vector<char>(r.value().begin(), r.value().end());
    }
    void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
    void wait(const std::vector<std::string>& keys,
              const std::chrono::milliseconds& timeout) override {
        const auto deadline = Clock::now() + timeout;
        for (const auto& key : keys) {
            auto r = store_.get(key, remaining(deadline));
            if (!r.ok()) throw gloo::IoException(r.status().message());
        }
    }

 private:
    dist::Store& store_;
    const std::chrono::milliseconds timeout_;
};

template <typename T>
void reduce_into(void* c, const void* a, const void* b, size_t n, ReduceOp op) {
    auto* out = static_cast<T*>(c);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    switch (op) {
        case ReduceOp::kSum:
            for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
            break;
        case ReduceOp::kMax:
            for (size_t i = 0; i < n; ++i) out[i] = std::max(x[i], y[i]);
            break;
        case ReduceOp::kMin:
            for (size_t i = 0; i < n; ++i) out[i] = std::min(x[i], y[i]);
            break;
    }
}

// A piecewise transfer: `pieces` sends or receives on one unbound buffer, each awaited once.
class PieceTransfer {
 public:
    PieceTransfer(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool is_send)
        : buffer_(std::move(buffer)), is_send_(is_send) {}

    void post(int peer, std::uint64_t slot, size_t offset, size_t nbytes) {
        if (is_send_) {
            buffer_->send(peer, slot, offset, nbytes);
        } else {
            buffer_->recv(peer, slot, offset, nbytes);
        }
        ++pending_;
    }

    // Throws gloo exceptions on timeout / closed pairs. Returns false if aborted.
    bool wait_all(Clock::time_point deadline) {
        while (pending_ > 0) {
            bool ok = is_send_ ? buffer_->waitSend(remaining(deadline))
                               : buffer_->waitRecv(remaining(deadline));
            if (!ok) return false;
            --pending_;
        }
        return true;
    }

    size_t pending() const { return pending_; }

 private:
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
    const bool is_send_;
    size_t pending_ = 0;
};

// Work handle of isend / irecv. is_completed() reports completion observed by wait(); Gloo
// has no non-blocking completion test that leaves the context usable after a miss.
class GlooP2pWork final : public Work {
 public:
    GlooP2pWork(std::unique_ptr<PieceTransfer> transfer,
                std::shared_ptr<ProcessGroupGloo::State> state, std::string what)
        : transfer_(std::move(transfer)), state_(std::move(state)), what_(std::move(what)) {}

    ~GlooP2pWork() override {
        if (!done_ && !state_->broken) {
            TSR_LOG_C(WARN, "dist", "{} destroyed before completion; waiting for it", what_);
            Status s = wait(std::chrono::milliseconds(30'000));
            (void)s;
        }
    }

    bool is_completed() override { return done_; }

    Status wait(std::chrono::milliseconds timeout) override {
        if (done_) return Status::Ok();
        if (state_->broken) {
            return Status(StatusCode::kUnavailable,
                          fmt::format("{}: group unusable after an earlier failure ({})", what_,
                                      state_->broken_reason));
        }
        try {
            if (!transfer_->wait_all(Clock::now() + timeout)) {
                return Status(StatusCode::kUnavailable, fmt::format("{}: aborted", what_));
            }
        } catch (...) {
            Status s =
                status_from_exception(fmt::format("{} ({} of its pieces unfinished)", what_, transfer_->pending()));
            state_->broken = true;
            state_->broken_reason = s.message();
            return s;
        }
        done_ = true;
        return Status::Ok();
    }

 private:
    std::unique_ptr<PieceTransfer> transfer_;
    std::shared_ptr<ProcessGroupGloo::State> state_;
    const std::string what_;
    bool done_ = false;
};

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(const ProcessGroupOptions& options,
                                   std::shared_ptr<gloo::Context> context)
    : ProcessGroup(options.name, options.rank, options.size),
      timeout_(options.timeout),
      global_ranks_(options.global_ranks),
      rank_order_reduce_(options.rank_order_reduce),
      context_(std::move(context)),
      state_(std::make_shared<State>()) {}

ProcessGroupGloo::~ProcessGroupGloo() = default;

template <typename Fn>
Status ProcessGroupGloo::run_collective(const char* op, Fn&& fn) {
    const std::uint64_t seq = ++seq_;
    if (state_->broken) {
        return Status(
            StatusCode::kUnavailable,
            fmt::format("gloo group '{}' {} #{}: group unusable after an earlier failure ({})",
                        name(), op, seq, state_->broken_reason));
    }
    try {
        fn(static_cast<std::uint32_t>(seq));
    } catch (...) {
        Status s = status_from_exception(
            fmt::format("gloo group '{}' {} #{} (rank {} of {}, timeout {} ms) failed", name(), op,
                        seq, rank(), size(), timeout_.count()));
        // A broken connection means a peer process is gone, a timeout that it stalled or died
        // mid-message; say which ranks it can be when they are known.
        if (global_ranks_.size() == static_cast<std::size_t>(size())) {
            std::string peers;
            for (int r = 0; r < size(); ++r)
                if (r != rank()) peers += (peers.empty() ? "" : ", ") + std::to_string(global_ranks_[r]);
            const bool lost = s.code() == StatusCode::kUnavailable;
            const std::string who = size() == 2 ? "rank " + peers : "one of ranks " + peers;
            s = Status(s.code(), s.message() + (lost ? "; lost " + who : "; no answer from " + who));
        }
        state_->broken = true;
        state_->broken_reason = s.message();
        return s;
    }
    return Status::Ok();
}

// ---- ProcessGroup ----------------------------------------------------------------------------

// Gloo's ring adds an element's parts in an order set by the chunk of the buffer it falls in,
// so a value reduced in a buffer of another length (another batch) can round differently.
// With rank_order_reduce every rank gathers all parts and adds them in rank order, at `size`
// times the traffic. Two ranks need nothing: a + b rounds as b + a.
Status ProcessGroupGloo::all_reduce_in_rank_order(std::span<float> data, ReduceOp op) {
    std::vector<float> parts(data.size() * static_cast<std::size_t>(size()));
    TSR_RETURN_IF_ERROR(all_gather(data, parts));
    std::copy(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(data.size()), data.begin());
    for (int r = 1; r < size(); ++r)
        reduce_into<float>(data.data(), data.data(), parts.data() + static_cast<std::size_t>(r) * data.size(),
                           data.size(), op);
    return Status::Ok();
}

Status ProcessGroupGloo::all_reduce(std::span<float> data, ReduceOp op) {
    if (rank_order_reduce_ && size() > 2) return all_reduce_in_rank_order(data, op);
    return run_collective("all_reduce", [&](std::uint32_t tag) {
        if (data.empty() || size() == 1) return;
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(data.data(), data.size());
        opts.setReduceFunction([op](void* c, const void* a, const void* b, size_t n) {
            reduce_into<float>(c, a, b, n, op);
        });
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
    });
}

Status ProcessGroupGloo::all_gather(std::span<const float> in, std::span<float> out) {
    TSR_RETURN_IF_ERROR(check_all_gather(in.size(), out.size()));
    return run_collective("all_gather", [&](std::uint32_t tag) {
        if (in.empty()) return;
        if (size() == 1) {
            std::memmove(out.data(), in.data(), in.size_bytes());
            return;
        }
        gloo::AllgatherOptions opts(context_);
        opts.setInput(const_cast<float*>(in.data()), in.size());
        opts.setOutput(out.data(), out.size());
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allgather(opts);
    });
}

Status ProcessGroupGloo::reduce_scatter(std::span<const float> in, std::span<float> out,
                                        ReduceOp op) {
    TSR_RETURN_IF_ERROR(check_reduce_scatter(in.size(), out.size()));
    if (rank_order_reduce_ && size() > 2) {
        std::vector<float> reduced(in.begin(), in.end());
        TSR_RETURN_IF_ERROR(all_reduce_in_rank_order(reduced, op));
        std::copy_n(reduced.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank()) * out.size()),
                    out.size(), out.begin());
        return Status::Ok();
    }
    // Gloo has reduce_scatter only as the legacy ReduceScatterHalvingDoubling, which returned
    // wrong blocks and then hung for 3 and 4 ranks with small counts on this build. An
    // all_reduce of a copy, keeping this rank's block, is correct at twice the traffic.
    return run_collective("reduce_scatter", [&](std::uint32_t tag) {
        if (out.empty()) return;
        if (size() == 1) {
            std::memmove(out.data(), in.data(), in.size_bytes());
            return;
        }
        std::vector<float> scratch(in.begin(), in.end());
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(scratch.data(), scratch.size());
        opts.setReduceFunction([op](void* c, const void* a, const void* b, size_t n) {
            reduce_into<float>(c, a, b, n, op);
        });
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        std::memcpy(out.data(), scratch.data() + static_cast<size_t>(rank()) * out.size(),
                    out.size_bytes());
    });
}

Status ProcessGroupGloo::all_to_all_v(std::span<const std::uint8_t> send,
                                      std::span<const std::int64_t> send_counts,
                                      std::span<std::uint8_t> recv,
                                      std::span<const std::int64_t> recv_counts) {
    TSR_RETURN_IF_ERROR(check_all_to_all_v(send.size(), send_counts, recv.size(), recv_counts));
    if (send_counts[rank()] != recv_counts[rank()]) {
        return Status::InvalidArgument(fmt::format(
            "gloo group '{}' all_to_all_v: send_counts[{}] ({}) != recv_counts[{}] ({})", name(),
            rank(), send_counts[rank()], rank(), recv_counts[rank()]));
    }
    // Gloo's alltoallv sends each peer's block as one message; this build stalls on large
    // single messages, so exchange ≤ kMaxPieceBytes pieces on our own slots instead.
    return run_collective("all_to_all_v", [&](std::uint32_t tag) {
        const int n = size();
        std::vector<size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
        for (int r = 0; r < n; ++r) {
            send_off[r + 1] = send_off[r] + static_cast<size_t>(send_counts[r]);
            recv_off[r + 1] = recv_off[r] + static_cast<size_t>(recv_counts[r]);
        }
        const int me = rank();
        if (send_counts[me] > 0) {
            std::memmove(recv.data() + recv_off[me], send.data() + send_off[me], send_counts[me]);
        }
        if (n == 1) return;
        // Unbound buffers need a non-null pointer even when only part of the span is used.
        static std::uint8_t dummy = 0;
        PieceTransfer receiver(context_->createUnboundBuffer(recv.empty() ? &dummy : recv.data(),
                                                             std::max<size_t>(recv.size(), 1)),
                               /*is_send=*/false);
        PieceTransfer sender(context_->createUnboundBuffer(
                                 const_cast<std::uint8_t*>(send.empty() ? &dummy : send.data()),
                                 std::max<size_t>(send.size(), 1)),
                             /*is_send=*/true);
        for (int step = 1; step < n; ++step) {
            const int src = (me - step + n) % n;
            const size_t bytes = static_cast<size_t>(recv_counts[src]);
            for (size_t p = 0; p * kMaxPieceBytes < bytes; ++p) {
                receiver.post(src, make_slot(kAllToAllSlotPrefix, tag, p),
                              recv_off[src] + p * kMaxPieceBytes,
                              std::min(kMaxPieceBytes, bytes - p * kMaxPieceBytes));
            }
        }
        for (int step = 1; step < n; ++step) {
            const int dst = (me + step) % n;
            const size_t bytes = static_cast<size_t>(send_counts[dst]);
            for (size_t p = 0; p * kMaxPieceBytes < bytes; ++p) {
                sender.post(dst, make_slot(kAllToAllSlotPrefix, tag, p),
                            send_off[dst] + p * kMaxPieceBytes,
                            std::min(kMaxPieceBytes, bytes - p * kMaxPieceBytes));
            }
        }
        const auto deadline = Clock::now() + timeout_;
        if (!receiver.wait_all(deadline) || !sender.wait_all(deadline)) {
            throw gloo::IoException("aborted");
        }
    });
}

Status ProcessGroupGloo::broadcast(std::span<std::uint8_t> data, int root) {
    TSR_RETURN_IF_ERROR(check_rank(root, "broadcast", "root"));
    return run_collective("broadcast", [&](std::uint32_t tag) {
        if (data.empty() || size() == 1) return;
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(data.data(), data.size());
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::broadcast(opts);
    });
}

Status ProcessGroupGloo::barrier() {
    return run_collective("barrier", [&](std::uint32_t tag) {
        if (size() == 1) return;
        gloo::BarrierOptions opts(context_);
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::barrier(opts);
    });
}

StatusOr<std::shared_ptr<Work>> ProcessGroupGloo::post_p2p(std::uint8_t* data, size_t bytes, int peer,
                                                           int tag, bool is_send) {
    const char* op = is_send ? "isend" : "irecv";
    TSR_RETURN_IF_ERROR(check_rank(peer, op, is_send ? "dst" : "src"));
    if (peer == rank())
        return Status::InvalidArgument(fmt::format("gloo group '{}' {}: {} is this rank", name(), op,
                                                   is_send ? "dst" : "src"));
    const size_t pieces = std::max<size_t>(1, piece_count(bytes));
    if (pieces >= kMaxPieces) return Status::InvalidArgument(fmt::format("gloo {}: message too large", op));
    std::string what = fmt::format("gloo group '{}' {} of {} bytes {} rank {} tag {}", name(), op, bytes,
                                   is_send ? "to" : "from", peer, tag);
    if (state_->broken) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("{}: group unusable after an earlier failure ({})", what,
                                  state_->broken_reason));
    }
    try {
        static std::uint8_t dummy = 0;
        auto transfer = std::make_unique<PieceTransfer>(
            context_->createUnboundBuffer(bytes == 0 ? &dummy : data, std::max<size_t>(bytes, 1)), is_send);
        for (size_t p = 0; p < pieces; ++p) {
            const size_t off = p * kMaxPieceBytes;
            transfer->post(peer, make_slot(kP2pSlotPrefix, static_cast<std::uint32_t>(tag), p), off,
                           std::min(kMaxPieceBytes, bytes - off));
        }
        return std::shared_ptr<Work>(
            std::make_shared<GlooP2pWork>(std::move(transfer), state_, std::move(what)));
    } catch (...) {
        return status_from_exception(what);
    }
}

StatusOr<std::shared_ptr<Work>> ProcessGroupGloo::isend(std::span<const std::uint8_t> data, int dst,
                                                        int tag) {
    // Gloo's buffer API is not const-correct; a send only reads the bytes.
    return post_p2p(const_cast<std::uint8_t*>(data.data()), data.size(), dst, tag, /*is_send=*/true);
}

StatusOr<std::shared_ptr<Work>> ProcessGroupGloo::irecv(std::span<std::uint8_t> data, int src,
                                                        int tag) {
    return post_p2p(data.data(), data.size(), src, tag, /*is_send=*/false);
}

// ---- factory ---------------------------------------------------------------------------------

StatusOr<std::unique_ptr<ProcessGroup>> make_gloo_group(Store& store,
                                                        const ProcessGroupOptions& options) {
    if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
        return Status::InvalidArgument(
            fmt::format("gloo group '{}': rank {} is not in [0, size {})", options.name,
                        options.rank, options.size));
    }
    if (options.timeout.count() <= 0) {
        return Status::InvalidArgument(
            fmt::format("gloo group '{}': timeout must be positive, got {} ms", options.name,
                        options.timeout.count()));
    }
    ignore_sigpipe();
    auto prefixed = make_prefix_store("gloo/" + options.name, store);
    GlooStoreAdapter adapter(*prefixed, options.timeout);
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = options.hostname;
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
        context->setTimeout(options.timeout);
        context->connectFullMesh(adapter, device);
        return std::unique_ptr<ProcessGroup>(
            std::make_unique<ProcessGroupGloo>(options, std::move(context)));
    } catch (...) {
        return status_from_exception(fmt::format(
            "gloo group '{}' rank {} of {}: rendezvous / full-mesh connect on '{}' failed (timeout "
            "{} ms)",
            options.name, options.rank, options.size, options.hostname, options.timeout.count()));
    }
}

}  // namespace tessera::dist
