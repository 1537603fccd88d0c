#include "server/embedding_protocol.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/text.h"

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kMaxInputs = 2048;  // OpenAI's limit on one embeddings request's inputs

ApiError invalid(std::string param, std::string message) {
    return ApiError{.http_status = 400, .message = std::move(message), .param = std::move(param)};
}

bool blank(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// A JSON integer as a token id, or nullopt (not an integer, negative, or above int32).
std::optional<std::int32_t> token_id(const Json& j) {
    if (!j.is_number_integer()) return std::nullopt;
    if (j.is_number_unsigned()) {
        const auto u = j.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) return std::nullopt;
        return static_cast<std::int32_t>(u);
    }
    const auto v = j.get<std::int64_t>();
    if (v < 0 || v > std::numeric_limits<std::int32_t>::max()) return std::nullopt;
    return static_cast<std::int32_t>(v);
}

// One list of token ids: non-empty, every entry a non-negative int32.
std::optional<ApiError> read_ids(const Json& list, const std::string& param, std::vector<std::int32_t>& ids) {
    if (!list.is_array() || list.empty())
        return invalid(param, "'" + param + "' must be a non-empty list of token ids");
    for (std::size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_number_integer()) return invalid(param, "All items in input list must be integers");
        const auto id = token_id(list[i]);
        if (!id) return invalid(param, fmt::format("Token ID at index {} must be non-negative (and below 2^31)", i));
        ids.push_back(*id);
    }
    return std::nullopt;
}

// /v1/embeddings' input: a string, a list of strings, a list of token ids, or a list of them.
std::optional<ApiError> read_embedding_inputs(const Json& input, std::vector<GenerationInput>& inputs) {
    const bool empty = input.is_null() || (input.is_string() && input.get<std::string>().empty()) ||
                       (input.is_array() && input.empty());
    if (empty) return invalid("input", "Input cannot be empty");
    if (input.is_string()) {
        if (blank(input.get<std::string>())) return invalid("input", "Input cannot be empty or whitespace only");
        inputs.push_back({.text = input.get<std::string>()});
        return std::nullopt;
    }
    if (!input.is_array())
        return invalid("input", std::string("'input' must be a string, a list of strings or a list of token ids, "
                                            "got ") + input.type_name());
    if (input.size() > kMaxInputs)
        return invalid("input", fmt::format("'input' may hold at most {} items, got {}", kMaxInputs, input.size()));
    const Json& first = input[0];
    if (first.is_string()) {
        for (std::size_t i = 0; i < input.size(); ++i) {
            if (!input[i].is_string()) return invalid("input", "All items in input list must be strings");
            if (blank(input[i].get<std::string>()))
                return invalid("input", fmt::format("Input at index {} cannot be empty or whitespace only", i));
            inputs.push_back({.text = input[i].get<std::string>()});
        }
    } else if (first.is_number()) {
        std::vector<std::int32_t> ids;
        if (auto e = read_ids(input, "input", ids)) return e;
        inputs.push_back({.input_ids = std::move(ids)});
    } else if (first.is_array()) {
        for (const Json& list : input) {
            std::vector<std::int32_t> ids;
            if (auto e = read_ids(list, "input", ids)) return e;
            inputs.push_back({.input_ids = std::move(ids)});
        }
    } else {
        return invalid("input", "multimodal embedding inputs are not supported by this server; send text or token ids");
    }
    return std::nullopt;
}

// /encode's text or input_ids (EmbeddingReqInput), single or batched.
std::optional<ApiError> read_encode_inputs(const Json& root, std::vector<GenerationInput>& inputs, bool& batched) {
    for (const char* field : {"image_data", "video_data", "audio_data", "input_embeds"})
        if (root.contains(field) && !root[field].is_null())
            return invalid(field, "multimodal and embedded inputs are not supported by this server");
    const Json* text = root.contains("text") && !root["text"].is_null() ? &root["text"] : nullptr;
    const Json* ids = root.contains("input_ids") && !root["input_ids"].is_null() ? &root["input_ids"] : nullptr;
    if (text == nullptr && ids == nullptr)
        return invalid("text", "At least one of text, input_ids, or image should be provided");
    if (text != nullptr && ids != nullptr)
        return invalid("text", "text and input_ids cannot be provided at the same time");
    if (text != nullptr) {
        batched = text->is_array();
        if (text->is_string()) {
            inputs.push_back({.text = text->get<std::string>()});
        } else if (batched && !text->empty() && text->size() <= kMaxInputs) {
            for (const Json& t : *text) {
                if (!t.is_string()) return invalid("text", "All items in input list must be strings");
                inputs.push_back({.text = t.get<std::string>()});
            }
        } else {
            return invalid("text", fmt::format("'text' must be a string or a list of 1 to {} strings", kMaxInputs));
        }
        for (const GenerationInput& in : inputs)
            if (in.text->empty()) return invalid("text", "'text' must not be empty");
        return std::nullopt;
    }
    batched = ids->is_array() && !ids->empty() && (*ids)[0].is_array();
    if (!batched) {
        std::vector<std::int32_t> one;
        if (auto e = read_ids(*ids, "input_ids", one)) return e;
        inputs.push_back({.input_ids = std::move(one)});
        return std::nullopt;
    }
    if (ids->size() > kMaxInputs) return invalid("input_ids", fmt::format("at most {} inputs per request", kMaxInputs));
    for (const Json& list : *ids) {
        std::vector<std::int32_t> one;
        if (auto e = read_ids(list, "input_ids", one)) return e;
        inputs.push_back({.input_ids = std::move(one)});
    }
    return std::nullopt;
}

