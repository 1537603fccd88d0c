// dist/shm/shm_p2p.cpp — see shm_p2p.h for the protocol.

#include "dist/shm/shm_p2p.h"

#include <fmt/core.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/shm/futex.h"

namespace tessera::dist::shm_detail {

namespace {

using Clock = std::chrono::steady_clock;

// As the collectives wait: pause-spin (a peer on the other core answers within microseconds),
// then yield (a peer sharing this core can run), then sleep on the futex.
constexpr auto kPauseSpinTime = std::chrono::microseconds(10);
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr auto kMaxSleep = std::chrono::milliseconds(20);
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

// A futex word and how many threads sleep (or are about to) on it.
struct alignas(64) WakeWord {
    std::atomic<std::uint32_t> word;
    std::atomic<std::uint32_t> waiters;
};

// Per rank: bumped when a message to this rank gets bytes, and when a ring this rank sends
// through gets space.
struct RankWake {
    WakeWord data;
    WakeWord space;
};

struct alignas(64) Cursor {
    std::atomic<std::uint64_t> value;
};

// Byte counts since the group started; the ring position is count % ring size.
struct ChannelControl {
    Cursor written;   // by the sender
    Cursor consumed;  // by the receiver
};

constexpr std::uint32_t kMessageMagic = 0x70327031;  // "p2p1"

struct MessageHeader {
    std::uint32_t magic;
    std::int32_t tag;
    std::uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 16);

std::size_t controls_bytes(int size) {
    return static_cast<std::size_t>(size) * sizeof(RankWake) +
           static_cast<std::size_t>(size) * static_cast<std::size_t>(size) * sizeof(ChannelControl);
}

std::size_t page_align(std::size_t n) { return (n + 4095) & ~std::size_t{4095}; }

void notify(WakeWord& w) {
    w.word.fetch_add(1, std::memory_order_seq_cst);
    if (w.waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(&w.word);
}

// One message on its way out: header then payload, `sent` bytes of both written so far.
struct SendJob {
    std::span<const std::uint8_t> data;
    MessageHeader header{};
    int dst = 0;
    std::size_t sent = 0;
    std::string what;

    std::mutex mu;  // done and status: set by the sender thread, read by the caller
    bool done = false;
    Status status;

    std::size_t total() const { return sizeof(MessageHeader) + data.size(); }
    void finish(Status s) {
        std::lock_guard lock(mu);
        done = true;
        status = std::move(s);
    }
};

struct RecvJob {
    std::span<std::uint8_t> data;
    int src = 0;
    int tag = 0;
    MessageHeader header{};
    std::size_t got = 0;  // of header and payload
    bool done = false;
    Status status;
    std::string what;

    std::size_t total() const { return sizeof(MessageHeader) + data.size(); }
};

void copy_into_ring(std::uint8_t* ring, std::size_t cap, std::uint64_t pos, const std::uint8_t* src, std::size_t n) {
    const std::size_t at = static_cast<std::size_t>(pos % cap);
    const std::size_t first = std::min(n, cap - at);
    std::memcpy(ring + at, src, first);
    if (n > first) std::memcpy(ring, src + first, n - first);
}

void copy_from_ring(const std::uint8_t* ring, std::size_t cap, std::uint64_t pos, std::uint8_t* dst, std::size_t n) {
    const std::size_t at = static_cast<std::size_t>(pos % cap);
    const std::size_t first = std::min(n, cap - at);
    std::memcpy(dst, ring + at, first);
    if (n > first) std::memcpy(dst + first, ring, n - first);
}

// Faults in a ring's pages in one call (3 ms for 4 MB on the side that allocates them, ~1 ms on
// the other) rather than a few µs per page inside the first messages' trips, until the ring
// has wrapped once. Contents are untouched; failure only costs those faults.
// Shared memory that cannot be had (a small /dev/shm, as in a container) is refused here, with
// a message, instead of a SIGBUS at the first write.
Status populate(std::uint8_t* ring, std::size_t bytes, const std::string& what) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(ring) & ~(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(ring) + bytes + page - 1) & ~(page - 1);
    if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return Status::Ok();
    if (errno != ENOMEM && errno != EFAULT) return Status::Ok();  // an older kernel: fault in as used
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("{}: cannot get {} bytes of shared memory for the ring ({}); is /dev/shm large "
                              "enough for every pair of ranks that talk?",
                              what, bytes, std::strerror(errno)));
}

}  // namespace

