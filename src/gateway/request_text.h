#pragma once
// gateway/request_text.h — what the gateway reads of a request body before passing it on
// unchanged: the text the cache-aware policy routes by (as sgl-model-gateway's
// routers/http/router.rs extracts it: /generate's "text", /v1/completions' "prompt", the
// contents of /v1/chat/completions' messages in order), whether the client asked for a
// stream, an explicit replica choice ("data_parallel_rank", as SGLang's /generate), and the
// session a /generate turn continues ("session_params": {"id": ...}).
// Pure; a body that is not JSON gives empty text (the worker will answer it with a 400).

#include <optional>
#include <string>
#include <string_view>

namespace tessera::gateway {

struct RequestFacts {
    std::string text;
    bool stream = false;
    std::optional<int> data_parallel_rank;
    std::optional<std::string> session_id;
};

RequestFacts read_request(std::string_view path, std::string_view body);

}  // namespace tessera::gateway
