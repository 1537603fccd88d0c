// dist/store.cpp — HashStore (in process), PrefixStore, and TcpStore (a small blocking KV
// server: one thread per client connection, GET waits server-side until the key is set).
// Wire format (little endian, one request → one response per connection at a time):
//   hello    = u32 "TSRJ" | u32 token_len | token       (first, when the server has a token)
//   request  = u8 op | u32 key_len | key | u64 arg | [u64 value_len | value]   (value: SET only)
//   response = u8 code | u64 payload_len | payload
// arg is the GET timeout in ms or the ADD delta; code is a ReplyCode. A connection whose hello
// is missing, late or carries another token is closed before it can read or write a key: only
// the job's own processes share its store.

#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "dist/store_wire.h"

namespace tessera::dist {
namespace {

using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------------------
// KvTable: the map + condition variable shared by HashStore and the TcpStore server.
class KvTable {
 public:
    void set(const std::string& key, const Bytes& value) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            map_[key] = value;
        }
        cv_.notify_all();
    }

    // Waits until `key` exists, `timeout` passes or `stop` becomes true.
    StatusOr<Bytes> get(const std::string& key, std::chrono::milliseconds timeout,
                        const std::atomic<bool>* stop = nullptr) {
        std::unique_lock<std::mutex> lock(mu_);
        const auto deadline = Clock::now() + timeout;
        while (true) {
            auto it = map_.find(key);
            if (it != map_.end()) return it->second;
            if (stop != nullptr && stop->load()) {
                return Status(
                    StatusCode::kUnavailable,
                    fmt::format("store is shutting down while waiting for key '{}'", key));
            }
            if (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
                map_.find(key) == map_.end()) {
                return Status(StatusCode::kDeadlineExceeded,
                              fmt::format("store get('{}') timed out after {} ms; is every "
                                          "rank running and using the same store?",
                                          key, timeout.count()));
            }
        }
    }

    StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) {
        std::int64_t value = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = map_.find(key);
            if (it != map_.end()) {
                std::string text(it->second.begin(), it->second.end());
                char* end = nullptr;
                errno = 0;
                value = std::strtoll(text.c_str(), &end, 10);
                if (text.empty() || errno != 0 || *end != '\0') {
                    return Status::InvalidArgument(fmt::format(
                        "store add('{}'): existing value '{}' is not an integer", key, text));
                }
            }
            if (__builtin_add_overflow(value, delta, &value))
                return Status::InvalidArgument(fmt::format("store add('{}'): the sum overflows 64 bits", key));
            std::string text = std::to_string(value);
            map_[key] = Bytes(text.begin(), text.end());
        }
        cv_.notify_all();
        return value;
    }

    bool check(const std::string& key) {
        std::lock_guard<std::mutex> lock(mu_);
        return map_.count(key) != 0;
    }

    // Wakes waiters so they re-check their stop flag (taking the lock closes the race with a
    // waiter that checked the flag but has not started waiting yet).
    void wake_all() {
        std::lock_guard<std::mutex> lock(mu_);
        cv_.notify_all();
    }

 private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, Bytes> map_;  // GUARDED_BY(mu_)
};

// ------------------------------------------------------------------------------------------
class HashStore final : public Store {
 public:
    Status set(const std::string& key, const Bytes& value) override {
        table_.set(key, value);
        return Status::Ok();
    }
    StatusOr<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
        return table_.get(key, timeout);
    }
    StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) override {
        return table_.add(key, delta);
    }
    StatusOr<bool> check(const std::string& key) override { return table_.check(key); }

 private:
    KvTable table_;
};

// ------------------------------------------------------------------------------------------
class PrefixStore final : public Store {
 public:
    PrefixStore(std::string prefix, Store& base) : prefix_(std::move(prefix) + "/"), base_(base) {}
    Status set(const std::string& key, const Bytes& value) override {
        return base_.set(prefix_ + key, value);
    }
    StatusOr<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
        return base_.get(prefix_ + key, timeout);
    }
    StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) override {
        return base_.add(prefix_ + key, delta);
    }
    StatusOr<bool> check(const std::string& key) override { return base_.check(prefix_ + key); }

 private:
    const std::string prefix_;
    Store& base_;
};

// ------------------------------------------------------------------------------------------
// Socket helpers.

using store_wire::kHelloMagic;
using store_wire::Op;
constexpr auto kHelloTimeout = std::chrono::seconds(10);
enum class ReplyCode : std::uint8_t { kOk = 0, kDeadline = 1, kError = 2 };

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd = o.fd;
            o.fd = -1;
        }
        return *this;
    }
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

