#include "net/http_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "base/text.h"

namespace tessera::net {

namespace {

// Owns one socket fd.
class Socket {
 public:
    explicit Socket(int fd) : fd_(fd) {}
    ~Socket() {
        if (fd_ >= 0) ::close(fd_);
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    int fd() const { return fd_; }

 private:
    int fd_;
};

std::string where(const HttpEndpoint& e) { return e.host + ":" + std::to_string(e.port); }

// Waits until `fd` is readable / writable; DeadlineExceeded after `timeout`.
Status wait_fd(int fd, short events, std::chrono::milliseconds timeout, const HttpEndpoint& e, const char* what) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(timeout.count(), 1 << 30)));
        if (r > 0) return Status::Ok();
        if (r == 0)
            return Status(StatusCode::kDeadlineExceeded, std::string(what) + " " + where(e) + " timed out after " +
                                                             std::to_string(timeout.count()) + " ms");
        if (errno != EINTR) return Status(StatusCode::kUnavailable, std::string("poll: ") + std::strerror(errno));
    }
}

StatusOr<std::unique_ptr<Socket>> connect_to(const HttpEndpoint& e, std::chrono::milliseconds timeout) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(e.port);
    const int rc = ::getaddrinfo(e.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) return Status(StatusCode::kUnavailable, "cannot resolve host '" + e.host + "': " + ::gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    std::string last_error = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        auto sock = std::make_unique<Socket>(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, ai->ai_protocol));
        if (sock->fd() < 0) {
            last_error = std::strerror(errno);
            continue;
        }
        int rcv = ::connect(sock->fd(), ai->ai_addr, ai->ai_addrlen);
        if (rcv != 0 && errno == EINPROGRESS) {
            Status w = wait_fd(sock->fd(), POLLOUT, timeout, e, "connecting to");
            if (!w.ok()) {
                last_error = w.message();
                continue;
            }
            int err = 0;
            socklen_t len = sizeof(err);
            ::getsockopt(sock->fd(), SOL_SOCKET, SO_ERROR, &err, &len);
            rcv = err == 0 ? 0 : -1;
            errno = err;
        }
        if (rcv != 0) {
            last_error = std::strerror(errno);
            continue;
        }
        const int one = 1;
        ::setsockopt(sock->fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return sock;
    }
    return Status(StatusCode::kUnavailable, "cannot connect to " + where(e) + ": " + last_error);
}

Status send_all(int fd, std::string_view data, std::chrono::milliseconds timeout, const HttpEndpoint& e) {
    while (!data.empty()) {
        const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n > 0) {
            data.remove_prefix(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            TSR_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, timeout, e, "sending to"));
            continue;
        }
        return Status(StatusCode::kUnavailable, "send to " + where(e) + " failed: " + std::strerror(errno));
    }
    return Status::Ok();
}

// Reads some bytes into `buf`; 0 bytes means the peer closed.
StatusOr<std::size_t> recv_some(int fd, char* buf, std::size_t cap, std::chrono::milliseconds timeout,
                                const HttpEndpoint& e) {
    for (;;) {
        const ssize_t n = ::recv(fd, buf, cap, 0);
        if (n >= 0) return static_cast<std::size_t>(n);
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            TSR_RETURN_IF_ERROR(wait_fd(fd, POLLIN, timeout, e, "reading from"));
            continue;
        }
        return Status(StatusCode::kUnavailable, "read from " + where(e) + " failed: " + std::strerror(errno));
    }
}

}  // namespace

