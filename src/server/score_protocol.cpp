#include "server/score_protocol.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

ApiError invalid(std::string param, std::string message) {
    return ApiError{.http_status = 400, .message = std::move(message), .param = std::move(param)};
}

bool is_token_list(const Json& j) {
    if (!j.is_array()) return false;
    constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max();
    return std::all_of(j.begin(), j.end(), [](const Json& t) {
        return t.is_number_integer() && t.get<std::int64_t>() >= 0 && t.get<std::int64_t>() <= kMaxId;
    });
}

std::vector<std::int32_t> tokens_of(const Json& j) {
    std::vector<std::int32_t> out;
    for (const Json& t : j) out.push_back(t.get<std::int32_t>());
    return out;
}

}  // namespace

std::optional<ApiError> parse_score_request(const Json& root, const ProtocolOptions& options, ParsedRequest& out) {
    for (const char* field : {"embed_override_token_id", "query_embed_overrides", "item_embed_overrides"}) {
        if (root.contains(field) && !root[field].is_null())
            return invalid(field, std::string(field) + " is not supported: tessera scores token ids and text only");
    }
    if (root.contains("return_pooled_hidden_states") && root["return_pooled_hidden_states"] == true)
        return invalid("return_pooled_hidden_states",
                       "return_pooled_hidden_states is not supported for CausalLM models. It requires a model with a "
                       "task-specific head (e.g. SequenceClassification or RewardModel).");
    const auto flag = [&](const char* name, bool& value) -> std::optional<ApiError> {
        if (!root.contains(name) || root[name].is_null()) return std::nullopt;
        if (!root[name].is_boolean()) return invalid(name, std::string(name) + " must be a boolean");
        value = root[name].get<bool>();
        return std::nullopt;
    };
    bool item_first = false;
    if (auto e = flag("apply_softmax", out.apply_softmax)) return e;
    if (auto e = flag("item_first", item_first)) return e;

    // tokenizer_manager_score_mixin.py score_request: labels are required for a CausalLM.
    const Json labels = root.contains("label_token_ids") ? root["label_token_ids"] : Json();
    if (labels.is_null())
        return invalid("label_token_ids", "label_token_ids is required for generation (CausalLM) models.");
    if (!is_token_list(labels) || labels.empty())
        return invalid("label_token_ids", "label_token_ids must be a non-empty list of token ids");
    const std::vector<std::int32_t> label_ids = tokens_of(labels);

    const Json items = root.contains("items") ? root["items"] : Json();
    if (items.is_null()) return invalid("items", "items must be provided");
    const Json query = root.contains("query") ? root["query"] : Json();
    std::vector<GenerationInput> inputs;
    if (query.is_string()) {
        // Both text: one prompt per item, the two strings joined.
        const bool one = items.is_string();
        if (!one && !(items.is_array() && std::all_of(items.begin(), items.end(), [](const Json& i) {
                          return i.is_string();
                      })))
            return invalid("items", "Invalid combination of query/items types for score_request.");
        if (options.skip_tokenizer_init)
            return invalid("query", "text needs the tokenizer, which --skip-tokenizer-init leaves out; send token ids");
        for (const Json& item : one ? Json::array({items}) : items) {
            const std::string q = query.get<std::string>(), i = item.get<std::string>();
            inputs.push_back(GenerationInput{.text = item_first ? i + q : q + i});
        }
    } else if (is_token_list(query) && items.is_array() &&
               std::all_of(items.begin(), items.end(), [](const Json& i) { return is_token_list(i); })) {
        const std::vector<std::int32_t> q = tokens_of(query);
        for (const Json& item : items) {
            std::vector<std::int32_t> ids = tokens_of(item);
            ids.insert(item_first ? ids.end() : ids.begin(), q.begin(), q.end());
            inputs.push_back(GenerationInput{.input_ids = std::move(ids)});
        }
    } else {
        return invalid("query", "Invalid combination of query/items types for score_request.");
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        GenerationRequest req;
        req.request_id = out.id + "-" + std::to_string(i);
        req.input = std::move(inputs[i]);
        // The distribution after the prompt, read at its end: no token is generated.
        req.params.max_new_tokens = 0;
        req.params.logprobs = true;
        req.params.logprob_start_len = -1;
        req.params.token_ids_logprob = label_ids;
        out.requests.push_back(std::move(req));
    }
    return std::nullopt;
}

std::string ResponseBuilder::score_body() const {
    Json scores = Json::array();
    std::int64_t prompt_tokens = 0;
    for (const Choice& c : choices_) {
        prompt_tokens += c.usage.prompt_tokens;
        std::vector<double> lp;
        if (c.unsampled_logprobs)
            for (const auto& [text, logprob] : c.unsampled_logprobs->chosen) lp.push_back(logprob);
        // _convert_logprobs_to_scores: softmax over the labels, or each one's probability.
        Json row = Json::array();
        double top = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (double x : lp) top = std::max(top, x);
        for (double x : lp) sum += std::isinf(x) ? 0.0 : std::exp(x - top);
        for (double x : lp) {
            const double p = std::isinf(x) ? 0.0 : apply_softmax_ ? std::exp(x - top) / sum : std::exp(x);
            row.push_back(p);
        }
        scores.push_back(std::move(row));
    }
    const Json usage = {{"prompt_tokens", prompt_tokens},
                        {"total_tokens", prompt_tokens},
                        {"completion_tokens", 0},
                        {"prompt_tokens_details", nullptr}};
    const Json root = {{"scores", std::move(scores)}, {"pooled_hidden_states", nullptr}, {"model", model_},
                       {"usage", usage}, {"object", "scoring"}};
    return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tessera::server
