#pragma once
// server/embedding_protocol.h — the request side of an embedding server's routes, as SGLang
// reads them: POST /v1/embeddings (serving_embedding.py OpenAIServingEmbedding, its
// _validate_request messages) and POST /encode (EmbeddingReqInput). Used by parse_request;
// the response side is ResponseBuilder::embedding_body in embedding_protocol.cpp.

#include <optional>

#include <nlohmann/json_fwd.hpp>

#include "server/openai_protocol.h"

namespace tessera::server {

// Fills out.requests (one per input; ids "<out.id>-<i>" when there are several), dimensions,
// base64 and batched_input from `root`; an error names the field. REQUIRES: kind is kEmbedding
// or kEncode, options.embedding is set.
std::optional<ApiError> parse_embedding_request(ApiKind kind, const nlohmann::ordered_json& root,
                                                const ProtocolOptions& options, ParsedRequest& out);

}  // namespace tessera::server
