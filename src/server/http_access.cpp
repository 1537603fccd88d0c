#include "server/http_access.h"

#include <algorithm>
#include <cctype>

#include "base/text.h"

namespace tessera::server {

namespace {

// "name:port" / "[v6]:port" / "name" → the name, lower-cased, without brackets.
std::string host_name(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        const auto close = host.find(']');
        return ascii_lower(host.substr(1, close == std::string_view::npos ? host.size() - 1 : close - 1));
    }
    const auto colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
    return ascii_lower(host);
}

ApiError unauthorized(const std::string& message) {
    return ApiError{.http_status = 401, .message = message, .type = "invalid_request_error", .code = "invalid_api_key"};
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const std::size_t n = std::max(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

bool is_loopback_host(std::string_view host) {
    const std::string name = host_name(host);
    const bool ipv4_loopback = name.rfind("127.", 0) == 0 &&
                               std::all_of(name.begin(), name.end(), [](char c) { return c == '.' || std::isdigit(c); });
    return name == "localhost" || name == "::1" || ipv4_loopback;
}

std::optional<ApiError> check_access(const AccessPolicy& policy, RouteKind kind, std::string_view host,
                                     std::string_view authorization) {
    if (!host.empty()) {
        const std::string name = host_name(host);
        bool allowed;
        if (!policy.allowed_hosts.empty()) {
            allowed = std::any_of(policy.allowed_hosts.begin(), policy.allowed_hosts.end(),
                                  [&](const std::string& h) { return host_name(h) == name; });
        } else if (is_loopback_host(policy.bound_host)) {
            allowed = is_loopback_host(host);
        } else if (policy.bound_host.empty() || policy.bound_host == "0.0.0.0" || policy.bound_host == "::") {
            allowed = true;  // every interface: any name may reach it
        } else {
            allowed = name == host_name(policy.bound_host) || is_loopback_host(host);
        }
        if (!allowed) {
            return ApiError{.http_status = 403,
                            .message = "Host `" + std::string(host) + "` is not served here (the server listens on " +
                                       policy.bound_host + "); add it with --allowed-hosts",
                            .code = "host_not_allowed"};
        }
    }
    if (kind == RouteKind::kOpen) return std::nullopt;
    const std::string& key = kind == RouteKind::kAdmin && !policy.admin_api_key.empty() ? policy.admin_api_key
                                                                                        : policy.api_key;
    if (key.empty()) return std::nullopt;
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() <= kBearer.size() || ascii_lower(authorization.substr(0, kBearer.size())) != "bearer ")
        return unauthorized(kind == RouteKind::kAdmin && !policy.admin_api_key.empty()
                                ? "This route changes server state: send `Authorization: Bearer <admin API key>`"
                                : "Missing API key: send `Authorization: Bearer <API key>`");
    if (!constant_time_equal(authorization.substr(kBearer.size()), key))
        return unauthorized(kind == RouteKind::kAdmin && !policy.admin_api_key.empty() ? "Invalid admin API key"
                                                                                       : "Invalid API key");
    return std::nullopt;
}

std::optional<ApiError> check_json_content_type(std::string_view content_type) {
    const std::string type = ascii_lower(content_type.substr(0, content_type.find(';')));
    std::string trimmed = type;
    trimmed.erase(std::remove_if(trimmed.begin(), trimmed.end(), [](unsigned char c) { return std::isspace(c); }),
                  trimmed.end());
    if (trimmed == "application/json") return std::nullopt;
    return ApiError{.http_status = 415,
                    .message = "Content-Type must be application/json, got `" + std::string(content_type) + "`",
                    .code = "unsupported_media_type"};
}

}  // namespace tessera::server
