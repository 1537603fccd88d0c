// Load test: 1000 concurrent SSE streams on one io thread against the fake backend. The
// clients are non-blocking sockets polled by one thread, so the test itself needs no
// thread per connection either.

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>

#include <gtest/gtest.h>

#include "server/http_server.h"
#include "server/http_test_support.h"

namespace tessera::server {
namespace {

using testing::FakeBackend;

constexpr int kStreams = 1000;
constexpr int kTokens = 50;

// Each connection's fds live in this process twice (client + server side).
bool raise_fd_limit(rlim_t want) {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
    if (rl.rlim_cur >= want) return true;
    if (rl.rlim_max < want) return false;
    rl.rlim_cur = want;
    return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

int connect_loopback(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

TEST(HttpServerLoadTest, ThousandConcurrentStreamsOnOneIoThread) {
    if (!raise_fd_limit(2 * kStreams + 256)) GTEST_SKIP() << "RLIMIT_NOFILE too low for " << kStreams << " streams";
    FakeBackend backend(std::chrono::milliseconds(20));
    backend.hold_until_active(kStreams);  // tokens flow once every stream is open
    HttpServerOptions options;
    options.port = 0;
    options.n_io_threads = 1;
    options.max_pending_requests = kStreams;
    HttpServer server(backend, options);
    ASSERT_TRUE(server.start().ok());

    const auto t0 = std::chrono::steady_clock::now();
    const std::string body = R"({"model": "tiny", "prompt": "x", "max_tokens": )" + std::to_string(kTokens) +
                             R"(, "stream": true})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    std::vector<pollfd> fds;
    std::vector<std::string> received(kStreams);
    for (int i = 0; i < kStreams; ++i) {
        const int fd = connect_loopback(server.port());
        ASSERT_GE(fd, 0) << "connection " << i;
        ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        fds.push_back(pollfd{.fd = fd, .events = POLLIN, .revents = 0});
    }

    // A stream is complete when its last chunk ("0\r\n\r\n") arrived after [DONE].
    int n_done = 0;
    std::vector<bool> done(kStreams, false);
    const auto deadline = t0 + std::chrono::seconds(20);
    char buf[65536];
    while (n_done < kStreams && std::chrono::steady_clock::now() < deadline) {
        if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
        for (int i = 0; i < kStreams; ++i) {
            if (done[i] || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            for (;;) {
                const ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), 0);
                if (n <= 0) break;
                received[i].append(buf, static_cast<std::size_t>(n));
            }
            const std::string& r = received[i];
            if (r.size() >= 5 && r.compare(r.size() - 5, 5, "0\r\n\r\n") == 0 &&
                r.find("data: [DONE]") != std::string::npos) {
                done[i] = true;
                fds[i].events = 0;
                ++n_done;
            }
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(n_done, kStreams) << "after " << seconds << " s";
    EXPECT_EQ(backend.max_active(), static_cast<std::size_t>(kStreams));

    int n_complete = 0;
    for (const std::string& r : received) {
        std::size_t n_events = 0;
        for (std::size_t p = r.find("data: {"); p != std::string::npos; p = r.find("data: {", p + 1)) ++n_events;
        if (r.rfind("HTTP/1.1 200", 0) == 0 && n_events == static_cast<std::size_t>(kTokens)) ++n_complete;
    }
    EXPECT_EQ(n_complete, kStreams);
    for (const pollfd& p : fds) ::close(p.fd);
    server.stop();
    RecordProperty("seconds", std::to_string(seconds));
}

}  // namespace
}  // namespace tessera::server