// Writes all of `n` bytes; false on a broken connection.
bool send_all(int fd, const void* data, size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

// Reads exactly `n` bytes. With a deadline, waits at most until then (returns kDeadline).
enum class RecvResult { kOk, kClosed, kDeadline };
RecvResult recv_all(int fd, void* data, size_t n,
                    Clock::time_point deadline = Clock::time_point::max()) {
    auto* p = static_cast<std::uint8_t*>(data);
    while (n > 0) {
        if (deadline != Clock::time_point::max()) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return RecvResult::kDeadline;
            pollfd pfd{fd, POLLIN, 0};
            int r =
                ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30)));
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) return RecvResult::kDeadline;
            if (r < 0) return RecvResult::kClosed;
        }
        ssize_t got = ::recv(fd, p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return RecvResult::kClosed;
        p += got;
        n -= static_cast<size_t>(got);
    }
    return RecvResult::kOk;
}

void put_u8(Bytes& b, std::uint8_t v) { b.push_back(v); }
void put_u32(Bytes& b, std::uint32_t v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + 4);
}
void put_u64(Bytes& b, std::uint64_t v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + 8);
}

void set_nodelay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

StatusOr<addrinfo*> resolve(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (passive) hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    std::string port_text = std::to_string(port);
    int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
        return Status::InvalidArgument(
            fmt::format("tcp store: cannot resolve '{}:{}': {}", host, port, gai_strerror(rc)));
    }
    return res;
}

// ------------------------------------------------------------------------------------------
// TcpStore server: also a Store itself (the hosting rank talks to the table directly).
class TcpStoreServer final : public Store {
 public:
    ~TcpStoreServer() override { stop(); }

    Status start(const TcpStoreOptions& options) {
        token_ = options.token;
        TSR_ASSIGN_OR_RETURN(addrinfo * res, resolve(options.host, options.port, true));
        Status last = Status(StatusCode::kUnavailable, "no address");
        for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
            Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
            if (fd.fd < 0) continue;
            int one = 1;
            ::setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (::bind(fd.fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.fd, 512) != 0) {
                last = Status(StatusCode::kUnavailable,
                              fmt::format("tcp store: cannot listen on {}:{}: {}", options.host,
                                          options.port, std::strerror(errno)));
                continue;
            }
            sockaddr_storage addr{};
            socklen_t len = sizeof(addr);
            ::getsockname(fd.fd, reinterpret_cast<sockaddr*>(&addr), &len);
            port_ = addr.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
            listen_fd_ = std::move(fd);
            break;
        }
        ::freeaddrinfo(res);
        if (listen_fd_.fd < 0) return last;
        accept_thread_ = std::thread([this] { accept_loop(); });
        return Status::Ok();
    }

    int port() const { return port_; }

    // Store
    Status set(const std::string& key, const Bytes& value) override {
        table_.set(key, value);
        return Status::Ok();
    }
    StatusOr<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
        return table_.get(key, timeout, &stop_);
    }
    StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) override {
        return table_.add(key, delta);
    }
    StatusOr<bool> check(const std::string& key) override { return table_.check(key); }

 private:
    void stop() {
        if (stop_.exchange(true)) return;
        if (listen_fd_.fd >= 0) ::shutdown(listen_fd_.fd, SHUT_RDWR);
        if (accept_thread_.joinable()) accept_thread_.join();
        std::vector<std::thread> threads;
        {
            std::lock_guard<std::mutex> lock(conn_mu_);
            for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
            threads = std::move(conn_threads_);
        }
        table_.wake_all();
        for (auto& t : threads) t.join();
        std::lock_guard<std::mutex> lock(conn_mu_);
        for (int fd : conn_fds_) ::close(fd);
        conn_fds_.clear();
    }

    void accept_loop() {
        while (!stop_.load()) {
            int fd = ::accept4(listen_fd_.fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (stop_.load()) return;
                if (errno == EMFILE || errno == ENFILE) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                    continue;
                }
                return;
            }
            set_nodelay(fd);
            std::lock_guard<std::mutex> lock(conn_mu_);
            if (stop_.load()) {
                ::close(fd);
                return;
            }
            conn_fds_.push_back(fd);
            conn_threads_.emplace_back([this, fd] { serve(fd); });
        }
    }

    // True when the client's first message is the job's token (or the store has none).
    bool admitted(int fd) {
        if (token_.empty()) return true;
        const auto deadline = Clock::now() + kHelloTimeout;
        const std::optional<std::string> token = store_wire::read_hello(
            [&](void* data, std::size_t n) { return recv_all(fd, data, n, deadline) == RecvResult::kOk; });
        const bool ok = token && store_wire::same_token(*token, token_);
        if (!ok) {
            sockaddr_storage peer{};
            socklen_t peer_len = sizeof(peer);
            char host[NI_MAXHOST] = "?";
            if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0)
                ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_len, host, sizeof(host), nullptr, 0,
                              NI_NUMERICHOST);
            TSR_LOG_C(WARN, "store", "rendezvous store: dropped a connection from {} that did not present this "
                                     "job's token", host);
        }
        return ok;
    }

    // Serves one client connection until it closes or the server stops.
    void serve(int fd) {
        if (!admitted(fd)) {
            ::shutdown(fd, SHUT_RDWR);
            return;
        }
        const store_wire::ReadFn read = [fd](void* data, std::size_t n) {
            return recv_all(fd, data, n) == RecvResult::kOk;
        };
        while (!stop_.load()) {
            std::optional<store_wire::Request> request = store_wire::read_request(read);
            if (!request) return;  // closed, or a protocol error: drop the connection
            const std::string& key = request->key;
            const std::uint64_t arg = request->arg;
            ReplyCode code = ReplyCode::kOk;
            Bytes payload;
            switch (request->op) {
                case Op::kSet:
                    table_.set(key, request->value);
                    break;
                case Op::kGet: {
                    auto r = table_.get(key, request->get_wait(), &stop_);
                    if (r.ok()) {
                        payload = std::move(r).value();
                    } else {
                        code = r.status().code() == StatusCode::kDeadlineExceeded
                                   ? ReplyCode::kDeadline
                                   : ReplyCode::kError;
                        const auto& m = r.status().message();
                        payload.assign(m.begin(), m.end());
                    }
                    break;
                }
                case Op::kAdd: {
                    auto r = table_.add(key, static_cast<std::int64_t>(arg));
                    if (r.ok()) {
                        put_u64(payload, static_cast<std::uint64_t>(r.value()));
                    } else {
                        code = ReplyCode::kError;
                        const auto& m = r.status().message();
                        payload.assign(m.begin(), m.end());
                    }
                    break;
                }
                case Op::kCheck:
                    payload.push_back(table_.check(key) ? 1 : 0);
                    break;
            }
            Bytes reply;
            reply.reserve(9 + payload.size());
            put_u8(reply, static_cast<std::uint8_t>(code));
            put_u64(reply, payload.size());
            reply.insert(reply.end(), payload.begin(), payload.end());
            if (!send_all(fd, reply.data(), reply.size())) return;
        }
    }

    KvTable table_;
    std::string token_;
    std::atomic<bool> stop_{false};
    Fd listen_fd_;
    int port_ = 0;
    std::thread accept_thread_;
    std::mutex conn_mu_;
    std::vector<int> conn_fds_;              // GUARDED_BY(conn_mu_)
    std::vector<std::thread> conn_threads_;  // GUARDED_BY(conn_mu_)
};