StatusOr<HttpEndpoint> parse_http_url(std::string_view url) {
    constexpr std::string_view kScheme = "http://";
    if (url.substr(0, kScheme.size()) != kScheme)
        return Status::InvalidArgument("base URL '" + std::string(url) +
                                       "' must start with http:// (https is not supported), e.g. "
                                       "http://127.0.0.1:30000");
    url.remove_prefix(kScheme.size());
    HttpEndpoint e;
    const std::size_t slash = url.find('/');
    std::string_view authority = url.substr(0, slash);
    if (slash != std::string_view::npos) {
        std::string_view prefix = url.substr(slash);
        while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
        e.path_prefix = std::string(prefix);
    }
    std::string_view host = authority;
    if (!authority.empty() && authority.front() == '[') {  // [ipv6]:port
        const std::size_t close = authority.find(']');
        if (close == std::string_view::npos)
            return Status::InvalidArgument("bad IPv6 host in '" + std::string(url) + "'");
        host = authority.substr(1, close - 1);
        authority.remove_prefix(close + 1);
        if (!authority.empty() && authority.front() != ':')
            return Status::InvalidArgument("bad host:port in base URL '" + std::string(url) + "'");
    } else {
        const std::size_t colon = authority.rfind(':');
        host = authority.substr(0, colon);
        authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
    }
    if (host.empty()) return Status::InvalidArgument("base URL 'http://" + std::string(url) + "' has no host");
    e.host = std::string(host);
    if (!authority.empty()) {  // ":port"
        const std::string port(authority.substr(1));
        char* end = nullptr;
        const long p = std::strtol(port.c_str(), &end, 10);
        if (port.empty() || *end != '\0' || p <= 0 || p > 65535)
            return Status::InvalidArgument("bad port '" + port + "' in base URL; expected 1..65535");
        e.port = static_cast<int>(p);
    }
    return e;
}

Status ChunkedDecoder::feed(std::string_view bytes, const BodySink& out) {
    while (!bytes.empty() && state_ != State::kDone && !stopped_) {
        switch (state_) {
            case State::kSize:
            case State::kTrailer:
            case State::kDataEnd: {
                const std::size_t nl = bytes.find('\n');
                line_.append(bytes.substr(0, nl));
                if (nl == std::string_view::npos) return Status::Ok();
                bytes.remove_prefix(nl + 1);
                std::string_view line = trim_blanks(line_);
                if (state_ == State::kDataEnd) {
                    if (!line.empty()) return Status::DataLoss("chunked body: missing CRLF after a chunk");
                    state_ = State::kSize;
                } else if (state_ == State::kTrailer) {
                    if (line.empty()) state_ = State::kDone;
                } else {
                    line = line.substr(0, line.find(';'));
                    if (line.empty()) return Status::DataLoss("chunked body: empty chunk-size line");
                    std::uint64_t size = 0;
                    for (char c : line) {
                        const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                      : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                                      : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                                                  : -1;
                        if (d < 0 || size > (std::uint64_t{1} << 40))
                            return Status::DataLoss("chunked body: bad chunk size '" + std::string(line) + "'");
                        size = size * 16 + static_cast<std::uint64_t>(d);
                    }
                    remaining_ = size;
                    state_ = size == 0 ? State::kTrailer : State::kData;
                }
                line_.clear();
                break;
            }
            case State::kData: {
                const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, bytes.size()));
                if (!out(bytes.substr(0, n))) stopped_ = true;
                bytes.remove_prefix(n);
                remaining_ -= n;
                if (remaining_ == 0) state_ = State::kDataEnd;
                break;
            }
            case State::kDone:
                break;
        }
    }
    return Status::Ok();
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
    std::vector<std::string> events;
    pending_.append(bytes);
    std::size_t start = 0;
    for (std::size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(pending_.data() + start, nl - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.substr(0, 5) != "data:") continue;
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        events.emplace_back(line);
    }
    pending_.erase(0, start);
    return events;
}

