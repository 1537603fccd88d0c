// libFuzzer target: bytes → what the gateway reads of a client's request before any worker
// sees it: the request head (request line, headers, Content-Length), query parameters, and
// the routing facts of a body (text, stream, data_parallel_rank, the session a turn continues)
// for each generation route.
// Nothing may crash; a parsed Content-Length is never negative; a query value never grows
// beyond the query it came from.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/http_wire.h"
#include "gateway/request_text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    // The first blank line splits a head from a body, as on the wire.
    const std::size_t split = bytes.find("\r\n\r\n");
    const std::string_view head = bytes.substr(0, split);
    const std::string_view body = split == std::string_view::npos ? std::string_view() : bytes.substr(split + 4);
    auto parsed = tessera::gateway::parse_request_head(head);
    if (parsed.ok()) {
        if (parsed->content_length < 0) std::abort();
        for (const char* key : {"url", "x", ""}) {
            if (tessera::gateway::query_param(parsed->query, key).size() > parsed->query.size()) std::abort();
        }
    }
    for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
        const auto facts = tessera::gateway::read_request(path, body);
        if (facts.text.size() > 4 * body.size() + 16) std::abort();  // ids print as at most ~20 bytes per 5 input bytes
        if (facts.session_id && facts.session_id->size() > body.size()) std::abort();
    }
    return 0;
}
