#pragma once
// dist/shm/shm_p2p.h — point-to-point messages between the ranks of one shared-memory group:
// one single-producer / single-consumer byte ring per ordered pair of ranks, in the group's
// segment. A message is a 16-byte header (tag, size) and its bytes, streamed through the ring
// in as many pieces as it takes, so a message of any size passes through a ring of any size.
//
// Messages from one rank to another are received in the order they were sent: an irecv whose
// tag or size differs from the next message of that rank fails with DataLoss (Gloo matches by
// tag; the pipeline posts its receives in send order, and a mismatch is a protocol bug).
//
// isend copies what fits at once on the caller's thread; the rest is streamed by a sender
// thread, started on first need, so a stage computes its next micro-batch while a large hidden
// state drains into the next stage (whose receive frees ring space as it copies). Receives
// progress on the caller's thread, in the order they were posted. Waits spin briefly, then
// sleep on a futex word in the segment; a peer whose process exited fails the transfer with
// Unavailable. After a failure every later transfer of the group fails at once, and queued
// sends are dropped (their buffers are not read again). The group's collectives are separate:
// a failed transfer does not fail them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "dist/process_group.h"

namespace tessera::dist::shm_detail {

class ShmP2p {
 public:
    // Bytes of the region `size` ranks need with `ring_bytes` per ordered pair (page aligned).
    static std::size_t region_bytes(int size, std::size_t ring_bytes);

    // `region`: region_bytes() of zero-filled shared memory, the same on every rank; `keep_alive`
    // owns the mapping and is held until the last transfer handle is gone. `peer_exited(r)`
    // tells whether rank r's process has ended.
    ShmP2p(std::shared_ptr<void> keep_alive, void* region, std::string group_name, int rank, int size,
           std::size_t ring_bytes, std::function<bool(int)> peer_exited);
    ~ShmP2p();
    ShmP2p(const ShmP2p&) = delete;
    ShmP2p& operator=(const ShmP2p&) = delete;

    StatusOr<std::shared_ptr<Work>> isend(std::span<const std::uint8_t> data, int dst, int tag);
    StatusOr<std::shared_ptr<Work>> irecv(std::span<std::uint8_t> data, int src, int tag);

    struct Core;  // state shared with the transfer handles and the sender thread

 private:
    std::shared_ptr<Core> core_;
};

}  // namespace tessera::dist::shm_detail
