// dist/shm/process_group_shm.cpp — see process_group_shm.h for the protocol.

#include "dist/shm/process_group_shm.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <vector>

#include "base/logging.h"
#include "dist/shm/futex.h"
#include "dist/shm/shm_p2p.h"
#include "dist/store.h"

namespace tessera::dist {

using Clock = std::chrono::steady_clock;

namespace shm_detail {

constexpr std::uint64_t kMagic = 0x74657373'73686d31ull;  // "tessshm1"

struct alignas(64) RankControl {
    std::atomic<std::uint64_t> arrive;  // (step << 8) | op code of the last round this rank entered
    std::atomic<std::int32_t> pid;      // process of the rank, for liveness checks
};

struct Header {
    std::uint64_t magic;
    std::uint32_t size;
    std::uint32_t reserved;
    std::uint64_t slot_bytes;
    std::uint64_t data_offset;  // first slot; slots are [parity][rank], slot_bytes each
    std::uint64_t p2p_offset;   // the point-to-point rings (ShmP2p), when p2p_ring_bytes > 0
    std::uint64_t p2p_ring_bytes;
    alignas(64) std::atomic<std::uint32_t> futex_word;  // bumped on every arrival
    alignas(64) std::atomic<std::uint32_t> waiters;  // ranks sleeping (or about to) on futex_word
    alignas(64) RankControl ranks[ProcessGroupShm::kMaxRanks];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// One mapping of the segment; the creating rank unlinks the name (once everyone mapped it).
struct Mapping {
    void* addr = MAP_FAILED;
    std::size_t length = 0;
    std::string name;
    bool owner = false;
    bool unlinked = false;

    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() {
        if (addr != MAP_FAILED) ::munmap(addr, length);
        unlink();
    }
    void unlink() {
        if (owner && !unlinked && !name.empty()) ::shm_unlink(name.c_str());
        unlinked = true;
    }
    Header* header() const { return static_cast<Header*>(addr); }
};

}  // namespace shm_detail

namespace {

using shm_detail::futex_wait;
using shm_detail::futex_wake_all;
using shm_detail::Header;
using shm_detail::Mapping;
using shm_detail::process_exited;

enum OpCode : std::uint8_t {
    kAllReduce = 1,
    kAllGather = 2,
    kReduceScatter = 3,
    kAllToAllV = 4,
    kBroadcast = 5,
    kBarrier = 6,
};

const char* op_name(std::uint64_t code) {
    switch (code) {
        case kAllReduce:
            return "all_reduce";
        case kAllGather:
            return "all_gather";
        case kReduceScatter:
            return "reduce_scatter";
        case kAllToAllV:
            return "all_to_all_v";
        case kBroadcast:
            return "broadcast";
        case kBarrier:
            return "barrier";
        default:
            return "nothing yet";
    }
}

// How long a waiting rank spins (pausing, then yielding the core) before sleeping on the futex.
constexpr auto kPauseSpinTime = std::chrono::microseconds(10);
constexpr auto kSpinTime = std::chrono::microseconds(100);
// Upper bound of one futex sleep (also the liveness-check period).
constexpr auto kMaxSleep = std::chrono::milliseconds(20);
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

template <typename F>
void reduce_slots(float* out, const std::vector<const float*>& src, std::size_t n, F f) {
    // Blocked so the output block stays in L1 while the other ranks' slots stream through.
    constexpr std::size_t kBlock = 2048;
    for (std::size_t b = 0; b < n; b += kBlock) {
        const std::size_t e = std::min(n, b + kBlock);
        const float* s0 = src[0];
        const float* s1 = src[1];
        for (std::size_t i = b; i < e; ++i) out[i] = f(s0[i], s1[i]);
        for (std::size_t j = 2; j < src.size(); ++j) {
            const float* sj = src[j];
            for (std::size_t i = b; i < e; ++i) out[i] = f(out[i], sj[i]);
        }
    }
}

void reduce_dispatch(float* out, const std::vector<const float*>& src, std::size_t n, ReduceOp op) {
    if (src.size() == 1) {
        if (out != src[0]) std::memcpy(out, src[0], n * sizeof(float));
        return;
    }
    switch (op) {
        case ReduceOp::kSum:
            reduce_slots(out, src, n, [](float a, float b) { return a + b; });
            break;
        case ReduceOp::kMax:
            reduce_slots(out, src, n, [](float a, float b) { return a > b ? a : b; });
            break;
        case ReduceOp::kMin:
            reduce_slots(out, src, n, [](float a, float b) { return a < b ? a : b; });
            break;
    }
}

std::string sanitize(const std::string& name) {
    std::string out;
    for (char c : name) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') out += c;
        if (out.size() >= 32) break;
    }
    return out;
}

std::atomic<std::uint64_t> g_segment_counter{0};

}  // namespace

struct ProcessGroupShm::OpContext {
    const char* name;
    std::uint8_t code;
    std::uint64_t seq = 0;
    Clock::time_point deadline{};
};

ProcessGroupShm::ProcessGroupShm(const ProcessGroupOptions& options,
                                 std::unique_ptr<Mapping> mapping)
    : ProcessGroup(options.name, options.rank, options.size),
      timeout_(options.timeout),
      mapping_(std::move(mapping)),
      header_(mapping_->header()) {
    if (header_->p2p_ring_bytes == 0) return;
    Header* header = header_;
    p2p_ = std::make_unique<shm_detail::ShmP2p>(
        mapping_, static_cast<std::uint8_t*>(mapping_->addr) + header_->p2p_offset, name(), rank(), size(),
        header_->p2p_ring_bytes,
        [header](int peer) { return process_exited(header->ranks[peer].pid.load(std::memory_order_relaxed)); });
}

ProcessGroupShm::~ProcessGroupShm() = default;

std::uint8_t* ProcessGroupShm::slot(std::uint64_t step, int r) const {
    const std::size_t index =
        static_cast<std::size_t>(step & 1) * static_cast<std::size_t>(size()) +
        static_cast<std::size_t>(r);
    return static_cast<std::uint8_t*>(mapping_->addr) + header_->data_offset + index * kSlotBytes;
}

Status ProcessGroupShm::fail(Status status) {
    broken_reason_ = status.message();
    return status;
}

Status ProcessGroupShm::begin(OpContext& ctx) {
    ctx.seq = ++seq_;
    ctx.deadline = Clock::now() + timeout_;
    if (!broken_reason_.empty()) {
        return Status(
            StatusCode::kUnavailable,
            fmt::format("shm group '{}' {} #{}: group unusable after an earlier failure ({})",
                        name(), ctx.name, ctx.seq, broken_reason_));
    }
    return Status::Ok();
}

Status ProcessGroupShm::sync(OpContext& ctx) {
    const std::uint64_t step = ++step_;
    const int n = size();
    auto* ranks = header_->ranks;
    ranks[rank()].arrive.store((step << 8) | ctx.code, std::memory_order_seq_cst);
    header_->futex_word.fetch_add(1, std::memory_order_seq_cst);
    if (header_->waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(&header_->futex_word);

    int next = 0;  // ranks below `next` have arrived
    auto scan = [&] {
        while (next < n && (ranks[next].arrive.load(std::memory_order_acquire) >> 8) >= step)
            ++next;
        return next == n;
    };
    if (!scan()) {
        // Pause-spin first (peers on other cores arrive within microseconds), then yield so
        // a peer sharing this core can run, then sleep on the futex.
        const auto t0 = Clock::now();
        const auto pause_until = t0 + kPauseSpinTime, yield_until = t0 + kSpinTime;
        for (unsigned i = 1; !scan(); ++i) {
            if ((i & 63) != 0) {
                _mm_pause();
                continue;
            }
            const auto now = Clock::now();
            if (now > yield_until) break;
            if (now > pause_until) ::sched_yield();
        }
    }
    auto last_liveness = Clock::now();
    while (next < n) {
        header_->waiters.fetch_add(1, std::memory_order_seq_cst);
        const std::uint32_t seen = header_->futex_word.load(std::memory_order_seq_cst);
        if (scan()) {
            header_->waiters.fetch_sub(1, std::memory_order_seq_cst);
            break;
        }
        const auto now = Clock::now();
        if (now >= ctx.deadline) {
            header_->waiters.fetch_sub(1, std::memory_order_seq_cst);
            std::string missing;
            for (int j = 0; j < n; ++j) {
                const std::uint64_t v = ranks[j].arrive.load(std::memory_order_acquire);
                if ((v >> 8) >= step) continue;
                missing += fmt::format("{}rank {} (last at step {}, {})",
                                       missing.empty() ? "" : ", ", j, v >> 8, op_name(v & 0xff));
            }
            return fail(Status(
                StatusCode::kDeadlineExceeded,
                fmt::format("shm group '{}' {} #{} (step {}) timed out after {} ms on rank {}: "
                            "not arrived: {}; did a rank die, stall, or issue a different "
                            "sequence of collectives?",
                            name(), ctx.name, ctx.seq, step, timeout_.count(), rank(), missing)));
        }
        futex_wait(&header_->futex_word, seen,
                   std::min<std::chrono::nanoseconds>(ctx.deadline - now, kMaxSleep));
        header_->waiters.fetch_sub(1, std::memory_order_seq_cst);
        if (Clock::now() - last_liveness > kLivenessPeriod) {
            last_liveness = Clock::now();
            for (int j = next; j < n; ++j) {
                if ((ranks[j].arrive.load(std::memory_order_acquire) >> 8) >= step) continue;
                const std::int32_t pid = ranks[j].pid.load(std::memory_order_relaxed);
                if (process_exited(pid)) {
                    return fail(Status(
                        StatusCode::kUnavailable,
                        fmt::format("shm group '{}' {} #{} (step {}): rank {} (pid {}) exited",
                                    name(), ctx.name, ctx.seq, step, j, pid)));
                }
            }
        }
    }
    // Every rank reached this step; a rank on this exact step must be running the same op
    // (one already on the next step has passed this check itself).
    for (int j = 0; j < n; ++j) {
        const std::uint64_t v = ranks[j].arrive.load(std::memory_order_acquire);
        if ((v >> 8) == step && (v & 0xff) != ctx.code) {
            return fail(
                Status(StatusCode::kInternal,
                       fmt::format(
                           "shm group '{}' collective mismatch at #{} (step {}): rank {} issued {} "
                           "but rank {} issued {}; all ranks must issue the same collectives in "
                           "the same order",
                           name(), ctx.seq, step, rank(), ctx.name, j, op_name(v & 0xff))));
        }
    }
    return Status::Ok();
}

// ---- ProcessGroup ----------------------------------------------------------------------------

Status ProcessGroupShm::all_reduce(std::span<float> data, ReduceOp op) {
    OpContext ctx{"all_reduce", kAllReduce};
    TSR_RETURN_IF_ERROR(begin(ctx));
    constexpr std::size_t cap = kSlotBytes / sizeof(float);
    std::vector<const float*> src(static_cast<std::size_t>(size()));
    for (std::size_t off = 0; off < data.size(); off += cap) {
        const std::size_t c = std::min(cap, data.size() - off);
        std::memcpy(slot(step_ + 1, rank()), data.data() + off, c * sizeof(float));
        TSR_RETURN_IF_ERROR(sync(ctx));
        for (int j = 0; j < size(); ++j) src[j] = reinterpret_cast<const float*>(slot(step_, j));
        reduce_dispatch(data.data() + off, src, c, op);
    }
    return Status::Ok();
}

Status ProcessGroupShm::all_gather(std::span<const float> in, std::span<float> out) {
    TSR_RETURN_IF_ERROR(check_all_gather(in.size(), out.size()));
    OpContext ctx{"all_gather", kAllGather};
    TSR_RETURN_IF_ERROR(begin(ctx));
    constexpr std::size_t cap = kSlotBytes / sizeof(float);
    for (std::size_t off = 0; off < in.size(); off += cap) {
        const std::size_t c = std::min(cap, in.size() - off);
        std::memcpy(slot(step_ + 1, rank()), in.data() + off, c * sizeof(float));
        TSR_RETURN_IF_ERROR(sync(ctx));
        for (int j = 0; j < size(); ++j) {
            std::memcpy(out.data() + static_cast<std::size_t>(j) * in.size() + off, slot(step_, j),
                        c * sizeof(float));
        }
    }
    return Status::Ok();
}

Status ProcessGroupShm::reduce_scatter(std::span<const float> in, std::span<float> out,
                                       ReduceOp op) {
    TSR_RETURN_IF_ERROR(check_reduce_scatter(in.size(), out.size()));
    OpContext ctx{"reduce_scatter", kReduceScatter};
    TSR_RETURN_IF_ERROR(begin(ctx));
    const std::size_t n = static_cast<std::size_t>(size());
    const std::size_t m = out.size();
    const std::size_t cap = kSlotBytes / sizeof(float) / n;  // per destination rank and round
    std::vector<const float*> src(n);
    for (std::size_t off = 0; off < m; off += cap) {
        const std::size_t c = std::min(cap, m - off);
        auto* mine = reinterpret_cast<float*>(slot(step_ + 1, rank()));
        for (std::size_t r = 0; r < n; ++r)
            std::memcpy(mine + r * c, in.data() + r * m + off, c * sizeof(float));
        TSR_RETURN_IF_ERROR(sync(ctx));
        for (std::size_t j = 0; j < n; ++j) {
            src[j] = reinterpret_cast<const float*>(slot(step_, static_cast<int>(j))) +
                     static_cast<std::size_t>(rank()) * c;
        }
        reduce_dispatch(out.data() + off, src, c, op);
    }
    return Status::Ok();
}

Status ProcessGroupShm::all_to_all_v(std::span<const std::uint8_t> send,
                                     std::span<const std::int64_t> send_counts,
                                     std::span<std::uint8_t> recv,
                                     std::span<const std::int64_t> recv_counts) {
    TSR_RETURN_IF_ERROR(check_all_to_all_v(send.size(), send_counts, recv.size(), recv_counts));
    const int me = rank();
    if (send_counts[me] != recv_counts[me]) {
        return Status::InvalidArgument(
            fmt::format("shm group '{}' all_to_all_v: send_counts[{}] ({}) != recv_counts[{}] ({})",
                        name(), me, send_counts[me], me, recv_counts[me]));
    }
    OpContext ctx{"all_to_all_v", kAllToAllV};
    TSR_RETURN_IF_ERROR(begin(ctx));
    const int n = size();
    std::vector<std::size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
    for (int r = 0; r < n; ++r) {
        send_off[r + 1] = send_off[r] + static_cast<std::size_t>(send_counts[r]);
        recv_off[r + 1] = recv_off[r] + static_cast<std::size_t>(recv_counts[r]);
    }
    if (send_counts[me] > 0)
        std::memmove(recv.data() + recv_off[me], send.data() + send_off[me], send_counts[me]);
    // Round 0 agrees on the number of data rounds: every rank publishes its largest block.
    std::int64_t my_max = 0;
    for (int r = 0; r < n; ++r) {
        if (r != me) my_max = std::max(my_max, send_counts[r]);
    }
    std::memcpy(slot(step_ + 1, me), &my_max, sizeof(my_max));
    TSR_RETURN_IF_ERROR(sync(ctx));
    std::int64_t global_max = 0;
    for (int j = 0; j < n; ++j) {
        std::int64_t v = 0;
        std::memcpy(&v, slot(step_, j), sizeof(v));
        global_max = std::max(global_max, v);
    }
    const std::size_t q =
        (kSlotBytes / static_cast<std::size_t>(n)) & ~std::size_t{63};  // bytes per peer per round
    const std::size_t rounds = (static_cast<std::size_t>(global_max) + q - 1) / q;
    for (std::size_t k = 0; k < rounds; ++k) {
        const std::size_t off = k * q;
        std::uint8_t* mine = slot(step_ + 1, me);
        for (int dst = 0; dst < n; ++dst) {
            const auto count = static_cast<std::size_t>(send_counts[dst]);
            if (dst == me || off >= count) continue;
            std::memcpy(mine + static_cast<std::size_t>(dst) * q, send.data() + send_off[dst] + off,
                        std::min(q, count - off));
        }
        TSR_RETURN_IF_ERROR(sync(ctx));
        for (int src = 0; src < n; ++src) {
            const auto count = static_cast<std::size_t>(recv_counts[src]);
            if (src == me || off >= count) continue;
            std::memcpy(recv.data() + recv_off[src] + off,
                        slot(step_, src) + static_cast<std::size_t>(me) * q,
                        std::min(q, count - off));
        }
    }
    return Status::Ok();
}

Status ProcessGroupShm::broadcast(std::span<std::uint8_t> data, int root) {
    TSR_RETURN_IF_ERROR(check_rank(root, "broadcast", "root"));
    OpContext ctx{"broadcast", kBroadcast};
    TSR_RETURN_IF_ERROR(begin(ctx));
    for (std::size_t off = 0; off < data.size(); off += kSlotBytes) {
        const std::size_t c = std::min(kSlotBytes, data.size() - off);
        if (rank() == root) std::memcpy(slot(step_ + 1, root), data.data() + off, c);
        TSR_RETURN_IF_ERROR(sync(ctx));
        if (rank() != root) std::memcpy(data.data() + off, slot(step_, root), c);
    }
    return Status::Ok();
}

StatusOr<std::shared_ptr<Work>> ProcessGroupShm::isend(std::span<const std::uint8_t> data, int dst, int tag) {
    if (p2p_ == nullptr) return unsupported("isend");
    TSR_RETURN_IF_ERROR(check_rank(dst, "isend", "dst"));
    if (dst == rank()) return Status::InvalidArgument(fmt::format("shm group '{}' isend: dst {} is this rank", name(), dst));
    return p2p_->isend(data, dst, tag);
}

StatusOr<std::shared_ptr<Work>> ProcessGroupShm::irecv(std::span<std::uint8_t> data, int src, int tag) {
    if (p2p_ == nullptr) return unsupported("irecv");
    TSR_RETURN_IF_ERROR(check_rank(src, "irecv", "src"));
    if (src == rank()) return Status::InvalidArgument(fmt::format("shm group '{}' irecv: src {} is this rank", name(), src));
    return p2p_->irecv(data, src, tag);
}

Status ProcessGroupShm::barrier() {
    OpContext ctx{"barrier", kBarrier};
    TSR_RETURN_IF_ERROR(begin(ctx));
    return sync(ctx);
}

// ---- factory ---------------------------------------------------------------------------------

StatusOr<std::unique_ptr<ProcessGroup>> make_shm_group(Store& store,
                                                       const ProcessGroupOptions& options) {
    if (options.size < 1 || options.size > ProcessGroupShm::kMaxRanks || options.rank < 0 ||
        options.rank >= options.size) {
        return Status::InvalidArgument(
            fmt::format("shm group '{}': rank {} / size {} invalid (size must be in [1, {}])",
                        options.name, options.rank, options.size, ProcessGroupShm::kMaxRanks));
    }
    if (options.timeout.count() <= 0) {
        return Status::InvalidArgument(
            fmt::format("shm group '{}': timeout must be positive, got {} ms", options.name,
                        options.timeout.count()));
    }
    auto prefixed = make_prefix_store("shm/" + options.name, store);
    auto mapping = std::make_unique<Mapping>();
    const std::size_t data_offset = (sizeof(Header) + 4095) & ~std::size_t{4095};
    const std::size_t p2p_offset =
        data_offset + 2 * static_cast<std::size_t>(options.size) * ProcessGroupShm::kSlotBytes;
    const std::size_t ring_bytes = options.p2p_buffer_bytes;
    const std::size_t length =
        p2p_offset + (ring_bytes > 0 ? shm_detail::ShmP2p::region_bytes(options.size, ring_bytes) : 0);
    const auto deadline = Clock::now() + options.timeout;
    auto left = [&] {
        return std::max(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
            std::chrono::milliseconds(1));
    };
    auto sys_error = [&](const char* what) {
        return Status(StatusCode::kUnavailable,
                      fmt::format("shm group '{}' rank {}: {}('{}') failed: {}", options.name,
                                  options.rank, what, mapping->name, std::strerror(errno)));
    };

    if (options.rank == 0) {
        mapping->name = fmt::format("/tessera-{}-{}-{}", ::getpid(), g_segment_counter.fetch_add(1),
                                    sanitize(options.name));
        int fd = ::shm_open(mapping->name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) return sys_error("shm_open");
        mapping->owner = true;
        if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
            Status s = sys_error("ftruncate");
            ::close(fd);
            return s;
        }
        mapping->addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (mapping->addr == MAP_FAILED) return sys_error("mmap");
        mapping->length = length;
        auto* header = new (mapping->addr) Header{};
        header->size = static_cast<std::uint32_t>(options.size);
        header->slot_bytes = ProcessGroupShm::kSlotBytes;
        header->data_offset = data_offset;
        header->p2p_offset = p2p_offset;
        header->p2p_ring_bytes = ring_bytes;
        for (auto& r : header->ranks) {
            r.arrive.store(0, std::memory_order_relaxed);
            r.pid.store(0, std::memory_order_relaxed);
        }
        std::atomic_thread_fence(std::memory_order_release);
        header->magic = shm_detail::kMagic;
        TSR_RETURN_IF_ERROR(prefixed->set(
            "segment", std::vector<std::uint8_t>(mapping->name.begin(), mapping->name.end())));
    } else {
        auto name = prefixed->get("segment", left());
        if (!name.ok()) {
            return Status(
                name.status().code(),
                fmt::format("shm group '{}' rank {}: waiting for rank 0 to create the segment: {}",
                            options.name, options.rank, name.status().message()));
        }
        mapping->name.assign(name.value().begin(), name.value().end());
        int fd = ::shm_open(mapping->name.c_str(), O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) return sys_error("shm_open");
        struct stat st {};
        if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != length) {
            ::close(fd);
            return Status::InvalidArgument(
                fmt::format("shm group '{}' rank {}: segment '{}' has {} bytes, expected {} (do "
                            "all ranks agree on size {} and p2p buffer {} bytes?)",
                            options.name, options.rank, mapping->name,
                            static_cast<long long>(st.st_size), length, options.size, ring_bytes));
        }
        mapping->addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (mapping->addr == MAP_FAILED) return sys_error("mmap");
        mapping->length = length;
        if (mapping->header()->magic != shm_detail::kMagic ||
            mapping->header()->size != static_cast<std::uint32_t>(options.size)) {
            return Status::InvalidArgument(
                fmt::format("shm group '{}' rank {}: segment '{}' is not a size-{} group",
                            options.name, options.rank, mapping->name, options.size));
        }
    }
    mapping->header()->ranks[options.rank].pid.store(::getpid(), std::memory_order_release);
    TSR_RETURN_IF_ERROR(prefixed->set(fmt::format("attached/{}", options.rank), {1}));
    if (options.rank == 0) {
        for (int r = 1; r < options.size; ++r) {
            auto got = prefixed->get(fmt::format("attached/{}", r), left());
            if (!got.ok()) {
                return Status(got.status().code(),
                              fmt::format("shm group '{}': rank {} did not attach the segment: {}",
                                          options.name, r, got.status().message()));
            }
        }
        mapping->unlink();  // everyone has it mapped: the name is no longer needed
    }
    return std::unique_ptr<ProcessGroup>(
        std::make_unique<ProcessGroupShm>(options, std::move(mapping)));
}

}  // namespace tessera::dist