struct ShmP2p::Core {
    std::shared_ptr<void> keep_alive;
    std::string name;
    int rank = 0;
    int size = 0;
    std::size_t ring_bytes = 0;
    std::function<bool(int)> peer_exited;
    RankWake* wakes = nullptr;
    ChannelControl* channels = nullptr;
    std::uint8_t* rings = nullptr;

    // Send side: the caller's fast path and the sender thread, under `mu`.
    std::mutex mu;
    std::condition_variable work_arrived;
    std::vector<std::deque<std::shared_ptr<SendJob>>> send_queues;
    std::vector<std::uint64_t> written;  // channels this rank → dst
    std::vector<bool> send_ring_ready;   // populated (first isend to dst)
    std::thread sender;
    bool stop = false;
    std::string broken;  // non-empty once a transfer failed
    std::atomic<bool> is_broken{false};  // the same, read without waiting for a sender's copy

    // Receive side: the caller's thread only.
    std::vector<std::deque<std::shared_ptr<RecvJob>>> recv_queues;
    std::vector<std::uint64_t> consumed;  // channels src → this rank
    std::vector<bool> recv_ring_ready;    // populated (first irecv from src)

    ChannelControl& channel(int src, int dst) { return channels[src * size + dst]; }
    std::uint8_t* ring(int src, int dst) {
        return rings + (static_cast<std::size_t>(src) * static_cast<std::size_t>(size) + static_cast<std::size_t>(dst)) *
                           ring_bytes;
    }

    std::string broken_reason() {
        if (!is_broken.load(std::memory_order_acquire)) return {};
        std::lock_guard lock(mu);
        return broken;
    }
    // Under `mu`. Queued sends fail too: their callers may already have seen an error and
    // reused the buffers, which the sender thread must not read any more.
    void set_broken(const std::string& reason) {
        if (!broken.empty()) return;
        broken = reason;
        is_broken.store(true, std::memory_order_release);
        for (int dst = 0; dst < size; ++dst) {
            if (send_queues[dst].empty()) continue;
            fail_sends(dst, Status(StatusCode::kUnavailable,
                                   fmt::format("{}: group unusable after an earlier failure ({})",
                                               send_queues[dst].front()->what, reason)));
        }
    }
    Status fail(Status s) {
        std::lock_guard lock(mu);
        set_broken(s.message());
        return s;
    }