// ------------------------------------------------------------------------------------------
// TcpStore client: one connection, requests serialized by a mutex.
class TcpStoreClient final : public Store {
 public:
    // Extra time the client waits beyond a GET's own timeout before declaring the server dead.
    static constexpr std::chrono::milliseconds kReplySlack{10'000};

    Status connect(const TcpStoreOptions& options) {
        address_ = fmt::format("{}:{}", options.host, options.port);
        const auto deadline = Clock::now() + options.connect_timeout;
        std::string last_error = "no attempt";
        auto backoff = std::chrono::milliseconds(5);
        while (true) {
            TSR_ASSIGN_OR_RETURN(addrinfo * res, resolve(options.host, options.port, false));
            for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
                Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
                if (fd.fd < 0) continue;
                if (::connect(fd.fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                    set_nodelay(fd.fd);
                    if (!options.token.empty()) {
                        Bytes hello;
                        put_u32(hello, kHelloMagic);
                        put_u32(hello, static_cast<std::uint32_t>(options.token.size()));
                        hello.insert(hello.end(), options.token.begin(), options.token.end());
                        if (!send_all(fd.fd, hello.data(), hello.size())) {
                            last_error = "the store closed the connection";
                            continue;
                        }
                    }
                    fd_ = std::move(fd);
                    break;
                }
                last_error = std::strerror(errno);
            }
            ::freeaddrinfo(res);
            if (fd_.fd >= 0) return Status::Ok();
            if (Clock::now() + backoff > deadline) {
                return Status(StatusCode::kUnavailable,
                              fmt::format("tcp store: cannot connect to {} within {} ms ({}); is "
                                          "the rank hosting the store (node 0) running?",
                                          address_, options.connect_timeout.count(), last_error));
            }
            std::this_thread::sleep_for(backoff);
            backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
        }
    }

    Status set(const std::string& key, const Bytes& value) override {
        Bytes req = request(Op::kSet, key, 0);
        put_u64(req, value.size());
        req.insert(req.end(), value.begin(), value.end());
        Bytes reply;
        return round_trip(req, key, std::chrono::milliseconds(0), reply);
    }

    StatusOr<Bytes> get(const std::string& key, std::chrono::milliseconds timeout) override {
        Bytes reply;
        TSR_RETURN_IF_ERROR(
            round_trip(request(Op::kGet, key, static_cast<std::uint64_t>(timeout.count())), key,
                       timeout, reply));
        return reply;
    }

    StatusOr<std::int64_t> add(const std::string& key, std::int64_t delta) override {
        Bytes reply;
        TSR_RETURN_IF_ERROR(round_trip(request(Op::kAdd, key, static_cast<std::uint64_t>(delta)),
                                       key, std::chrono::milliseconds(0), reply));
        if (reply.size() != 8) return Status::Internal("tcp store: malformed add reply");
        std::int64_t v = 0;
        std::memcpy(&v, reply.data(), 8);
        return v;
    }

    StatusOr<bool> check(const std::string& key) override {
        Bytes reply;
        TSR_RETURN_IF_ERROR(
            round_trip(request(Op::kCheck, key, 0), key, std::chrono::milliseconds(0), reply));
        if (reply.size() != 1) return Status::Internal("tcp store: malformed check reply");
        return reply[0] != 0;
    }

 private:
    static Bytes request(Op op, const std::string& key, std::uint64_t arg) {
        Bytes b;
        b.reserve(13 + key.size());
        put_u8(b, static_cast<std::uint8_t>(op));
        put_u32(b, static_cast<std::uint32_t>(key.size()));
        b.insert(b.end(), key.begin(), key.end());
        put_u64(b, arg);
        return b;
    }

    Status round_trip(const Bytes& req, const std::string& key, std::chrono::milliseconds wait,
                      Bytes& payload) {
        std::lock_guard<std::mutex> lock(mu_);
        if (fd_.fd < 0) {
            return Status(StatusCode::kUnavailable,
                          fmt::format("tcp store {}: connection was lost earlier", address_));
        }
        auto lost = [&](const char* what) {
            fd_.reset();
            return Status(StatusCode::kUnavailable,
                          fmt::format("tcp store {}: {} while handling key '{}'; did the rank "
                                      "hosting the store exit? (It also drops processes that do not "
                                      "present this job's token: every node needs the same "
                                      "TESSERA_JOB_TOKEN.)",
                                      address_, what, key));
        };
        if (!send_all(fd_.fd, req.data(), req.size())) return lost("send failed");
        const auto deadline = Clock::now() + wait + kReplySlack;
        std::uint8_t code = 0;
        std::uint64_t n = 0;
        RecvResult r = recv_all(fd_.fd, &code, 1, deadline);
        if (r == RecvResult::kOk) r = recv_all(fd_.fd, &n, 8, deadline);
        if (r == RecvResult::kOk) {
            payload.resize(n);
            r = recv_all(fd_.fd, payload.data(), n, deadline);
        }
        if (r == RecvResult::kClosed) return lost("connection closed");
        if (r == RecvResult::kDeadline) return lost("no reply from server");
        if (code == static_cast<std::uint8_t>(ReplyCode::kOk)) return Status::Ok();
        std::string message(payload.begin(), payload.end());
        return Status(code == static_cast<std::uint8_t>(ReplyCode::kDeadline)
                          ? StatusCode::kDeadlineExceeded
                          : StatusCode::kUnavailable,
                      fmt::format("tcp store {}: {}", address_, message));
    }

    std::mutex mu_;
    Fd fd_;  // GUARDED_BY(mu_)
    std::string address_;
};

}  // namespace

StatusOr<std::unique_ptr<Store>> make_tcp_store(const TcpStoreOptions& options, int* bound_port) {
    if (options.port < 0 || options.port > 65535 || (!options.is_server && options.port == 0)) {
        return Status::InvalidArgument(fmt::format(
            "tcp store: invalid port {} (clients need the server's port; servers may use 0)",
            options.port));
    }
    if (options.is_server) {
        auto server = std::make_unique<TcpStoreServer>();
        TSR_RETURN_IF_ERROR(server->start(options));
        if (bound_port != nullptr) *bound_port = server->port();
        return std::unique_ptr<Store>(std::move(server));
    }
    auto client = std::make_unique<TcpStoreClient>();
    TSR_RETURN_IF_ERROR(client->connect(options));
    if (bound_port != nullptr) *bound_port = options.port;
    return std::unique_ptr<Store>(std::move(client));
}

std::unique_ptr<Store> make_hash_store() { return std::make_unique<HashStore>(); }

std::unique_ptr<Store> make_prefix_store(std::string prefix, Store& base) {
    return std::make_unique<PrefixStore>(std::move(prefix), base);
}

}  // namespace tessera::dist
