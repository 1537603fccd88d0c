#pragma once
// gateway/http_wire.h — the server side of HTTP/1.1 as the gateway speaks it over blocking
// sockets: reading one request (head, then a Content-Length body), and the bytes of a
// response or of a chunked stream. Pure parsing and formatting plus two socket helpers.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::gateway {

struct RequestHead {
    std::string method;
    std::string target;  // path and query
    std::string path;    // without the query
    std::string query;
    int minor_version = 1;
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::int64_t content_length = 0;
    bool keep_alive = true;

    std::string header(std::string_view name) const;  // "" when absent
};

// Parses the head (request line and headers, without the final blank line). Errors carry the
// HTTP status to answer in their message prefix-free form; the caller answers 400.
StatusOr<RequestHead> parse_request_head(std::string_view head);

// The value of `key` in an application/x-www-form-urlencoded query ("" when absent).
std::string query_param(std::string_view query, std::string_view key);

const char* reason_phrase(int status);

// A complete response with Content-Length.
std::string response_bytes(int status, std::string_view content_type, std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra_headers, bool keep_alive);
// The head of a chunked response (a stream); each piece is then chunk_bytes(), the end "0\r\n\r\n".
std::string stream_head_bytes(int status, std::string_view content_type,
                              const std::vector<std::pair<std::string, std::string>>& extra_headers, bool keep_alive);
std::string chunk_bytes(std::string_view data);

// Reads one request from `fd`: its head (up to max_head bytes) and body (up to max_body).
// `buffer` carries bytes read past this request to the next one on the connection. Returns
// nullopt when the peer closed the connection cleanly between requests.
struct ReadRequest {
    RequestHead head;
    std::string body;
};
struct ReadLimits {
    std::size_t max_head = 16u << 10;
    std::size_t max_body = 32u << 20;
};
// An error's code says what to answer: OutOfRange → 413/431, InvalidArgument → 400,
// others → just close.
StatusOr<std::optional<ReadRequest>> read_request(int fd, std::string& buffer, const ReadLimits& limits);

// Writes all of `bytes`; false when the peer is gone or stalls past the socket's send timeout.
bool write_all(int fd, std::string_view bytes);

}  // namespace tessera::gateway
