#pragma once
// dist/shm/process_group_shm.h — ProcessGroupShm: collectives through one POSIX shared-memory
// segment, for ranks on one host (the fast path for TP collectives). Rank 0 creates the
// segment under a unique name ("/tessera-<pid>-<counter>-<group>") and publishes it through
// the store; it is unlinked as soon as every rank has mapped it (and at teardown at the
// latest), so a crash leaves nothing behind in /dev/shm.
// Protocol: every round ("step") each rank writes its contribution into its own slot of the
// step's parity buffer, publishes `arrive = step` and waits until every rank has arrived;
// then it reads the other ranks' slots. Two parity buffers make one sync per round enough.
// Waiting spins briefly (_mm_pause), then sleeps on a futex in the segment. A rank that does
// not arrive within the timeout yields DeadlineExceeded naming the op, its sequence number
// and the missing ranks; a rank whose process exited yields Unavailable. After any failure
// the group is unusable. Reductions add in rank order, so every rank gets identical bits.
// Point-to-point (isend / irecv) goes through per-pair rings after the slots (shm_p2p.h) when
// the group is made with p2p_buffer_bytes > 0, and is Unimplemented otherwise.
// Thread-safety: one thread per group.

#include <cstdint>
#include <memory>
#include <string>

#include "dist/process_group.h"

namespace tessera::dist {

namespace shm_detail {
struct Header;
struct Mapping;
class ShmP2p;
}  // namespace shm_detail

class ProcessGroupShm final : public ProcessGroup {
 public:
    // Bytes each rank can contribute per round; larger payloads take several rounds.
    static constexpr std::size_t kSlotBytes = 1 << 20;
    static constexpr int kMaxRanks = 64;

    ProcessGroupShm(const ProcessGroupOptions& options,
                    std::unique_ptr<shm_detail::Mapping> mapping);
    ~ProcessGroupShm() override;

    std::string backend_name() const override { return "shm"; }

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
    StatusOr<std::shared_ptr<Work>> isend(std::span<const std::uint8_t> data, int dst, int tag) override;
    StatusOr<std::shared_ptr<Work>> irecv(std::span<std::uint8_t> data, int src, int tag) override;

    std::uint64_t sequence_number() const { return seq_; }

 private:
    struct OpContext;  // the running collective: name, code, sequence number, deadline

    Status begin(OpContext& ctx);
    // Publishes this rank's arrival at the next step and waits for every rank.
    Status sync(OpContext& ctx);
    Status fail(Status status);
    std::uint8_t* slot(std::uint64_t step, int r) const;

    const std::chrono::milliseconds timeout_;
    std::shared_ptr<shm_detail::Mapping> mapping_;  // shared with p2p transfers still in flight
    shm_detail::Header* header_;  // inside mapping_
    std::unique_ptr<shm_detail::ShmP2p> p2p_;
    std::uint64_t step_ = 0;      // rounds completed by this rank
    std::uint64_t seq_ = 0;       // collectives issued so far
    std::string broken_reason_;   // non-empty once the group failed
};

}  // namespace tessera::dist