namespace {

// One request and its response on `sock`. `*reusable` says whether the connection may carry
// another request (the body ended on its framing, nothing was left unread, the server keeps
// it open); `*answered` whether any byte of a response arrived.
Status exchange(Socket& sock, const HttpEndpoint& endpoint, const HttpRequest& request, bool keep_alive,
                HttpResponseHead* head, const BodySink& sink, bool* reusable, bool* answered) {
    *reusable = false;
    *answered = false;
    std::string msg = request.method + " " + endpoint.path_prefix + request.path + " HTTP/1.1\r\n";
    msg += "Host: " + endpoint.host + ":" + std::to_string(endpoint.port) + "\r\n";
    msg += keep_alive ? "User-Agent: tessera\r\nAccept: */*\r\nConnection: keep-alive\r\n"
                      : "User-Agent: tessera\r\nAccept: */*\r\nConnection: close\r\n";
    for (const auto& [name, value] : request.headers) msg += name + ": " + value + "\r\n";
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT")
        msg += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
    msg += "\r\n";
    msg += request.body;
    TSR_RETURN_IF_ERROR(send_all(sock.fd(), msg, request.timeout, endpoint));

    // Status line and headers.
    std::string buf;
    std::vector<char> io(64 * 1024);
    std::size_t header_end = std::string::npos;
    while ((header_end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (buf.size() > (1 << 20))
            return Status::DataLoss("response headers from " + where(endpoint) + " exceed 1 MiB");
        TSR_ASSIGN_OR_RETURN(std::size_t n, recv_some(sock.fd(), io.data(), io.size(), request.timeout, endpoint));
        if (n == 0)
            return Status(StatusCode::kUnavailable, "connection to " + where(endpoint) +
                                                        " closed before a complete response header (" +
                                                        std::to_string(buf.size()) + " bytes)");
        *answered = true;
        buf.append(io.data(), n);
    }
    const std::string header_text = buf.substr(0, header_end);
    std::string rest = buf.substr(header_end + 4);
    std::size_t line_end = header_text.find("\r\n");
    const std::string status_line = header_text.substr(0, line_end);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
        return Status::DataLoss("bad HTTP status line from " + where(endpoint) + ": '" + status_line + "'");
    HttpResponseHead h;
    h.status = std::atoi(status_line.c_str() + 9);
    bool chunked = false;
    bool server_closes = false;
    std::int64_t content_length = -1;
    while (line_end != std::string::npos) {
        const std::size_t next = header_text.find("\r\n", line_end + 2);
        std::string_view line(header_text.data() + line_end + 2,
                              (next == std::string::npos ? header_text.size() : next) - line_end - 2);
        line_end = next;
        const std::size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string name = ascii_lower(trim_blanks(line.substr(0, colon)));
        std::string value(trim_blanks(line.substr(colon + 1)));
        if (name == "transfer-encoding" && ascii_lower(value).find("chunked") != std::string::npos) chunked = true;
        if (name == "content-length") content_length = std::atoll(value.c_str());
        if (name == "connection" && ascii_lower(value).find("close") != std::string::npos) server_closes = true;
        h.headers.emplace_back(std::move(name), std::move(value));
    }
    if (head != nullptr) *head = h;
    const bool keeps_open = keep_alive && !server_closes;
    if (request.method == "HEAD" || h.status == 204 || h.status == 304) {
        *reusable = keeps_open && rest.empty();
        return Status::Ok();
    }

    // Body.
    ChunkedDecoder chunks;
    std::int64_t received = 0;
    bool stop = false;
    bool sink_stopped = false;
    bool surplus = false;  // bytes past the body's end: not a connection to reuse
    auto consume = [&](std::string_view bytes) -> Status {
        if (chunked) {
            TSR_RETURN_IF_ERROR(chunks.feed(bytes, sink));
            stop = chunks.done() || chunks.stopped();
            sink_stopped = chunks.stopped();
            return Status::Ok();
        }
        if (content_length >= 0) {
            const auto wanted = content_length - received;
            if (static_cast<std::int64_t>(bytes.size()) > wanted) surplus = true;
            bytes = bytes.substr(0, static_cast<std::size_t>(std::min<std::int64_t>(
                                        static_cast<std::int64_t>(bytes.size()), wanted)));
        }
        received += static_cast<std::int64_t>(bytes.size());
        if (!bytes.empty() && !sink(bytes)) stop = sink_stopped = true;
        if (content_length >= 0 && received >= content_length) stop = true;
        return Status::Ok();
    };
    if (content_length == 0 && !chunked) {
        *reusable = keeps_open && rest.empty();
        return Status::Ok();
    }
    if (!rest.empty()) TSR_RETURN_IF_ERROR(consume(rest));
    while (!stop) {
        TSR_ASSIGN_OR_RETURN(std::size_t n, recv_some(sock.fd(), io.data(), io.size(), request.timeout, endpoint));
        if (n == 0) {
            if (chunked || content_length >= 0)
                return Status(StatusCode::kUnavailable,
                              "connection to " + where(endpoint) + " closed in the middle of the response body");
            break;  // read-until-close body
        }
        TSR_RETURN_IF_ERROR(consume(std::string_view(io.data(), n)));
    }
    const bool framed = chunked ? chunks.done() : content_length >= 0 && received == content_length;
    *reusable = keeps_open && framed && !sink_stopped && !surplus;
    return Status::Ok();
}

}  // namespace

struct ConnectionPool::Impl {
    std::size_t max_idle;
    std::chrono::milliseconds max_idle_time;
    mutable std::mutex mu;
    // host:port → idle connections, most recently used last.
    std::map<std::string, std::vector<std::pair<std::unique_ptr<Socket>, std::chrono::steady_clock::time_point>>>
        idle;  // GUARDED_BY(mu)