    // Writes what fits of `job` into its ring; under `mu`. Returns the bytes written.
    std::size_t produce(SendJob& job) {
        ChannelControl& ch = channel(rank, job.dst);
        std::uint64_t pos = written[job.dst];
        const std::uint64_t in_ring = pos - ch.consumed.value.load(std::memory_order_acquire);
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(ring_bytes - in_ring, job.total() - job.sent));
        if (n == 0) return 0;
        std::uint8_t* r = ring(rank, job.dst);
        std::size_t left = n;
        if (job.sent < sizeof(MessageHeader)) {
            const std::size_t k = std::min(left, sizeof(MessageHeader) - job.sent);
            copy_into_ring(r, ring_bytes, pos, reinterpret_cast<const std::uint8_t*>(&job.header) + job.sent, k);
            pos += k;
            job.sent += k;
            left -= k;
        }
        if (left > 0) {
            copy_into_ring(r, ring_bytes, pos, job.data.data() + (job.sent - sizeof(MessageHeader)), left);
            pos += left;
            job.sent += left;
        }
        written[job.dst] = pos;
        ch.written.value.store(pos, std::memory_order_release);
        notify(wakes[job.dst].data);
        return n;
    }

    // Reads what has arrived of `job`; caller's thread. Returns the bytes read.
    StatusOr<std::size_t> consume(RecvJob& job) {
        ChannelControl& ch = channel(job.src, rank);
        std::uint64_t pos = consumed[job.src];
        const std::uint64_t avail = ch.written.value.load(std::memory_order_acquire) - pos;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(avail, job.total() - job.got));
        if (n == 0) return std::size_t{0};
        const std::uint8_t* r = ring(job.src, rank);
        std::size_t left = n;
        if (job.got < sizeof(MessageHeader)) {
            const std::size_t k = std::min(left, sizeof(MessageHeader) - job.got);
            copy_from_ring(r, ring_bytes, pos, reinterpret_cast<std::uint8_t*>(&job.header) + job.got, k);
            pos += k;
            job.got += k;
            left -= k;
            if (job.got == sizeof(MessageHeader)) {
                const MessageHeader& h = job.header;
                if (h.magic != kMessageMagic) return Status::DataLoss(job.what + ": corrupt message header");
                if (h.tag != job.tag || h.bytes != job.data.size()) {
                    return Status::DataLoss(fmt::format(
                        "{}: the next message from rank {} has tag {} and {} bytes (messages between two ranks "
                        "are received in the order they were sent)",
                        job.what, job.src, h.tag, h.bytes));
                }
            }
        }
        if (left > 0) {
            copy_from_ring(r, ring_bytes, pos, job.data.data() + (job.got - sizeof(MessageHeader)), left);
            pos += left;
            job.got += left;
        }
        consumed[job.src] = pos;
        ch.consumed.value.store(pos, std::memory_order_release);
        notify(wakes[job.src].space);
        return n;
    }

    // Advances the receives from `target.src` in posting order until `target` is done; without
    // `block`, only as far as the bytes already in the ring allow.
    Status progress_recv(RecvJob& target, bool block, Clock::time_point deadline) {
        auto& queue = recv_queues[target.src];
        ChannelControl& ch = channel(target.src, rank);
        auto idle_since = Clock::now();
        auto last_liveness = idle_since;
        while (!target.done) {
            if (queue.empty()) return Status::Internal(target.what + ": not in its channel's queue");
            RecvJob& head = *queue.front();
            if (std::string b = broken_reason(); !b.empty()) {
                head.done = true;
                head.status = Status(StatusCode::kUnavailable,
                                     fmt::format("{}: group unusable after an earlier failure ({})", head.what, b));
                queue.pop_front();
                continue;
            }
            StatusOr<std::size_t> n = consume(head);
            if (!n.ok()) {
                head.done = true;
                head.status = fail(n.status());
                queue.pop_front();
                continue;
            }
            if (head.got == head.total()) {
                head.done = true;
                queue.pop_front();
                idle_since = Clock::now();
                continue;
            }
            if (n.value() > 0) {
                idle_since = Clock::now();
                continue;
            }
            if (!block) return Status::Ok();
            const auto now = Clock::now();
            if (now >= deadline) {
                return fail(Status(StatusCode::kDeadlineExceeded, fmt::format("{}: timed out after {} of {} bytes",
                                                                              head.what, head.got, head.total())));
            }
            if (now - idle_since < kPauseSpinTime) {
                for (int i = 0; i < 64; ++i) _mm_pause();
                continue;
            }
            if (now - idle_since < kSpinTime) {
                ::sched_yield();
                continue;
            }
            WakeWord& w = wakes[rank].data;
            w.waiters.fetch_add(1, std::memory_order_seq_cst);
            const std::uint32_t seen = w.word.load(std::memory_order_seq_cst);
            if (ch.written.value.load(std::memory_order_acquire) == consumed[target.src])
                futex_wait(&w.word, seen, std::min<std::chrono::nanoseconds>(deadline - now, kMaxSleep));
            w.waiters.fetch_sub(1, std::memory_order_seq_cst);
            if (Clock::now() - last_liveness > kLivenessPeriod) {
                last_liveness = Clock::now();
                // A peer may write its last message and exit: fail only once its ring is empty.
                if (peer_exited(target.src) && ch.written.value.load(std::memory_order_acquire) == consumed[target.src]) {
                    return fail(Status(StatusCode::kUnavailable,
                                       fmt::format("{}: rank {} exited after {} of {} bytes", head.what, target.src,
                                                   head.got, head.total())));
                }
            }
        }
        return target.status;
    }

    // Moves every posted receive along as far as the rings allow (a rank waiting for its send to
    // drain must keep receiving, or two ranks sending to each other through full rings would wait
    // for ever).
    void progress_posted_recvs() {
        for (auto& queue : recv_queues) {
            if (!queue.empty()) (void)progress_recv(*queue.back(), false, Clock::now());
        }
    }

    // Whether a posted receive has bytes waiting in its ring.
    bool recv_data_waiting() {
        for (int src = 0; src < size; ++src) {
            if (recv_queues[src].empty()) continue;
            if (channel(src, rank).written.value.load(std::memory_order_acquire) != consumed[src]) return true;
        }
        return false;
    }

    bool send_pending() const {
        return std::any_of(send_queues.begin(), send_queues.end(), [](const auto& q) { return !q.empty(); });
    }

    void fail_sends(int dst, const Status& s) {
        for (auto& job : send_queues[dst]) job->finish(s);
        send_queues[dst].clear();
        notify(wakes[rank].data);
    }

    // The sender thread: streams queued messages as their rings get space.
    void send_loop() {
        std::unique_lock lock(mu);
        auto last_liveness = Clock::now();
        while (!stop) {
            bool progressed = false, blocked = false;
            for (int dst = 0; dst < size; ++dst) {
                auto& queue = send_queues[dst];
                while (!queue.empty()) {
                    SendJob& job = *queue.front();
                    progressed |= produce(job) > 0;
                    if (job.sent < job.total()) {
                        blocked = true;
                        break;
                    }
                    job.finish(Status::Ok());
                    queue.pop_front();
                    notify(wakes[rank].data);  // a SendWork::wait may sleep there
                }
            }
            if (!blocked) {
                work_arrived.wait(lock, [&] { return stop || send_pending(); });
                continue;
            }
            if (progressed) {
                // Let the caller's isend in between a long stream's pieces.
                lock.unlock();
                lock.lock();
                continue;
            }
            // Every queued message waits for its receiver to free ring space.
            WakeWord& w = wakes[rank].space;
            w.waiters.fetch_add(1, std::memory_order_seq_cst);
            const std::uint32_t seen = w.word.load(std::memory_order_seq_cst);
            const bool any_space = [&] {
                for (int dst = 0; dst < size; ++dst) {
                    if (send_queues[dst].empty()) continue;
                    if (written[dst] - channel(rank, dst).consumed.value.load(std::memory_order_acquire) < ring_bytes)
                        return true;
                }
                return false;
            }();
            if (!any_space) {
                lock.unlock();
                futex_wait(&w.word, seen, kMaxSleep);
                lock.lock();
            }
            w.waiters.fetch_sub(1, std::memory_order_seq_cst);
            if (Clock::now() - last_liveness > kLivenessPeriod) {
                last_liveness = Clock::now();
                for (int dst = 0; dst < size; ++dst) {
                    if (send_queues[dst].empty() || !peer_exited(dst)) continue;
                    const Status s(StatusCode::kUnavailable,
                                   fmt::format("{}: rank {} exited", send_queues[dst].front()->what, dst));
                    set_broken(s.message());
                    fail_sends(dst, s);
                }
            }
        }
        for (int dst = 0; dst < size; ++dst) {
            if (send_queues[dst].empty()) continue;
            fail_sends(dst, Status(StatusCode::kUnavailable,
                                   fmt::format("{}: the group was destroyed before the send completed",
                                               send_queues[dst].front()->what)));
        }
    }
};

