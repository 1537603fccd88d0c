// libFuzzer target: an HTTP request body → the OpenAI / native request parser of every route
// (and of /open_session, /close_session, /abort_request, /v1/tokenize, /v1/detokenize), and the
// chat route again with a tool-call parser (strict tools' structural tags) and a conversation
// template's options.
// Any input must give a ParseOutcome (a request or an error naming the field), never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_protocol.h"
#include "server/tool_call_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    tessera::server::ProtocolOptions options;
    options.served_model_name = "fuzz";
    options.max_model_len = 4096;
    for (auto kind : {tessera::server::ApiKind::kChatCompletion, tessera::server::ApiKind::kCompletion,
                      tessera::server::ApiKind::kGenerate, tessera::server::ApiKind::kScore}) {
        (void)tessera::server::parse_request(kind, body, options, "fuzz-id");
    }
    // SGLang's session routes, /abort_request, /pause_generation and the tokenizer routes.
    (void)tessera::server::parse_open_session(body);
    (void)tessera::server::parse_close_session(body);
    (void)tessera::server::parse_abort_request(body);
    (void)tessera::server::parse_pause_generation(body);
    (void)tessera::server::parse_update_weights_from_disk(body);
    (void)tessera::server::parse_memory_occupation(body);
    (void)tessera::server::parse_update_weight_version(body);
    (void)tessera::server::parse_configure_logging(body);
    (void)tessera::server::separate_reasoning_answer(body);
    (void)tessera::server::parse_function_call_answer(body, tessera::server::tool_call_format("qwen25").value());
    (void)tessera::server::parse_tokenize_request(body);
    (void)tessera::server::parse_detokenize_request(body);
    {
        tessera::server::ProtocolOptions chat = options;
        chat.tool_calls = tessera::server::tool_call_format("qwen25").value();
        chat.reasoning = tessera::server::reasoning_format("deepseek-r1").value();
        chat.conversation_stop = {"<|im_end|>"};
        chat.conversation_opens_think = true;
        (void)tessera::server::parse_request(tessera::server::ApiKind::kChatCompletion, body, chat, "fuzz-id");
    }
    // An embedding server's routes, with a Matryoshka model so that `dimensions` is read too.
    options.embedding = tessera::server::EmbeddingOptions{.model_path = "fuzz", .hidden_size = 64,
                                                          .is_matryoshka = true, .matryoshka_dimensions = {}};
    for (auto kind : {tessera::server::ApiKind::kEmbedding, tessera::server::ApiKind::kEncode}) {
        const tessera::server::ParseOutcome parsed = tessera::server::parse_request(kind, body, options, "fuzz-id");
        if (!parsed.ok()) continue;
        // The response side: the vectors truncated and encoded as asked.
        tessera::server::ResponseBuilder builder(parsed.request);
        tessera::server::GenerationEvent event;
        event.embedding.assign(64, 0.125f);
        event.finish_reason = "length";
        for (std::size_t i = 0; i < parsed.request.requests.size(); ++i) (void)builder.add_event(i, event);
        (void)builder.body();
    }
    return 0;
}
