#pragma once
// dist/gloo/process_group_gloo.h — ProcessGroupGloo: collectives over Gloo's TCP transport,
// any ranks on any nodes. Rendezvous goes through our Store (adapted to Gloo's store
// interface); the tcp device binds options.hostname. Gloo exceptions never leave this
// adapter: they become Status naming the group, op and sequence number. After a failed or
// timed-out op the group is unusable (Gloo closes its pairs) and later ops fail fast.
// make_gloo_group sets SIGPIPE to SIG_IGN (if still default): Gloo writes without
// MSG_NOSIGNAL, and a dead peer must be an error, not the death of this process.
// Thread-safety: one thread per group (the rank's executor thread); Work handles are waited
// on by that same thread.

#include <cstdint>
#include <memory>
#include <string>

#include "dist/process_group.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace tessera::dist {

class ProcessGroupGloo final : public ProcessGroup {
 public:
    // Largest single Gloo message: this Gloo build stalls on single P2P messages ≥ 256 KB, so
    // P2P payloads and all_to_all_v go out as pieces of at most this many bytes.
    static constexpr std::size_t kMaxPieceBytes = 64 * 1024;

    // Shared with outstanding Work handles: failure state survives the group's ops.
    struct State {
        bool broken = false;
        std::string broken_reason;
    };

    ProcessGroupGloo(const ProcessGroupOptions& options, std::shared_ptr<gloo::Context> context);
    ~ProcessGroupGloo() override;

    std::string backend_name() const override { return "gloo"; }

    // ProcessGroup
    using ProcessGroup::all_reduce;  // the integer overloads
    Status all_reduce(std::span<float> data, ReduceOp op) override;
    Status all_gather(std::span<const float> in, std::span<float> out) override;
    Status reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp op) override;
    Status all_to_all_v(std::span<const std::uint8_t> send,
                        std::span<const std::int64_t> send_counts, std::span<std::uint8_t> recv,
                        std::span<const std::int64_t> recv_counts) override;
    Status broadcast(std::span<std::uint8_t> data, int root) override;
    Status barrier() override;
    StatusOr<std::shared_ptr<Work>> isend(std::span<const std::uint8_t> data, int dst,
                                          int tag) override;
    StatusOr<std::shared_ptr<Work>> irecv(std::span<std::uint8_t> data, int src, int tag) override;

    std::uint64_t sequence_number() const { return seq_; }

 private:
    template <typename Fn>
    Status run_collective(const char* op, Fn&& fn);
    Status all_reduce_in_rank_order(std::span<float> data, ReduceOp op);
    // isend / irecv: `bytes` at `data` in ≤ kMaxPieceBytes pieces to / from `peer`.
    StatusOr<std::shared_ptr<Work>> post_p2p(std::uint8_t* data, size_t bytes, int peer, int tag, bool is_send);

    const std::chrono::milliseconds timeout_;
    const std::vector<int> global_ranks_;  // for naming a lost peer; may be empty
    const bool rank_order_reduce_;
    std::shared_ptr<gloo::Context> context_;  // constant after construction
    std::shared_ptr<State> state_;
    std::uint64_t seq_ = 0;  // collectives issued so far; the current one's Gloo tag
};

}  // namespace tessera::dist
