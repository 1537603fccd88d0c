#pragma once
// net/http_client.h — a small blocking HTTP/1.1 client over POSIX sockets for the
// benchmark tools and the gateway: one connection per request ("Connection: close"), or
// kept-alive connections reused through a ConnectionPool; http://host:port only,
// bodies with Content-Length, chunked transfer encoding or read-until-close, and a parser
// for Server-Sent Events `data:` lines. Each call owns its socket, so calls are safe from
// any number of threads at once; the decoders below belong to one stream (not thread-safe).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::net {

// http://host[:port][/prefix]; the prefix (without a trailing '/') is put before every path.
struct HttpEndpoint {
    std::string host;
    int port = 80;
    std::string path_prefix;  // "" or "/something"
};

StatusOr<HttpEndpoint> parse_http_url(std::string_view url);

struct HttpRequest {
    std::string method = "GET";
    std::string path = "/";  // appended to the endpoint's path_prefix
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers
    std::chrono::milliseconds timeout{600'000};                // connect, and each read / write
};

// Called with each piece of the decoded body as it arrives; return false to stop reading.
using BodySink = std::function<bool(std::string_view)>;

struct HttpResponseHead {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
};

// Idle kept-alive connections per endpoint, for a caller that makes many requests to the
// same servers (the gateway): no connect per request, and no socket left in TIME_WAIT per
// request. A connection goes back to the pool only after a response that ended on its
// framing (Content-Length or the last chunk) and did not say "Connection: close"; one whose
// sink stopped early is closed, which tells the server the client left. Thread-safe.
class ConnectionPool {
 public:
    explicit ConnectionPool(std::size_t max_idle_per_endpoint = 64,
                            std::chrono::milliseconds max_idle_time = std::chrono::milliseconds(20'000));
    ~ConnectionPool();
    ConnectionPool(const ConnectionPool&) = delete;
    ConnectionPool& operator=(const ConnectionPool&) = delete;

    std::size_t idle_count() const;

 private:
    friend Status http_call(const HttpEndpoint&, const HttpRequest&, HttpResponseHead*, const BodySink&,
                            ConnectionPool*);
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Sends `request` to `endpoint` (prefix + request.path) and streams the decoded body into
// `sink`. Fails on connect / I/O / timeout / malformed response; a non-2xx status is not a
// failure here (look at head.status). With a pool, an idle connection is reused; one the
// server closed meanwhile is replaced by a new connection before any answer was read.
Status http_call(const HttpEndpoint& endpoint, const HttpRequest& request, HttpResponseHead* head,
                 const BodySink& sink, ConnectionPool* pool = nullptr);

// The whole body in one string (for small responses such as GET /v1/models).
struct HttpResponse {
    int status = 0;
    std::string body;
};
StatusOr<HttpResponse> http_fetch(const HttpEndpoint& endpoint, const HttpRequest& request);

// Incremental decoder of a chunked body ("<hex>[;ext]\r\n<bytes>\r\n ... 0\r\n\r\n").
class ChunkedDecoder {
 public:
    // Feeds raw bytes; decoded bytes go to `out`. Fails on malformed framing.
    Status feed(std::string_view bytes, const BodySink& out);
    bool done() const { return state_ == State::kDone; }
    bool stopped() const { return stopped_; }  // the sink returned false

 private:
    enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
    State state_ = State::kSize;
    std::string line_;             // the size line or trailer line being read
    std::uint64_t remaining_ = 0;  // data bytes left in the current chunk
    bool stopped_ = false;
};

// Splits a text/event-stream body into events: the payload of every `data:` line (one
// leading space stripped, "\r\n" or "\n" line ends). Other fields and comments are ignored.
class SseParser {
 public:
    // Returns the `data:` payloads completed by `bytes`.
    std::vector<std::string> feed(std::string_view bytes);

 private:
    std::string pending_;  // an unfinished line
};

}  // namespace tessera::net
