#pragma once
// server/http_access.h — who may call which route: the API key, the admin key of routes that
// change state, the Host header against DNS rebinding, and the body type of JSON routes.
// Pure functions of the request's headers and the server's options; no Beast, thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"

namespace tessera::server {

struct AccessPolicy {
    std::string api_key;
    std::string admin_api_key;
    std::string bound_host;  // the address the server listens on
    std::vector<std::string> allowed_hosts;
};

enum class RouteKind {
    kOpen,      // /health: load balancers probe it without credentials
    kApi,       // everything else a client calls
    kAdmin,     // changes state (/flush_cache)
};

// Equal strings, in time that does not depend on where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// The error to answer instead of serving the route, or nothing. `host` and `authorization`
// are the request's headers ("" when absent).
std::optional<ApiError> check_access(const AccessPolicy& policy, RouteKind kind, std::string_view host,
                                     std::string_view authorization);

// A JSON route's body must be declared application/json: a form or text/plain body is what
// a web page can send across origins without a preflight.
std::optional<ApiError> check_json_content_type(std::string_view content_type);

bool is_loopback_host(std::string_view host);

}  // namespace tessera::server
