// bench/collectives_bench.cpp — bench_collectives: latency (8 KB, median of ≥ 200 iterations)
// and bandwidth (64 MB, median of ≥ 3) of all_reduce, all_gather, all_to_all_v and a
// point-to-point round trip (`ping_pong`: rank 0 sends, rank 1 sends the same bytes back, as
// a pipeline's hidden states and sampled tokens travel) on the gloo and shm process groups
// (shm with the pipeline's 4 MB rings), with 2 ranks as 2 processes on one host. Rank 0 hosts a
// TcpStore on a free loopback port and re-executes this binary as rank 1
// (`--rank 1 --port P`). Rank 0 prints one JSON line per (backend, op, size) on stdout.
// "bytes" is the per-rank buffer of the op: all_reduce data, all_gather output (input is
// bytes / ranks), all_to_all_v send buffer (bytes / ranks to each rank).

#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/logging.h"
#include "dist/process_group.h"
#include "dist/store.h"

namespace {

using namespace tessera;
using namespace tessera::dist;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 2;
constexpr std::size_t kSmall = 8 * 1024;
constexpr std::size_t kLarge = 64ull << 20;
constexpr int kSmallIters = 300;
constexpr int kLargeIters = 5;

struct Args {
    int rank = 0;
    int port = 0;
};

bool parse(int argc, char** argv, Args& args) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--rank" && i + 1 < argc) {
            args.rank = std::atoi(argv[++i]);
        } else if (a == "--port" && i + 1 < argc) {
            args.port = std::atoi(argv[++i]);
        } else {
            return false;
        }
    }
    return true;
}

// Runs `op` `iters` times after `warmup` calls; returns per-iteration seconds (sorted) and
// their mean (back-to-back throughput: a rank that finds its peer already waiting returns
// faster than a full round trip, so the median alone flatters pipelined ops).
std::vector<double> time_op(const std::function<Status()>& op, int warmup, int iters, bool& ok,
                            double& mean) {
    std::vector<double> t;
    for (int i = 0; i < warmup + iters; ++i) {
        const auto t0 = Clock::now();
        Status s = op();
        const auto t1 = Clock::now();
        if (!s.ok()) {
            TSR_LOG_C(ERROR, "bench", "{}", s.to_string());
            ok = false;
            return t;
        }
        if (i >= warmup) t.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    double sum = 0;
    for (double x : t) sum += x;
    mean = sum / static_cast<double>(t.size());
    std::sort(t.begin(), t.end());
    return t;
}

double pct(const std::vector<double>& sorted, double p) {
    return sorted[static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1))];
}