    static std::string key(const HttpEndpoint& e) { return where(e); }

    // An idle connection the server has not closed meanwhile, or null.
    std::unique_ptr<Socket> take(const HttpEndpoint& e) {
        std::lock_guard<std::mutex> lock(mu);
        auto it = idle.find(key(e));
        if (it == idle.end()) return nullptr;
        auto& list = it->second;
        const auto now = std::chrono::steady_clock::now();
        while (!list.empty()) {
            auto [sock, since] = std::move(list.back());
            list.pop_back();
            if (now - since > max_idle_time) continue;
            // Readable while idle means closed (or junk): either way not reusable.
            pollfd p{sock->fd(), POLLIN, 0};
            if (::poll(&p, 1, 0) != 0) continue;
            return std::move(sock);
        }
        return nullptr;
    }

    void give(const HttpEndpoint& e, std::unique_ptr<Socket> sock) {
        std::lock_guard<std::mutex> lock(mu);
        auto& list = idle[key(e)];
        if (list.size() >= max_idle) list.erase(list.begin());
        list.emplace_back(std::move(sock), std::chrono::steady_clock::now());
    }
};

ConnectionPool::ConnectionPool(std::size_t max_idle_per_endpoint, std::chrono::milliseconds max_idle_time)
    : impl_(std::make_unique<Impl>()) {
    impl_->max_idle = max_idle_per_endpoint;
    impl_->max_idle_time = max_idle_time;
}

ConnectionPool::~ConnectionPool() = default;

std::size_t ConnectionPool::idle_count() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::size_t n = 0;
    for (const auto& [key, list] : impl_->idle) n += list.size();
    return n;
}

Status http_call(const HttpEndpoint& endpoint, const HttpRequest& request, HttpResponseHead* head,
                 const BodySink& sink, ConnectionPool* pool) {
    bool reusable = false, answered = false;
    if (pool == nullptr) {
        TSR_ASSIGN_OR_RETURN(std::unique_ptr<Socket> sock, connect_to(endpoint, request.timeout));
        return exchange(*sock, endpoint, request, false, head, sink, &reusable, &answered);
    }
    std::unique_ptr<Socket> sock = pool->impl_->take(endpoint);
    if (sock != nullptr) {
        Status s = exchange(*sock, endpoint, request, true, head, sink, &reusable, &answered);
        if (s.ok() || answered) {
            if (s.ok() && reusable) pool->impl_->give(endpoint, std::move(sock));
            return s;
        }
        // The server closed the idle connection before reading the request: a new one.
    }
    TSR_ASSIGN_OR_RETURN(sock, connect_to(endpoint, request.timeout));
    Status s = exchange(*sock, endpoint, request, true, head, sink, &reusable, &answered);
    if (s.ok() && reusable) pool->impl_->give(endpoint, std::move(sock));
    return s;
}

StatusOr<HttpResponse> http_fetch(const HttpEndpoint& endpoint, const HttpRequest& request) {
    HttpResponse r;
    HttpResponseHead head;
    TSR_RETURN_IF_ERROR(http_call(endpoint, request, &head, [&](std::string_view b) {
        r.body.append(b);
        return true;
    }));
    r.status = head.status;
    return r;
}

}  // namespace tessera::net
