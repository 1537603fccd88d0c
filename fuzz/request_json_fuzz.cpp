// libFuzzer target: an HTTP request body → the OpenAI / native request parser of every route.
// Any input must give a ParseOutcome (a request or an error naming the field), never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    tessera::server::ProtocolOptions options;
    options.served_model_name = "fuzz";
    options.max_model_len = 4096;
    for (auto kind : {tessera::server::ApiKind::kChatCompletion, tessera::server::ApiKind::kCompletion,
                      tessera::server::ApiKind::kGenerate}) {
        (void)tessera::server::parse_request(kind, body, options, "fuzz-id");
    }
    return 0;
}