namespace {

class SendWork final : public Work {
 public:
    SendWork(std::shared_ptr<ShmP2p::Core> core, std::shared_ptr<SendJob> job)
        : core_(std::move(core)), job_(std::move(job)) {}

    bool is_completed() override {
        std::lock_guard lock(job_->mu);
        return job_->done;
    }
    // Receives posted on this rank keep moving while it waits: the peer may be waiting for its
    // own send to this rank to drain before it reads ours.
    Status wait(std::chrono::milliseconds timeout) override {
        const auto deadline = Clock::now() + timeout;
        ShmP2p::Core& c = *core_;
        WakeWord& w = c.wakes[c.rank].data;  // the sender thread bumps it when a send finishes
        while (true) {
            if (is_completed()) {
                std::lock_guard lock(job_->mu);
                return job_->status;
            }
            c.progress_posted_recvs();
            const auto now = Clock::now();
            if (now >= deadline) {
                // The sender thread must stop reading the buffer the caller gets back.
                return c.fail(Status(StatusCode::kDeadlineExceeded,
                                     fmt::format("{}: timed out after {} ms", job_->what, timeout.count())));
            }
            w.waiters.fetch_add(1, std::memory_order_seq_cst);
            const std::uint32_t seen = w.word.load(std::memory_order_seq_cst);
            if (!is_completed() && !c.recv_data_waiting())
                futex_wait(&w.word, seen, std::min<std::chrono::nanoseconds>(deadline - now, kMaxSleep));
            w.waiters.fetch_sub(1, std::memory_order_seq_cst);
        }
    }

 private:
    std::shared_ptr<ShmP2p::Core> core_;  // keeps the mapping while the handle lives
    std::shared_ptr<SendJob> job_;
};

class RecvWork final : public Work {
 public:
    RecvWork(std::shared_ptr<ShmP2p::Core> core, std::shared_ptr<RecvJob> job)
        : core_(std::move(core)), job_(std::move(job)) {}

