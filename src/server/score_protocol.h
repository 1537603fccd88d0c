#pragma once
// server/score_protocol.h — POST /v1/score, SGLang's decoder-only scoring API
// (serving_score.py, tokenizer_manager_score_mixin.py score_request): the probability of each
// of label_token_ids being the next token after query + item, for every item. Each item is a
// request of its own with max_new_tokens 0 that asks for those tokens' log-probabilities at
// the prompt's end. The response side is ResponseBuilder::score_body.

#include <optional>

#include <nlohmann/json_fwd.hpp>

#include "server/openai_protocol.h"

namespace tessera::server {

// Fills out.requests (one per item, ids "<out.id>-<i>") and out.apply_softmax from `root`;
// an error names the field, with SGLang's messages where it has them.
std::optional<ApiError> parse_score_request(const nlohmann::ordered_json& root, const ProtocolOptions& options,
                                            ParsedRequest& out);

}  // namespace tessera::server
