// dist/process_group_test.cpp — every op of every backend (gloo, shm, single) against a
// computed expectation, with 2, 3 and 4 ranks as threads over HashStore and TcpStore on
// 127.0.0.1; plus large P2P over Gloo (the stall regression), through shared-memory rings and
// through a hybrid of both, timeouts, a dead peer process, and mismatched collectives and
// messages.

#include "dist/process_group.h"

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <latch>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dist/store.h"

namespace tessera::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

enum class Backend { kGloo, kShm };
enum class StoreKind { kHash, kTcp };

const char* to_string(Backend b) { return b == Backend::kGloo ? "gloo" : "shm"; }
const char* to_string(StoreKind s) { return s == StoreKind::kHash ? "hash" : "tcp"; }

// The stores of one simulated job: a HashStore shared by all ranks, or a TcpStore server
// (used by rank 0, like the rank hosting --dist-init-addr) plus one client per other rank.
class Stores {
 public:
    Stores(StoreKind kind, int n) {
        if (kind == StoreKind::kHash) {
            hash_ = make_hash_store();
            return;
        }
        TcpStoreOptions o;
        o.is_server = true;
        auto server = make_tcp_store(o, &port_);
        EXPECT_TRUE(server.ok()) << server.status().to_string();
        server_ = std::move(server).value();
        for (int r = 1; r < n; ++r) {
            TcpStoreOptions c;
            c.port = port_;
            c.connect_timeout = milliseconds(2000);
            auto client = make_tcp_store(c);
            EXPECT_TRUE(client.ok()) << client.status().to_string();
            clients_.push_back(std::move(client).value());
        }
    }
    Store& for_rank(int r) {
        if (hash_) return *hash_;
        return r == 0 ? *server_ : *clients_[r - 1];
    }

 private:
    std::unique_ptr<Store> hash_, server_;
    std::vector<std::unique_ptr<Store>> clients_;
    int port_ = 0;
};

StatusOr<std::unique_ptr<ProcessGroup>> make_group(Backend b, Store& store,
                                                   const ProcessGroupOptions& o) {
    return b == Backend::kGloo ? make_gloo_group(store, o) : make_shm_group(store, o);
}

std::string unique_name() {
    static std::atomic<int> counter{0};
    return fmt::format("g{}", counter.fetch_add(1));
}

ProcessGroupOptions options_of(const std::string& name, int rank, int size, milliseconds timeout,
                               std::size_t p2p_buffer_bytes = 0, bool rank_order_reduce = false) {
    ProcessGroupOptions o;
    o.rank_order_reduce = rank_order_reduce;
    o.name = name;
    o.rank = rank;
    o.size = size;
    o.timeout = timeout;
    o.p2p_buffer_bytes = p2p_buffer_bytes;
    return o;
}

// Runs body(group) on n threads, one rank each; groups are destroyed only after every rank
// finished its body.
void run_ranks(Backend backend, StoreKind kind, int n, milliseconds timeout,
               const std::function<void(ProcessGroup&)>& body, std::size_t p2p_buffer_bytes = 0,
               bool rank_order_reduce = false) {
    Stores stores(kind, n);
    const std::string name = unique_name();
    std::latch done(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            auto g = make_group(backend, stores.for_rank(r),
                                options_of(name, r, n, timeout, p2p_buffer_bytes, rank_order_reduce));
            if (!g.ok()) {
                ADD_FAILURE() << "rank " << r << ": " << g.status().to_string();
                done.count_down();
                return;
            }
            EXPECT_EQ(g.value()->rank(), r);
            EXPECT_EQ(g.value()->size(), n);
            EXPECT_EQ(g.value()->backend_name(), to_string(backend));
            body(*g.value());
            done.arrive_and_wait();
        });
    }
    for (auto& t : threads) t.join();
}

// Integer-valued floats: sums are exact in any order.
float value(int rank, size_t i) {
    return static_cast<float>(static_cast<int>((rank * 31 + i * 7) % 101) - 50);
}

std::vector<float> rank_data(int rank, size_t n, size_t salt = 0) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = value(rank, i + salt);
    return v;
}

float reduce_expected(int n_ranks, size_t i, ReduceOp op, size_t salt = 0) {
    float acc = value(0, i + salt);
    for (int r = 1; r < n_ranks; ++r) {
        float v = value(r, i + salt);
        acc = op == ReduceOp::kSum   ? acc + v
              : op == ReduceOp::kMax ? std::max(acc, v)
                                     : std::min(acc, v);
    }
    return acc;
}

