#include "gateway/http_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>

#include "base/text.h"

namespace tessera::gateway {

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string url_decode(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+') {
            out += ' ';
        } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

std::string headers_text(const std::vector<std::pair<std::string, std::string>>& extra) {
    std::string out;
    for (const auto& [name, value] : extra) out += name + ": " + value + "\r\n";
    return out;
}

}  // namespace

std::string RequestHead::header(std::string_view name) const {
    for (const auto& [n, v] : headers)
        if (n == name) return v;
    return {};
}

StatusOr<RequestHead> parse_request_head(std::string_view head) {
    RequestHead h;
    const std::size_t line_end = std::min(head.find("\r\n"), head.size());
    const std::string_view line = head.substr(0, line_end);
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1)
        return Status::InvalidArgument("malformed request line");
    h.method = std::string(line.substr(0, sp1));
    h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    const std::string_view version = line.substr(sp2 + 1);
    if (version == "HTTP/1.1") h.minor_version = 1;
    else if (version == "HTTP/1.0") h.minor_version = 0;
    else return Status::InvalidArgument("unsupported HTTP version");
    if (h.target.empty() || h.target.front() != '/') return Status::InvalidArgument("the request target must be a path");
    const std::size_t q = h.target.find('?');
    h.path = h.target.substr(0, q);
    if (q != std::string::npos) h.query = h.target.substr(q + 1);
    std::size_t pos = line_end;
    while (pos < head.size()) {
        const std::size_t next = std::min(head.find("\r\n", pos + 2), head.size());
        const std::string_view field = head.substr(pos + 2, next - pos - 2);
        pos = next;
        if (field.empty()) continue;
        const std::size_t colon = field.find(':');
        if (colon == std::string_view::npos || colon == 0) return Status::InvalidArgument("malformed header line");
        h.headers.emplace_back(ascii_lower(trim_blanks(field.substr(0, colon))), std::string(trim_blanks(field.substr(colon + 1))));
    }
    if (!h.header("transfer-encoding").empty())
        return Status::InvalidArgument("chunked request bodies are not accepted; send Content-Length");
    if (const std::string cl = h.header("content-length"); !cl.empty()) {
        const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), h.content_length);
        if (ec != std::errc() || end != cl.data() + cl.size() || h.content_length < 0)
            return Status::InvalidArgument("bad Content-Length");
    }
    const std::string connection = ascii_lower(h.header("connection"));
    h.keep_alive = h.minor_version == 1 ? connection.find("close") == std::string::npos
                                        : connection.find("keep-alive") != std::string::npos;
    return h;
}

std::string query_param(std::string_view query, std::string_view key) {
    while (!query.empty()) {
        const std::size_t amp = std::min(query.find('&'), query.size());
        const std::string_view pair = query.substr(0, amp);
        const std::size_t eq = pair.find('=');
        if (url_decode(pair.substr(0, eq)) == key) return eq == std::string_view::npos ? "" : url_decode(pair.substr(eq + 1));
        query.remove_prefix(std::min(amp + 1, query.size()));
    }
    return {};
}

const char* reason_phrase(int status) {
    switch (status) {
        case 200: return "OK";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 421: return "Misdirected Request";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return "Status";
    }
}

std::string response_bytes(int status, std::string_view content_type, std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra_headers, bool keep_alive) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    out += "Content-Type: " + std::string(content_type) + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += headers_text(extra_headers);
    out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    out += body;
    return out;
}

std::string stream_head_bytes(int status, std::string_view content_type,
                              const std::vector<std::pair<std::string, std::string>>& extra_headers, bool keep_alive) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    out += "Content-Type: " + std::string(content_type) + "\r\n";
    out += "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    out += headers_text(extra_headers);
    out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return out;
}

std::string chunk_bytes(std::string_view data) {
    if (data.empty()) return {};  // an empty chunk would end the stream
    char size[20];
    const auto [end, ec] = std::to_chars(size, size + sizeof(size), data.size(), 16);
    std::string out(size, end);
    out += "\r\n";
    out += data;
    out += "\r\n";
    return out;
}

StatusOr<std::optional<ReadRequest>> read_request(int fd, std::string& buffer, const ReadLimits& limits) {
    char io[16 * 1024];
    std::size_t head_end = std::string::npos;
    while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
        if (buffer.size() > limits.max_head) return Status::OutOfRange("request headers are too large");
        const ssize_t n = ::recv(fd, io, sizeof(io), 0);
        if (n == 0) {
            if (buffer.empty()) return std::optional<ReadRequest>();
            return Status(StatusCode::kUnavailable, "the client closed the connection mid-request");
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (buffer.empty()) return std::optional<ReadRequest>();  // idle keep-alive timed out
            return Status(StatusCode::kUnavailable, "reading the request failed");
        }
        buffer.append(io, static_cast<std::size_t>(n));
    }
    if (head_end > limits.max_head) return Status::OutOfRange("request headers are too large");
    TSR_ASSIGN_OR_RETURN(RequestHead head, parse_request_head(std::string_view(buffer).substr(0, head_end)));
    if (static_cast<std::uint64_t>(head.content_length) > limits.max_body)
        return Status::OutOfRange("the request body is larger than " + std::to_string(limits.max_body) + " bytes");
    buffer.erase(0, head_end + 4);
    const auto want = static_cast<std::size_t>(head.content_length);
    while (buffer.size() < want) {
        const ssize_t n = ::recv(fd, io, sizeof(io), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return Status(StatusCode::kUnavailable, "the client closed the connection mid-body");
        buffer.append(io, static_cast<std::size_t>(n));
    }
    ReadRequest r{std::move(head), buffer.substr(0, want)};
    buffer.erase(0, want);
    return std::optional<ReadRequest>(std::move(r));
}

bool write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

}  // namespace tessera::gateway