// SGLang's TokenizerManager._validate_for_matryoshka_dim.
std::optional<ApiError> read_dimensions(const Json& root, const EmbeddingOptions& e, ParsedRequest& out) {
    if (!root.contains("dimensions") || root["dimensions"].is_null()) return std::nullopt;
    const Json& d = root["dimensions"];
    if (!d.is_number_integer())
        return invalid("dimensions", std::string("'dimensions' must be an integer, got ") + d.type_name());
    if (!e.is_matryoshka)
        return invalid("dimensions", "Model '" + e.model_path + "' does not support matryoshka representation, "
                                     "changing output dimensions will lead to poor results.");
    constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const std::int64_t dim = d.is_number_unsigned() ? static_cast<std::int64_t>(std::min(d.get<std::uint64_t>(), kMax))
                                                    : d.get<std::int64_t>();
    if (dim < 1) return invalid("dimensions", "Requested dimensions must be greater than 0");
    const auto& allowed = e.matryoshka_dimensions;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), dim) == allowed.end())
        return invalid("dimensions", fmt::format("Model '{}' only supports [{}] matryoshka dimensions, using other "
                                                 "output dimensions will lead to poor results.",
                                                 e.model_path, fmt::join(allowed, ", ")));
    if (dim > e.hidden_size)
        return invalid("dimensions",
                       fmt::format("Provided dimensions are greater than max embedding dimension: {}", e.hidden_size));
    out.dimensions = dim;
    return std::nullopt;
}

std::string base64(const std::vector<float>& values) {
    // x86: little-endian, as OpenAI's.
    return base64_encode({reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)});
}

// The first `dim` entries at unit length (SGLang's Pooler truncates before it normalises).
std::vector<float> truncated(const std::vector<float>& v, std::optional<std::int64_t> dim) {
    if (!dim || *dim >= static_cast<std::int64_t>(v.size())) return v;
    std::vector<float> out(v.begin(), v.begin() + *dim);
    double sum = 0.0;
    for (float x : out) sum += static_cast<double>(x) * x;
    const double scale = 1.0 / std::max(std::sqrt(sum), 1e-12);
    for (float& x : out) x = static_cast<float>(x * scale);
    return out;
}

}  // namespace

std::optional<ApiError> parse_embedding_request(ApiKind kind, const Json& root, const ProtocolOptions& options,
                                                ParsedRequest& out) {
    const EmbeddingOptions& e = *options.embedding;
    std::vector<GenerationInput> inputs;
    if (kind == ApiKind::kEmbedding) {
        if (auto err = read_embedding_inputs(root.contains("input") ? root["input"] : Json(), inputs)) return err;
        if (root.contains("encoding_format") && !root["encoding_format"].is_null()) {
            const Json& f = root["encoding_format"];
            if (f != "float" && f != "base64")
                return invalid("encoding_format", "'encoding_format' must be \"float\" or \"base64\", got " + f.dump());
            out.base64 = f == "base64";
        }
        out.model = e.model_path;  // SGLang answers its model path, not the served name
    } else {
        if (auto err = read_encode_inputs(root, inputs, out.batched_input)) return err;
        if (root.contains("rid") && !root["rid"].is_null()) {
            if (!root["rid"].is_string() || root["rid"].get<std::string>().empty())
                return invalid("rid", "'rid' must be a non-empty string");
            out.id = root["rid"].get<std::string>();
        }
    }
    if (auto err = read_dimensions(root, e, out)) return err;
    if (options.skip_tokenizer_init) {
        for (const GenerationInput& in : inputs)
            if (in.text)
                return invalid(kind == ApiKind::kEmbedding ? "input" : "text",
                               "text needs the tokenizer, which --skip-tokenizer-init leaves out; send token ids");
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        GenerationRequest req;
        req.request_id = inputs.size() == 1 && !out.batched_input ? out.id : fmt::format("{}-{}", out.id, i);
        req.input = std::move(inputs[i]);
        req.params.max_new_tokens = 0;
        out.requests.push_back(std::move(req));
    }
    return std::nullopt;
}

std::string ResponseBuilder::embedding_body() const {
    Json items = Json::array();
    std::int64_t prompt_tokens = 0;
    for (std::size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        prompt_tokens += c.usage.prompt_tokens;
        std::vector<float> values = truncated(c.embedding, dimensions_);
        Json vector = base64_ ? Json(base64(values)) : Json(std::move(values));
        if (kind_ == ApiKind::kEmbedding) {
            items.push_back(Json{{"embedding", std::move(vector)}, {"index", i}, {"object", "embedding"}});
            continue;
        }
        Json finish = nullptr;
        if (c.finish_reason) finish = Json{{"type", *c.finish_reason}, {"length", 0}};
        Json meta = Json{{"id", request_ids_[i]},
                         {"finish_reason", std::move(finish)},
                         {"prompt_tokens", c.usage.prompt_tokens},
                         {"cached_tokens", c.usage.cached_tokens},
                         {"e2e_latency", std::chrono::duration<double>(c.finished_at - start_).count()}};
        items.push_back(Json{{"embedding", std::move(vector)}, {"meta_info", std::move(meta)}});
    }
    if (kind_ == ApiKind::kEncode)
        return (batched_input_ ? items : items[0]).dump(-1, ' ', false, Json::error_handler_t::replace);
    Json usage = Json{{"prompt_tokens", prompt_tokens},
                      {"total_tokens", prompt_tokens},
                      {"completion_tokens", 0},
                      {"prompt_tokens_details", nullptr}};
    Json root = Json{{"data", std::move(items)}, {"model", model_}, {"object", "list"}, {"usage", std::move(usage)}};
    return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tessera::server
