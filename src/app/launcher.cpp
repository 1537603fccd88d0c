#include "app/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "base/env.h"
#include "base/logging.h"
#include "dist/store.h"

namespace tessera::app {

namespace {

std::atomic<int> g_stop_signal{0};
// How long ranks may take to drain in-flight work after SIGTERM.
constexpr std::chrono::seconds kDrainTimeout{120};

void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// fork + exec of this binary with `argv`; the child dies with the launcher.
StatusOr<pid_t> spawn(const std::vector<std::string>& argv) {
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Status::Internal(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);  // the launcher died before prctl took effect
        execv("/proc/self/exe", cargv.data());
        _exit(127);
    }
    return pid;
}

void terminate_all(const std::map<pid_t, int>& running) {
    for (const auto& [pid, rank] : running) kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::map<pid_t, int> left = running;
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            left.erase(pid);
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    for (const auto& [pid, rank] : left) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
}

}  // namespace

StatusOr<std::pair<std::string, int>> parse_host_port(const std::string& text, const char* flag) {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
        return Status::InvalidArgument(std::string(flag) + " " + text + " is not HOST:PORT (e.g. 127.0.0.1:29500)");
    try {
        std::size_t used = 0;
        const int port = std::stoi(text.substr(colon + 1), &used);
        if (used != text.size() - colon - 1 || port <= 0 || port > 65535) throw std::out_of_range(text);
        return std::make_pair(text.substr(0, colon), port);
    } catch (const std::exception&) {
        return Status::InvalidArgument(std::string(flag) + " " + text + ": the port must be a number in 1..65535");
    }
}

std::string job_token(const LaunchOptions& options) {
    if (!env().job_token.empty()) return env().job_token;
    std::uint64_t a = 0, b = 0;
    if (options.nnodes <= 1) {
        std::random_device rd;
        a = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
        b = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    } else {
        // FNV-1a twice (two offsets) over the arguments after the binary, --node-rank dropped.
        a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
        for (std::size_t i = 1; i < options.argv.size(); ++i) {
            const std::string& arg = options.argv[i];
            if (arg == "--node-rank") {
                ++i;
                continue;
            }
            if (arg.rfind("--node-rank=", 0) == 0) continue;
            for (unsigned char c : arg + '\0') {
                a = (a ^ c) * 0x100000001b3ull;
                b = (b ^ c) * 0x100000001b3ull + 1;
            }
        }
    }
    return fmt::format("{:016x}{:016x}", a, b);
}

int launch_local_ranks(const dist::ParallelLayout& layout, const LaunchOptions& options) {
    // Node 0 serves the rendezvous store for the whole world.
    std::unique_ptr<dist::Store> server;
    std::string store_addr = options.dist_init_addr;
    // The ranks inherit the token through the environment (not the command line, which
    // `ps` shows to every user of the host).
    const std::string token = job_token(options);
    ::setenv("TESSERA_JOB_TOKEN", token.c_str(), 1);
    if (options.node_rank == 0) {
        dist::TcpStoreOptions so;
        so.is_server = true;
        so.token = token;
        if (!store_addr.empty()) {
            auto hp = parse_host_port(store_addr, "--dist-init-addr");
            if (!hp.ok()) {
                TSR_LOG_C(ERROR, "launcher", "{}", hp.status().message());
                return 2;
            }
            so.host = hp->first;
            so.port = hp->second;
        }
        int bound = 0;
        auto store = dist::make_tcp_store(so, &bound);
        if (store.ok() && so.port == 0 && bound == options.http_port) {
            // The OS handed out the port the HTTP server is about to bind (free a moment
            // ago): take another one while this one is held, then let it go.
            int other_port = 0;
            auto other = dist::make_tcp_store(so, &other_port);
            if (other.ok()) {
                store = std::move(other);
                bound = other_port;
            }
        }
        if (!store.ok()) {
            TSR_LOG_C(ERROR, "launcher", "cannot serve the rendezvous store: {}", store.status().message());
            return 2;
        }
        server = std::move(store).value();
        store_addr = so.host + ":" + std::to_string(bound);
    }

    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    std::map<pid_t, int> running;  // pid → global rank
    for (int rank : layout.ranks_on_node(options.node_rank)) {
        std::vector<std::string> argv = options.argv;
        argv.insert(argv.end(), {"--internal-rank", std::to_string(rank), "--internal-store", store_addr});
        auto pid = spawn(argv);
        if (!pid.ok()) {
            TSR_LOG_C(ERROR, "launcher", "{}", pid.status().message());
            terminate_all(running);
            return 1;
        }
        running[*pid] = rank;
    }
    TSR_LOG_C(INFO, "launcher", "node {} started {} rank processes (world {}), rendezvous at {}", options.node_rank,
              running.size(), layout.world_size(), store_addr);

    int exit_code = 0;
    while (!running.empty()) {
        if (g_stop_signal.load() != 0) {
            // Graceful: the ranks drain on SIGTERM; a rank that does not finish in time is killed.
            const int sig = g_stop_signal.load();
            TSR_LOG_C(INFO, "launcher", "signal {}: stopping {} rank processes", sig, running.size());
            for (const auto& [pid, rank] : running) kill(pid, SIGTERM);
            const auto deadline = std::chrono::steady_clock::now() + kDrainTimeout;
            int code = 0;
            while (!running.empty() && std::chrono::steady_clock::now() < deadline) {
                int st = 0;
                const pid_t done = waitpid(-1, &st, WNOHANG);
                if (done <= 0) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                    continue;
                }
                if (running.erase(done) != 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) code = 128 + sig;
            }
            if (!running.empty()) {
                TSR_LOG_C(WARN, "launcher", "{} rank processes did not stop in time; killing them", running.size());
                terminate_all(running);
                return 128 + sig;
            }
            return code;
        }
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        auto it = running.find(pid);
        if (it == running.end()) continue;
        const int rank = it->second;
        running.erase(it);
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok) {
            if (WIFSIGNALED(status)) {
                TSR_LOG_C(ERROR, "launcher", "rank {} was killed by signal {}; stopping the other ranks", rank,
                          WTERMSIG(status));
            } else {
                TSR_LOG_C(ERROR, "launcher", "rank {} exited with code {}; stopping the other ranks", rank,
                          WEXITSTATUS(status));
            }
            exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
            terminate_all(running);
            return exit_code;
        }
    }
    return exit_code;
}

}  // namespace tessera::app