const char* op_label(ReduceOp op) {
    return op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "min";
}

// Counts for all_to_all_v: uneven, with zeros; `scale` bytes per unit.
std::int64_t a2a_count(int src, int dst, std::int64_t scale) {
    return ((src * 3 + dst * 5 + 1) % 4) * scale + (src == dst ? 3 : 0);
}
std::uint8_t a2a_byte(int src, int dst, size_t i) {
    return static_cast<std::uint8_t>(src * 37 + dst * 11 + i * 3);
}

void check_all_to_all_v(ProcessGroup& g, std::int64_t scale) {
    const int n = g.size(), me = g.rank();
    std::vector<std::int64_t> send_counts(n), recv_counts(n);
    for (int r = 0; r < n; ++r) {
        send_counts[r] = a2a_count(me, r, scale);
        recv_counts[r] = a2a_count(r, me, scale);
    }
    std::vector<std::uint8_t> send(
        std::accumulate(send_counts.begin(), send_counts.end(), std::int64_t{0}));
    std::vector<std::uint8_t> recv(
        std::accumulate(recv_counts.begin(), recv_counts.end(), std::int64_t{0}), 0xEE);
    size_t off = 0;
    for (int r = 0; r < n; ++r) {
        for (std::int64_t i = 0; i < send_counts[r]; ++i) send[off++] = a2a_byte(me, r, i);
    }
    Status s = g.all_to_all_v(send, send_counts, recv, recv_counts);
    ASSERT_TRUE(s.ok()) << s.to_string();
    off = 0;
    for (int r = 0; r < n; ++r) {
        for (std::int64_t i = 0; i < recv_counts[r]; ++i, ++off) {
            if (recv[off] != a2a_byte(r, me, i)) {
                FAIL() << "rank " << me << " all_to_all_v scale " << scale << ": byte " << i
                       << " from rank " << r;
            }
        }
    }
}