    bool is_completed() override {
        if (!job_->done) (void)core_->progress_recv(*job_, false, Clock::now());
        return job_->done;
    }
    Status wait(std::chrono::milliseconds timeout) override {
        const auto deadline = Clock::now() + timeout;
        return core_->progress_recv(*job_, true, deadline);
    }

 private:
    std::shared_ptr<ShmP2p::Core> core_;
    std::shared_ptr<RecvJob> job_;
};

}  // namespace

std::size_t ShmP2p::region_bytes(int size, std::size_t ring_bytes) {
    return page_align(controls_bytes(size)) +
           static_cast<std::size_t>(size) * static_cast<std::size_t>(size) * ring_bytes;
}

ShmP2p::ShmP2p(std::shared_ptr<void> keep_alive, void* region, std::string group_name, int rank, int size,
               std::size_t ring_bytes, std::function<bool(int)> peer_exited)
    : core_(std::make_shared<Core>()) {
    Core& c = *core_;
    c.keep_alive = std::move(keep_alive);
    c.name = std::move(group_name);
    c.rank = rank;
    c.size = size;
    c.ring_bytes = ring_bytes;
    c.peer_exited = std::move(peer_exited);
    auto* base = static_cast<std::uint8_t*>(region);
    c.wakes = reinterpret_cast<RankWake*>(base);
    c.channels = reinterpret_cast<ChannelControl*>(base + static_cast<std::size_t>(size) * sizeof(RankWake));
    c.rings = base + page_align(controls_bytes(size));
    c.send_queues.resize(static_cast<std::size_t>(size));
    c.recv_queues.resize(static_cast<std::size_t>(size));
    c.written.assign(static_cast<std::size_t>(size), 0);
    c.consumed.assign(static_cast<std::size_t>(size), 0);
    c.send_ring_ready.assign(static_cast<std::size_t>(size), false);
    c.recv_ring_ready.assign(static_cast<std::size_t>(size), false);
}

ShmP2p::~ShmP2p() {
    Core& c = *core_;
    {
        std::lock_guard lock(c.mu);
        c.stop = true;
    }
    c.work_arrived.notify_all();
    notify(c.wakes[c.rank].space);
    if (c.sender.joinable()) c.sender.join();
}

StatusOr<std::shared_ptr<Work>> ShmP2p::isend(std::span<const std::uint8_t> data, int dst, int tag) {
    Core& c = *core_;
    auto job = std::make_shared<SendJob>();
    job->data = data;
    job->header = {kMessageMagic, tag, data.size()};
    job->dst = dst;
    job->what = fmt::format("shm group '{}' isend of {} bytes to rank {} tag {}", c.name, data.size(), dst, tag);
    std::unique_lock lock(c.mu);
    if (!c.broken.empty()) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("{}: group unusable after an earlier failure ({})", job->what, c.broken));
    }
    if (!c.send_ring_ready[dst]) {
        TSR_RETURN_IF_ERROR(populate(c.ring(c.rank, dst), c.ring_bytes, job->what));
        c.send_ring_ready[dst] = true;
    }
    auto& queue = c.send_queues[dst];
    if (queue.empty()) {
        c.produce(*job);
        if (job->sent == job->total()) {
            job->done = true;
            return std::shared_ptr<Work>(std::make_shared<SendWork>(core_, std::move(job)));
        }
    }
    queue.push_back(job);
    if (!c.sender.joinable()) c.sender = std::thread([&c] { c.send_loop(); });
    lock.unlock();
    c.work_arrived.notify_one();
    notify(c.wakes[c.rank].space);
    return std::shared_ptr<Work>(std::make_shared<SendWork>(core_, std::move(job)));
}

StatusOr<std::shared_ptr<Work>> ShmP2p::irecv(std::span<std::uint8_t> data, int src, int tag) {
    Core& c = *core_;
    auto job = std::make_shared<RecvJob>();
    job->data = data;
    job->src = src;
    job->tag = tag;
    job->what = fmt::format("shm group '{}' irecv of {} bytes from rank {} tag {}", c.name, data.size(), src, tag);
    if (std::string b = c.broken_reason(); !b.empty()) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("{}: group unusable after an earlier failure ({})", job->what, b));
    }
    if (!c.recv_ring_ready[src]) {
        TSR_RETURN_IF_ERROR(populate(c.ring(src, c.rank), c.ring_bytes, job->what));
        c.recv_ring_ready[src] = true;
    }
    c.recv_queues[src].push_back(job);
    return std::shared_ptr<Work>(std::make_shared<RecvWork>(core_, std::move(job)));
}

}  // namespace tessera::dist::shm_detail