int run(const Args& args) {
    std::unique_ptr<Store> store;
    pid_t child = -1;
    if (args.rank == 0) {
        TcpStoreOptions o;
        o.is_server = true;
        int port = 0;
        auto s = make_tcp_store(o, &port);
        if (!s.ok()) {
            TSR_LOG_C(ERROR, "bench", "{}", s.status().to_string());
            return 1;
        }
        store = std::move(s).value();
        child = ::fork();
        if (child == 0) {
            std::string port_text = std::to_string(port);
            const char* argv[] = {"bench_collectives", "--rank", "1", "--port",
                                  port_text.c_str(),   nullptr};
            ::execv("/proc/self/exe", const_cast<char* const*>(argv));
            ::_exit(127);
        }
    } else {
        TcpStoreOptions o;
        o.port = args.port;
        auto s = make_tcp_store(o);
        if (!s.ok()) {
            TSR_LOG_C(ERROR, "bench", "{}", s.status().to_string());
            return 1;
        }
        store = std::move(s).value();
    }

    bool ok = true;
    for (const char* backend : {"gloo", "shm"}) {
        ProcessGroupOptions o;
        o.name = fmt::format("bench_{}", backend);
        o.rank = args.rank;
        o.size = kRanks;
        o.timeout = std::chrono::milliseconds(60'000);
        o.p2p_buffer_bytes = std::size_t{4} << 20;
        auto g =
            std::string(backend) == "gloo" ? make_gloo_group(*store, o) : make_shm_group(*store, o);
        if (!g.ok()) {
            TSR_LOG_C(ERROR, "bench", "{}", g.status().to_string());
            return 1;
        }
        ProcessGroup& pg = *g.value();
        for (const char* op : {"all_reduce", "all_gather", "all_to_all_v", "ping_pong"}) {
            for (std::size_t bytes : {kSmall, kLarge}) {
                const std::size_t floats = bytes / sizeof(float);
                std::vector<float> a(floats, 1.0f), b(floats, 0.0f);
                std::vector<std::uint8_t> send(bytes, 1), recv(bytes, 0);
                std::vector<std::int64_t> counts(kRanks, static_cast<std::int64_t>(bytes / kRanks));
                std::function<Status()> fn;
                std::string name = op;
                if (name == "all_reduce") {
                    fn = [&] { return pg.all_reduce(a); };
                } else if (name == "all_gather") {
                    fn = [&] {
                        return pg.all_gather(std::span<const float>(a.data(), floats / kRanks), b);
                    };
                } else if (name == "all_to_all_v") {
                    fn = [&] { return pg.all_to_all_v(send, counts, recv, counts); };
                } else {
                    const int peer = 1 - args.rank;
                    auto transfer = [&](bool sending) -> Status {
                        auto w = sending ? pg.isend(send, peer, 1) : pg.irecv(recv, peer, 1);
                        if (!w.ok()) return w.status();
                        return w.value()->wait(std::chrono::milliseconds(60'000));
                    };
                    fn = [&, transfer]() -> Status {
                        TSR_RETURN_IF_ERROR(transfer(args.rank == 0));
                        return transfer(args.rank != 0);
                    };
                }
                const bool small = bytes == kSmall;
                Status sync = pg.barrier();
                if (!sync.ok()) {
                    TSR_LOG_C(ERROR, "bench", "{}", sync.to_string());
                    return 1;
                }
                double mean = 0;
                // A round trip is a few µs once both processes spin on their own cores; the
                // first few hundred wait on the scheduler to place them there.
                const int warmup = !small ? 1 : name == "ping_pong" ? 600 : 20;
                auto t = time_op(fn, warmup, small ? kSmallIters : kLargeIters, ok, mean);
                if (!ok) {
                    fmt::print(
                        "{{\"bench\":\"collectives\",\"backend\":\"{}\",\"op\":\"{}\",\"bytes\":{},"
                        "\"ranks\":{},\"error\":\"failed, see stderr\"}}\n",
                        backend, op, bytes, kRanks);
                    return 1;
                }
                if (args.rank == 0) {
                    const double median = pct(t, 0.5);
                    fmt::print(
                        "{{\"bench\":\"collectives\",\"backend\":\"{}\",\"op\":\"{}\",\"bytes\":{},"
                        "\"ranks\":{},"
                        "\"iters\":{},\"median_us\":{:.2f},\"mean_us\":{:.2f},\"p10_us\":{:.2f},"
                        "\"p90_us\":{:.2f},\"algbw_GBps\":{:.3f}}}\n",
                        backend, op, bytes, kRanks, t.size(), median * 1e6, mean * 1e6,
                        pct(t, 0.1) * 1e6, pct(t, 0.9) * 1e6, static_cast<double>(bytes) / median / 1e9);
                    std::fflush(stdout);
                }
            }
        }
        Status s = pg.barrier();
        if (!s.ok()) {
            TSR_LOG_C(ERROR, "bench", "{}", s.to_string());
            return 1;
        }
    }
    if (child > 0) {
        int status = 0;
        ::waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            TSR_LOG_C(ERROR, "bench", "rank 1 exited with status {}", status);
            return 1;
        }
    }
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    Args args;
    if (!parse(argc, argv, args) || args.rank < 0 || args.rank >= kRanks ||
        (args.rank > 0 && args.port <= 0)) {
        TSR_LOG_C(ERROR, "bench",
                  "usage: bench_collectives [--rank 1 --port P]  (rank 0 starts rank 1 itself)");
        return 2;
    }
    return run(args);
}