void check_all_ops(ProcessGroup& g) {
    const int n = g.size(), me = g.rank();
    // all_reduce: odd sizes, one that needs several shm rounds (> 1 MiB).
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{300'001}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
            auto data = rank_data(me, count, count);
            Status s = g.all_reduce(data, op);
            ASSERT_TRUE(s.ok()) << s.to_string();
            for (size_t i = 0; i < count; ++i) {
                if (data[i] != reduce_expected(n, i, op, count)) {
                    FAIL() << "rank " << me << " all_reduce " << op_label(op) << " count " << count
                           << " index " << i << ": " << data[i]
                           << " != " << reduce_expected(n, i, op, count);
                }
            }
        }
    }
    // all_gather_rows: every rank's row, in rank order, exact.
    {
        const std::vector<std::int64_t> mine = {me, -(std::int64_t{1} << 40) - me};
        StatusOr<std::vector<std::int64_t>> rows = g.all_gather_rows(mine);
        ASSERT_TRUE(rows.ok()) << rows.status().message();
        ASSERT_EQ(rows->size(), static_cast<std::size_t>(2 * n));
        for (int r = 0; r < n; ++r) {
            EXPECT_EQ((*rows)[2 * r], r);
            EXPECT_EQ((*rows)[2 * r + 1], -(std::int64_t{1} << 40) - r);
        }
    }
    // Integer all_reduce: exact beyond f32's 2^24, negative values, int32 and int64.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        std::vector<std::int64_t> big = {(std::int64_t{1} << 40) + me, -3 * me, 7};
        std::vector<std::int32_t> small = {me, 100 - me};
        ASSERT_TRUE(g.all_reduce(std::span<std::int64_t>(big), op).ok());
        ASSERT_TRUE(g.all_reduce(std::span<std::int32_t>(small), op).ok());
        const std::int64_t ranks_sum = std::int64_t{n} * (n - 1) / 2;
        if (op == ReduceOp::kSum) {
            EXPECT_EQ(big, (std::vector<std::int64_t>{n * (std::int64_t{1} << 40) + ranks_sum, -3 * ranks_sum, 7 * n}));
            EXPECT_EQ(small, (std::vector<std::int32_t>{static_cast<std::int32_t>(ranks_sum),
                                                        static_cast<std::int32_t>(100 * n - ranks_sum)}));
        } else if (op == ReduceOp::kMax) {
            EXPECT_EQ(big, (std::vector<std::int64_t>{(std::int64_t{1} << 40) + n - 1, 0, 7}));
            EXPECT_EQ(small, (std::vector<std::int32_t>{n - 1, 100}));
        } else {
            EXPECT_EQ(big, (std::vector<std::int64_t>{std::int64_t{1} << 40, -3 * (n - 1), 7}));
            EXPECT_EQ(small, (std::vector<std::int32_t>{0, 100 - (n - 1)}));
        }
    }
    // all_gather.
    for (size_t count : {size_t{1}, size_t{13}, size_t{70'001}, size_t{300'000}}) {
        auto in = rank_data(me, count);
        std::vector<float> out(count * n, -999.f);
        Status s = g.all_gather(in, out);
        ASSERT_TRUE(s.ok()) << s.to_string();
        for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < count; ++i) {
                if (out[r * count + i] != value(r, i))
                    FAIL() << "all_gather count " << count << " rank " << r << " i " << i;
            }
        }
    }
    // reduce_scatter.
    for (size_t m : {size_t{1}, size_t{5}, size_t{100'003}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            auto in = rank_data(me, m * n);
            std::vector<float> out(m, -999.f);
            Status s = g.reduce_scatter(in, out, op);
            ASSERT_TRUE(s.ok()) << s.to_string();
            for (size_t i = 0; i < m; ++i) {
                const float want = reduce_expected(n, me * m + i, op);
                if (out[i] != want) {
                    FAIL() << "rank " << me << " reduce_scatter " << op_label(op) << " m " << m
                           << " i " << i << ": " << out[i] << " != " << want;
                }
            }
        }
    }
    // all_to_all_v: uneven counts including zeros, small and multi-piece / multi-round.
    check_all_to_all_v(g, 1);
    check_all_to_all_v(g, 1000);
    check_all_to_all_v(g, 300'000);
    // broadcast from the last rank (non-zero) and from rank 0; sizes below and above a slot.
    for (int root : {n - 1, 0}) {
        for (size_t bytes : {size_t{1}, size_t{1001}, size_t{1'500'000}}) {
            std::vector<std::uint8_t> data(bytes);
            for (size_t i = 0; i < bytes; ++i) {
                data[i] = me == root ? static_cast<std::uint8_t>(i * 13 + root)
                                     : static_cast<std::uint8_t>(0xAB);
            }
            Status s = g.broadcast(data, root);
            ASSERT_TRUE(s.ok()) << s.to_string();
            for (size_t i = 0; i < bytes; ++i) {
                if (data[i] != static_cast<std::uint8_t>(i * 13 + root))
                    FAIL() << "broadcast root " << root << " i " << i;
            }
        }
    }
    for (int i = 0; i < 3; ++i) {
        Status s = g.barrier();
        ASSERT_TRUE(s.ok()) << s.to_string();
    }
    // Empty buffers are fine.
    std::vector<float> empty;
    ASSERT_TRUE(g.all_reduce(empty).ok());
    ASSERT_TRUE(g.all_gather(empty, empty).ok());
    // Bad arguments are reported, not crashed on.
    std::vector<float> a(3), b(5);
    Status bad = g.all_gather(a, b);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(g.broadcast({}, n).code(), StatusCode::kInvalidArgument);
    // Still usable after the argument errors.
    ASSERT_TRUE(g.barrier().ok());
}

using Param = std::tuple<Backend, StoreKind, int>;

class ProcessGroupAllOpsTest : public ::testing::TestWithParam<Param> {};

TEST_P(ProcessGroupAllOpsTest, EveryOpMatchesExpectation) {
    auto [backend, kind, n] = GetParam();
    run_ranks(backend, kind, n, milliseconds(10'000), [](ProcessGroup& g) { check_all_ops(g); });
}

INSTANTIATE_TEST_SUITE_P(Backends, ProcessGroupAllOpsTest,
                         ::testing::Combine(::testing::Values(Backend::kGloo, Backend::kShm),
                                            ::testing::Values(StoreKind::kHash, StoreKind::kTcp),
                                            ::testing::Values(2, 3, 4)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                             return fmt::format("{}_{}_{}ranks", to_string(std::get<0>(info.param)),
                                                to_string(std::get<1>(info.param)),
                                                std::get<2>(info.param));
                         });

// ---- P2P ---------------------------------------------------------------------------------------

void check_ring_p2p(ProcessGroup& g, size_t bytes, int tag) {
    const int n = g.size(), me = g.rank();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    std::vector<std::uint8_t> out(bytes), in(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(i * 7 + me);
    auto recv = g.irecv(in, prev, tag);
    ASSERT_TRUE(recv.ok()) << recv.status().to_string();
    auto send = g.isend(out, next, tag);
    ASSERT_TRUE(send.ok()) << send.status().to_string();
    Status s = send.value()->wait(milliseconds(10'000));
    ASSERT_TRUE(s.ok()) << s.to_string();
    s = recv.value()->wait(milliseconds(10'000));
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(send.value()->is_completed());
    EXPECT_TRUE(recv.value()->is_completed());
    for (size_t i = 0; i < bytes; ++i) {
        if (in[i] != static_cast<std::uint8_t>(i * 7 + prev))
            FAIL() << "p2p " << bytes << " bytes: byte " << i;
    }
}

// Deterministic inference: with rank_order_reduce every element is ((part 0 + part 1) + part 2),
// whatever the buffer's length. The parts 1e8, -1e8, 1 tell the orders apart: any other order
// loses the 1 (-1e8 + 1 rounds to -1e8).
class RankOrderReduceTest : public ::testing::TestWithParam<Backend> {};

TEST_P(RankOrderReduceTest, SumsInRankOrderAtEveryLength) {
    run_ranks(
        GetParam(), StoreKind::kTcp, 3, milliseconds(10'000),
        [](ProcessGroup& g) {
            const float part = g.rank() == 0 ? 1e8f : g.rank() == 1 ? -1e8f : 1.0f;
            for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{70'000}}) {
                std::vector<float> data(n, part);
                ASSERT_TRUE(g.all_reduce(data).ok());
                for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], 1.0f) << "all_reduce of " << n << " at " << i;
                const std::vector<float> in(3 * n, part);
                std::vector<float> out(n);
                ASSERT_TRUE(g.reduce_scatter(in, out).ok());
                for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 1.0f) << "reduce_scatter of " << n << " at " << i;
            }
        },
        0, true);
}

INSTANTIATE_TEST_SUITE_P(Backends, RankOrderReduceTest, ::testing::Values(Backend::kGloo, Backend::kShm),
                         [](const auto& info) { return to_string(info.param); });

TEST(ProcessGroupGlooTest, P2pRingOddAndMediumSizes) {
    run_ranks(Backend::kGloo, StoreKind::kTcp, 3, milliseconds(10'000), [](ProcessGroup& g) {
        check_ring_p2p(g, 0, 1);
        check_ring_p2p(g, 1, 2);
        check_ring_p2p(g, 65'537, 3);
        check_ring_p2p(g, 1 << 20, 4);
    });
}

// Regression: single Gloo P2P messages ≥ 256 KB stall for ~0.4 s (1 MB) or time out (64 MB).
TEST(ProcessGroupGlooTest, P2pLargeMessagesDoNotStall) {
    run_ranks(Backend::kGloo, StoreKind::kHash, 2, milliseconds(10'000), [](ProcessGroup& g) {
        for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
            const auto t0 = Clock::now();
            if (g.rank() == 0) {
                std::vector<std::uint8_t> out(bytes);
                for (size_t i = 0; i < bytes; ++i)
                    out[i] = static_cast<std::uint8_t>(i ^ (i >> 11));
                auto w = g.isend(out, 1, 9);
                ASSERT_TRUE(w.ok()) << w.status().to_string();
                Status s = w.value()->wait(milliseconds(10'000));
                ASSERT_TRUE(s.ok()) << s.to_string();
            } else {
                std::vector<std::uint8_t> in(bytes);
                auto w = g.irecv(in, 0, 9);
                ASSERT_TRUE(w.ok()) << w.status().to_string();
                Status s = w.value()->wait(milliseconds(10'000));
                ASSERT_TRUE(s.ok()) << s.to_string();
                for (size_t i = 0; i < bytes; ++i) {
                    if (in[i] != static_cast<std::uint8_t>(i ^ (i >> 11)))
                        FAIL() << "byte " << i << " of " << bytes;
                }
            }
            const auto ms = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
            // Generous bound: the stall was ~360 ms for 1 MB and a timeout for 64 MB.
            EXPECT_LT(ms, bytes < (size_t{2} << 20) ? 200 : 4000)
                << bytes << " bytes took " << ms << " ms";
            ASSERT_TRUE(g.barrier().ok());
        }
    });
}

// Without a p2p buffer (the TP groups) there are no rings to send through.
TEST(ProcessGroupShmTest, P2pWithoutBufferIsUnimplementedAndSaysSo) {
    run_ranks(Backend::kShm, StoreKind::kHash, 2, milliseconds(2000), [](ProcessGroup& g) {
        std::vector<std::uint8_t> buf(8);
        auto w = g.isend(buf, 1 - g.rank(), 0);
        ASSERT_FALSE(w.ok());
        EXPECT_EQ(w.status().code(), StatusCode::kUnimplemented);
        EXPECT_NE(w.status().message().find("'shm'"), std::string::npos) << w.status().message();
        EXPECT_NE(w.status().message().find("isend"), std::string::npos) << w.status().message();
        auto r = g.irecv(buf, 1 - g.rank(), 0);
        EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    });
}

ProcessGroupOptions two_ranks(const std::string& name, int rank, std::size_t p2p_buffer_bytes = 0) {
    return options_of(name, rank, 2, milliseconds(5000), p2p_buffer_bytes);
}

// The store rank 0 serves on a free loopback port, for a peer rank in another process.
StatusOr<std::unique_ptr<Store>> tcp_store_server(int* port) {
    TcpStoreOptions so;
    so.is_server = true;
    return make_tcp_store(so, port);
}

// Forks rank 1 of a two-rank group as a process of its own: it joins the group through the
// store at `port`, waits for rank 0's "rank0_ready" key when asked, and exits (0 = joined).
pid_t fork_rank1(Backend backend, int port, const ProcessGroupOptions& o, bool wait_for_rank0) {
    const pid_t child = ::fork();
    if (child != 0) return child;
    TcpStoreOptions co;
    co.port = port;
    auto store = make_tcp_store(co);
    if (!store.ok()) ::_exit(2);
    auto g = make_group(backend, *store.value(), o);
    if (!g.ok()) ::_exit(3);
    if (!wait_for_rank0) ::_exit(0);
    ::_exit(store.value()->get("rank0_ready", milliseconds(5000)).ok() ? 0 : 4);
}

// A ring smaller than the messages: every message of more than 4 KB streams through it in
// pieces, on the sender thread while the caller goes on.
constexpr std::size_t kSmallRing = 4096;

TEST(ProcessGroupShmTest, P2pRingOddAndMediumSizes) {
    for (std::size_t ring : {kSmallRing, std::size_t{4} << 20}) {
        run_ranks(
            Backend::kShm, StoreKind::kHash, 3, milliseconds(10'000),
            [](ProcessGroup& g) {
                check_ring_p2p(g, 0, 1);
                check_ring_p2p(g, 1, 2);
                check_ring_p2p(g, 4081, 3);  // header + payload one byte beyond the small ring
                check_ring_p2p(g, 65'537, 4);
                check_ring_p2p(g, 1 << 20, 5);
            },
            ring);
    }
}

// The pipeline's pattern: several sends posted before the receiver takes any, each awaited
// later, messages of different sizes and tags arriving in order; a 64 MB message through a
// 4 KB ring.
TEST(ProcessGroupShmTest, P2pQueuedSendsArriveInOrder) {
    run_ranks(
        Backend::kShm, StoreKind::kHash, 2, milliseconds(10'000),
        [](ProcessGroup& g) {
            const std::vector<std::size_t> sizes = {16, 100'000, 3, 0, 64u << 20, 5000};
            auto fill = [](std::size_t i, std::size_t k) { return static_cast<std::uint8_t>(k * 31 + (i ^ (i >> 9))); };
            if (g.rank() == 0) {
                std::vector<std::vector<std::uint8_t>> out(sizes.size());
                std::vector<std::shared_ptr<Work>> works;
                for (std::size_t k = 0; k < sizes.size(); ++k) {
                    out[k].resize(sizes[k]);
                    for (std::size_t i = 0; i < sizes[k]; ++i) out[k][i] = fill(i, k);
                    auto w = g.isend(out[k], 1, static_cast<int>(10 + k));
                    ASSERT_TRUE(w.ok()) << w.status().to_string();
                    works.push_back(std::move(w).value());
                }
                for (auto& w : works) ASSERT_TRUE(w->wait(milliseconds(10'000)).ok());
            } else {
                std::this_thread::sleep_for(milliseconds(50));  // the sends queue up first
                std::vector<std::vector<std::uint8_t>> in(sizes.size());
                std::vector<std::shared_ptr<Work>> works;
                for (std::size_t k = 0; k < sizes.size(); ++k) {
                    in[k].assign(sizes[k], 0);
                    auto w = g.irecv(in[k], 0, static_cast<int>(10 + k));
                    ASSERT_TRUE(w.ok()) << w.status().to_string();
                    works.push_back(std::move(w).value());
                }
                // Waiting on the last receive completes the earlier ones first.
                Status s = works.back()->wait(milliseconds(10'000));
                ASSERT_TRUE(s.ok()) << s.to_string();
                for (std::size_t k = 0; k < sizes.size(); ++k) {
                    EXPECT_TRUE(works[k]->is_completed()) << k;
                    for (std::size_t i = 0; i < sizes[k]; ++i) {
                        if (in[k][i] != fill(i, k)) FAIL() << "message " << k << " byte " << i;
                    }
                }
            }
            ASSERT_TRUE(g.barrier().ok());
        },
        kSmallRing);
}

TEST(ProcessGroupShmTest, P2pMismatchedTagOrSizeIsDataLoss) {
    run_ranks(
        Backend::kShm, StoreKind::kHash, 2, milliseconds(5000),
        [](ProcessGroup& g) {
            std::vector<std::uint8_t> buf(64, 7);
            if (g.rank() == 0) {
                auto w = g.isend(buf, 1, 5);
                ASSERT_TRUE(w.ok());
                EXPECT_TRUE(w.value()->wait(milliseconds(5000)).ok());
            } else {
                auto w = g.irecv(buf, 0, 6);
                ASSERT_TRUE(w.ok());
                Status s = w.value()->wait(milliseconds(5000));
                EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
                EXPECT_NE(s.message().find("has tag 5 and 64 bytes"), std::string::npos) << s.message();
                EXPECT_NE(s.message().find("tag 6"), std::string::npos) << s.message();
                // The group is unusable from now on and says so at once.
                auto again = g.irecv(buf, 0, 5);
                EXPECT_EQ(again.status().code(), StatusCode::kUnavailable) << again.status().to_string();
            }
        },
        kSmallRing);
}

// A send that times out breaks the group and is dropped: the sender thread no longer reads the
// buffer the caller got back with the error, and later transfers fail at once.
TEST(ProcessGroupShmTest, P2pTimedOutSendIsDropped) {
    std::latch sender_done(1);
    run_ranks(
        Backend::kShm, StoreKind::kHash, 2, milliseconds(5000),
        [&](ProcessGroup& g) {
            if (g.rank() == 1) {  // never receives
                sender_done.wait();
                return;
            }
            std::vector<std::uint8_t> out(1 << 20, 1);
            auto w = g.isend(out, 1, 2);
            ASSERT_TRUE(w.ok()) << w.status().to_string();
            Status s = w.value()->wait(milliseconds(50));
            EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
            EXPECT_TRUE(w.value()->is_completed()) << "still queued for the sender thread";
            auto again = g.isend(out, 1, 3);
            EXPECT_EQ(again.status().code(), StatusCode::kUnavailable) << again.status().to_string();
            sender_done.count_down();
        },
        kSmallRing);
}

// Rank 1 is a process that dies without receiving: rank 0's large send (more than the ring
// holds) fails with Unavailable instead of waiting for ever.
TEST(ProcessGroupShmTest, P2pSendToDeadPeerFails) {
    int port = 0;
    auto server = tcp_store_server(&port);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    const std::string name = unique_name();
    const pid_t child = fork_rank1(Backend::kShm, port, two_ranks(name, 1, kSmallRing), false);
    ASSERT_GE(child, 0);
    auto g = make_shm_group(*server.value(), two_ranks(name, 0, kSmallRing));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    std::vector<std::uint8_t> out(1 << 20, 1);
    const auto t0 = Clock::now();
    auto w = g.value()->isend(out, 1, 3);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    Status s = w.value()->wait(milliseconds(5000));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("rank 1 exited"), std::string::npos) << s.message();
    EXPECT_LT(Clock::now() - t0, milliseconds(1500));
    std::vector<std::uint8_t> in(8);
    auto r = g.value()->irecv(in, 1, 4);
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
}

// Four ranks as threads on two "nodes" of two: each rank's hybrid group over `whole` (its
// members all four) and a shared-memory group with rings of the two on its node; body(group).
void run_hybrid_ranks(Backend whole, const std::function<void(ProcessGroup&)>& body) {
    constexpr int kRanks = 4;
    Stores stores(StoreKind::kHash, kRanks);
    const std::string name = unique_name();
    std::latch done(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
        threads.emplace_back([&, r] {
            auto all_store = make_prefix_store(name, stores.for_rank(r));
            auto all = make_group(whole, *all_store, options_of(name, r, kRanks, milliseconds(10'000)));
            const std::string node = name + "_node" + std::to_string(r / 2);
            auto local_store = make_prefix_store(node, stores.for_rank(r));
            auto local = make_shm_group(*local_store, options_of(node, r % 2, 2, milliseconds(10'000), kSmallRing));
            const std::vector<int> local_rank = r < 2 ? std::vector<int>{0, 1, -1, -1} : std::vector<int>{-1, -1, 0, 1};
            if (all.ok() && local.ok()) {
                auto g = make_hybrid_group(std::move(all).value(), std::move(local).value(), local_rank);
                EXPECT_TRUE(g.ok()) << g.status().to_string();
                if (g.ok()) body(*g.value());
            } else {
                ADD_FAILURE() << "rank " << r << ": " << all.status().to_string() << " / " << local.status().to_string();
            }
            done.arrive_and_wait();
        });
    }
    for (auto& t : threads) t.join();
}

// Messages inside a node go through shared memory (the local groups have the only rings),
// across nodes over Gloo; collectives over Gloo.
TEST(ProcessGroupHybridTest, P2pTakesSharedMemoryInsideANodeAndGlooAcross) {
    run_hybrid_ranks(Backend::kGloo, [](ProcessGroup& g) {
        EXPECT_EQ(g.backend_name(), "gloo+shm");
        check_ring_p2p(g, 65'537, 7);  // 0→1, 2→3 through shm; 1→2, 3→0 over Gloo
        std::vector<float> ones(8, 1.0f);
        ASSERT_TRUE(g.all_reduce(ones).ok());
        EXPECT_EQ(ones[0], static_cast<float>(g.size()));
    });
}

// Routing: here the whole group has no point-to-point at all, so a message to the node partner
// succeeds only through the local group, and one across nodes reaches the whole group and
// says so.
TEST(ProcessGroupHybridTest, OnlyPeersOnOtherNodesGoThroughTheWholeGroup) {
    run_hybrid_ranks(Backend::kShm, [](ProcessGroup& g) {
        const int r = g.rank(), partner = r ^ 1, elsewhere = (r + 2) % g.size();
        std::vector<std::uint8_t> out(5000, static_cast<std::uint8_t>(r)), in(5000, 0);
        auto recv = g.irecv(in, partner, 3);
        auto send = g.isend(out, partner, 3);
        ASSERT_TRUE(recv.ok() && send.ok());
        EXPECT_TRUE(send.value()->wait(milliseconds(10'000)).ok());
        EXPECT_TRUE(recv.value()->wait(milliseconds(10'000)).ok());
        EXPECT_EQ(in[4999], static_cast<std::uint8_t>(partner));
        auto across = g.isend(out, elsewhere, 3);
        EXPECT_EQ(across.status().code(), StatusCode::kUnimplemented) << across.status().to_string();
    });
}

TEST(ProcessGroupHybridTest, LocalRanksMustMatchTheGroup) {
    auto g = make_hybrid_group(make_single_group("a"), make_single_group("b"), {0, -1});
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().to_string();
}

// ---- failures ----------------------------------------------------------------------------------

class ProcessGroupTimeoutTest : public ::testing::TestWithParam<Backend> {};

// One rank never joins the all_reduce: the others get an error naming the op within the timeout.
TEST_P(ProcessGroupTimeoutTest, MissingRankYieldsDeadlineExceeded) {
    const Backend backend = GetParam();
    constexpr int kRanks = 3;
    std::atomic<int> deadline_errors{0};
    std::latch others_done(kRanks - 1);
    run_ranks(backend, StoreKind::kTcp, kRanks, milliseconds(500), [&](ProcessGroup& g) {
        if (g.rank() == kRanks - 1) {
            others_done.wait();  // stalls: never issues the all_reduce
            return;
        }
        std::vector<float> data(1024, 1.f);
        const auto t0 = Clock::now();
        Status s = g.all_reduce(data);
        const auto waited = Clock::now() - t0;
        EXPECT_FALSE(s.ok());
        // Gloo: the rank whose wait expires reports DeadlineExceeded and closes its pairs, so a
        // peer may see the closed connection (Unavailable) first.
        EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded ||
                    s.code() == StatusCode::kUnavailable)
            << s.to_string();
        if (s.code() == StatusCode::kDeadlineExceeded) deadline_errors++;
        EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s.message();
        EXPECT_NE(s.message().find("#1"), std::string::npos) << s.message();
        EXPECT_LT(waited, milliseconds(3000));
        if (backend == Backend::kShm) {
            EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
            EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
        }
        // The group is now unusable and says so immediately.
        const auto t1 = Clock::now();
        Status again = g.barrier();
        EXPECT_FALSE(again.ok());
        EXPECT_LT(Clock::now() - t1, milliseconds(100));
        others_done.count_down();
    });
    EXPECT_GE(deadline_errors.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, ProcessGroupTimeoutTest,
                         ::testing::Values(Backend::kGloo, Backend::kShm),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                             return to_string(info.param);
                         });

class ProcessGroupDeadPeerTest : public ::testing::TestWithParam<Backend> {};

// Rank 1 is a separate process that joins the group and exits: rank 0 must fail, not hang.
TEST_P(ProcessGroupDeadPeerTest, PeerProcessExitFailsCollective) {
    const Backend backend = GetParam();
    int port = 0;
    auto server = tcp_store_server(&port);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    const std::string name = unique_name();
    // Rank 1 waits until rank 0 has its group too, then dies without joining any collective.
    const pid_t child = fork_rank1(backend, port, two_ranks(name, 1), true);
    ASSERT_GE(child, 0);
    auto g = make_group(backend, *server.value(), two_ranks(name, 0));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(server.value()->set("rank0_ready", {1}).ok());
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
    std::vector<float> data(4096, 1.f);
    const auto t0 = Clock::now();
    Status s = g.value()->all_reduce(data);
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)
        << s.to_string();
    EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s.message();
    // Detected through the closed socket (gloo) or the pid check (shm), well before the timeout.
    EXPECT_LT(waited, 1500) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Backends, ProcessGroupDeadPeerTest,
                         ::testing::Values(Backend::kGloo, Backend::kShm),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                             return to_string(info.param);
                         });

TEST(ProcessGroupShmTest, MismatchedCollectivesAreReported) {
    run_ranks(Backend::kShm, StoreKind::kHash, 2, milliseconds(2000), [](ProcessGroup& g) {
        std::vector<float> data(16, 1.f);
        Status s = g.rank() == 0 ? g.all_reduce(data) : g.barrier();
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
        EXPECT_NE(s.message().find("mismatch"), std::string::npos) << s.message();
    });
}

TEST(ProcessGroupShmTest, SegmentNameIsUnlinkedAfterSetup) {
    run_ranks(Backend::kShm, StoreKind::kHash, 2, milliseconds(2000), [](ProcessGroup& g) {
        ASSERT_TRUE(g.barrier().ok());
        if (g.rank() == 0) {
            const std::string prefix = fmt::format("tessera-{}-", ::getpid());
            // No segment of this process remains visible in /dev/shm once every rank attached.
            for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
                EXPECT_NE(entry.path().filename().string().rfind(prefix, 0), 0u) << entry.path();
            }
        }
    });
}

// ---- single group and base-class defaults ------------------------------------------------------

TEST(ProcessGroupSingleTest, CollectivesAreIdentity) {
    auto g = make_single_group("solo");
    EXPECT_EQ(g->size(), 1);
    EXPECT_EQ(g->backend_name(), "single");
    std::vector<float> data{1.f, 2.f, 3.f};
    ASSERT_TRUE(g->all_reduce(data, ReduceOp::kMax).ok());
    EXPECT_EQ(data, (std::vector<float>{1.f, 2.f, 3.f}));
    std::vector<std::int64_t> ints{std::int64_t{1} << 50, -2};
    ASSERT_TRUE(g->all_reduce(std::span<std::int64_t>(ints)).ok());
    EXPECT_EQ(ints, (std::vector<std::int64_t>{std::int64_t{1} << 50, -2}));
    std::vector<float> out(3);
    ASSERT_TRUE(g->all_gather(data, out).ok());
    EXPECT_EQ(out, data);
    ASSERT_TRUE(g->reduce_scatter(data, out).ok());
    EXPECT_EQ(out, data);
    std::vector<std::uint8_t> send{1, 2, 3}, recv(3);
    std::vector<std::int64_t> counts{3};
    ASSERT_TRUE(g->all_to_all_v(send, counts, recv, counts).ok());
    EXPECT_EQ(recv, send);
    ASSERT_TRUE(g->broadcast(recv, 0).ok());
    ASSERT_TRUE(g->barrier().ok());
    auto w = g->isend(send, 0, 0);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(w.status().message().find("process group 'single' does not support isend"),
              std::string::npos)
        << w.status().message();
}

}  // namespace
}  // namespace tessera::dist
