#pragma once
// dist/process_group.h — collective communication over a fixed set of ranks (c10d's
// Backend). Thread-safety: a ProcessGroup is used by one thread (the rank's executor thread).
// Contract: all ranks of the group issue the same collectives in the same order; every
// blocking call has a timeout and a peer that died or stalled yields DeadlineExceeded /
// Unavailable naming the group, the op, its sequence number and the peer when known.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::dist {

class Store;

enum class ReduceOp { kSum, kMax, kMin };

// A collective or transfer that timed out or lost its peer: the ranks no longer agree on
// which operation comes next, so every later one would fail too. The caller ends the job.
inline bool breaks_group(const Status& s) {
    return s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable;
}

// Completion handle of an asynchronous operation (isend / irecv).
class Work {
 public:
    virtual ~Work() = default;
    virtual bool is_completed() = 0;
    virtual Status wait(std::chrono::milliseconds timeout) = 0;
};

class ProcessGroup {
 public:
    virtual ~ProcessGroup() = default;
    ProcessGroup(const ProcessGroup&) = delete;
    ProcessGroup& operator=(const ProcessGroup&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    const std::string& name() const { return name_; }  // e.g. "tp0" — for error messages
    virtual std::string backend_name() const = 0;

    // f32 in place; identical count on all ranks.
    virtual Status all_reduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
    // Integers in place, exact (token and expert counts, batch sizes the ranks must agree on):
    // every rank sends its values to every other with all_to_all_v and reduces them in rank
    // order, so any backend with all_to_all_v has them. Meant for short arrays.
    Status all_reduce(std::span<std::int64_t> data, ReduceOp op = ReduceOp::kSum);
    Status all_reduce(std::span<std::int32_t> data, ReduceOp op = ReduceOp::kSum);
    // out [size × in.size()] = concatenation of every rank's `in`, in rank order.
    virtual Status all_gather(std::span<const float> in, std::span<float> out);
    // The same for a short row of integers (a rank's counts or flags), exact: a sum over a
    // zeroed [size × mine.size()] buffer in which each rank fills its own row.
    StatusOr<std::vector<std::int64_t>> all_gather_rows(std::span<const std::int64_t> mine);
    // in [size × out.size()]: rank r receives the reduction of every rank's r-th chunk.
    virtual Status reduce_scatter(std::span<const float> in, std::span<float> out,
                                  ReduceOp op = ReduceOp::kSum);
    // Variable all-to-all of bytes: send_counts[r] bytes go to rank r (in rank order in
    // `send`); recv_counts[r] bytes arrive from rank r.
    virtual Status all_to_all_v(std::span<const std::uint8_t> send,
                                std::span<const std::int64_t> send_counts,
                                std::span<std::uint8_t> recv,
                                std::span<const std::int64_t> recv_counts);
    virtual Status broadcast(std::span<std::uint8_t> data, int root);
    virtual Status barrier();
    // Point to point, any size (large payloads are sent in pieces). The buffer must stay
    // alive until the Work completes.
    virtual StatusOr<std::shared_ptr<Work>> isend(std::span<const std::uint8_t> data, int dst, int tag);
    virtual StatusOr<std::shared_ptr<Work>> irecv(std::span<std::uint8_t> data, int src, int tag);

 protected:
    ProcessGroup(std::string name, int rank, int size)
        : name_(std::move(name)), rank_(rank), size_(size) {}
    // Status::Unimplemented("process group 'gloo' does not support all_to_all_v")
    Status unsupported(const char* op) const;

    // Argument checks shared by the backends: InvalidArgument naming the group, op and sizes.
    Status check_all_gather(std::size_t in_count, std::size_t out_count) const;
    Status check_reduce_scatter(std::size_t in_count, std::size_t out_count) const;
    Status check_all_to_all_v(std::size_t send_bytes, std::span<const std::int64_t> send_counts,
                              std::size_t recv_bytes,
                              std::span<const std::int64_t> recv_counts) const;
    Status check_rank(int peer, const char* op, const char* what) const;

    template <typename Int>
    Status all_reduce_integers(std::span<Int> data, ReduceOp op);

 private:
    const std::string name_;
    const int rank_;
    const int size_;
};

struct ProcessGroupOptions {
    std::string name = "world";
    int rank = 0;
    int size = 1;
    std::chrono::milliseconds timeout{300'000};
    std::string hostname = "127.0.0.1";  // the interface Gloo binds (--dist-init-addr's host side)
    // Global rank of each member, in group-rank order (for error messages); empty = unknown.
    std::vector<int> global_ranks;
    // Shared memory: bytes of the ring each ordered pair of ranks sends isend / irecv messages
    // through (messages of any size stream through it); 0 = no point-to-point.
    std::size_t p2p_buffer_bytes = 0;
    // Reductions add the ranks' parts in rank order, whatever the length of the buffer, so a
    // value's sum does not depend on what else is reduced with it (deterministic inference).
    // The shared-memory group always does; Gloo's ring does not with more than two ranks.
    bool rank_order_reduce = false;
};

// Gloo over TCP: any ranks on any nodes. Rendezvous through `store`.
StatusOr<std::unique_ptr<ProcessGroup>> make_gloo_group(Store& store, const ProcessGroupOptions& options);

// POSIX shared memory: ranks of one host only (the fast path for TP collectives). Ops it
// does not implement return Unimplemented naming the backend and the op.
StatusOr<std::unique_ptr<ProcessGroup>> make_shm_group(Store& store, const ProcessGroupOptions& options);

// Point-to-point with the members on this host through `local` (a group of just them; member
// r of this group is local_rank[r] there, -1 when elsewhere), everything else through `all`
// (every member, e.g. Gloo): pipeline stages that share a node skip TCP even when the
// pipeline spans nodes. Messages to one peer always take the same transport, so they keep
// their order.
StatusOr<std::unique_ptr<ProcessGroup>> make_hybrid_group(std::unique_ptr<ProcessGroup> all,
                                                          std::unique_ptr<ProcessGroup> local,
                                                          std::vector<int> local_rank);

// world_size == 1: every collective is the identity.
std::unique_ptr<ProcessGroup> make_single_group(std::string name);

}  // namespace tessera::dist
