#include "server/openai_protocol.h"

#include "server/embedding_protocol.h"
#include "server/score_protocol.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "base/json_text.h"
#include "base/text.h"

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::int64_t kMaxTokenId = std::numeric_limits<std::int32_t>::max();
constexpr int kMaxOpenAiStop = 4;     // OpenAI: "up to 4 sequences"
constexpr int kMaxNativeStop = 64;    // /generate: no OpenAI limit, but bounded

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string preview(const Json& j) {
    std::string s = dump(j);
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

ApiError invalid(std::string param, std::string message) {
    return ApiError{.http_status = 400, .message = std::move(message), .param = std::move(param)};
}

std::string format_number(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
    return Json(v).dump();
}

// Reads optional fields of one JSON object; the first error wins and later reads return
// nullopt. A field set to null counts as absent (OpenAI's optional fields).
class FieldReader {
 public:
    FieldReader(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

    bool ok() const { return !error_.has_value(); }
    const std::optional<ApiError>& error() const { return error_; }
    void fail(const std::string& name, const std::string& message) {
        if (!error_) error_ = invalid(prefix_ + name, "'" + prefix_ + name + "' " + message);
    }
    void fail_with(ApiError e) {
        if (!error_) error_ = std::move(e);
    }
    std::string param(const std::string& name) const { return prefix_ + name; }

    const Json* get(const std::string& name) const {
        if (!ok()) return nullptr;
        auto it = object_.find(name);
        if (it == object_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    bool has(const std::string& name) const { return get(name) != nullptr; }

    std::optional<bool> boolean(const std::string& name) {
        const Json* j = get(name);
        if (!j) return std::nullopt;
        if (!j->is_boolean()) return wrong_type<bool>(name, "a boolean", *j);
        return j->get<bool>();
    }

    std::optional<std::string> string(const std::string& name) {
        const Json* j = get(name);
        if (!j) return std::nullopt;
        if (!j->is_string()) return wrong_type<std::string>(name, "a string", *j);
        return j->get<std::string>();
    }

    std::optional<std::int64_t> integer(const std::string& name, std::int64_t lo, std::int64_t hi) {
        const Json* j = get(name);
        if (!j) return std::nullopt;
        return integer_value(name, *j, lo, hi);
    }

    std::optional<std::int64_t> integer_value(const std::string& name, const Json& j,
                                              std::int64_t lo, std::int64_t hi) {
        std::int64_t v = 0;
        if (j.is_number_unsigned()) {
            const auto u = j.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(hi)) return out_of_range<std::int64_t>(name, lo, hi, j);
            v = static_cast<std::int64_t>(u);
        } else if (j.is_number_integer()) {
            v = j.get<std::int64_t>();
        } else if (j.is_number_float()) {
            const double d = j.get<double>();
            if (d != std::floor(d)) return wrong_type<std::int64_t>(name, "an integer", j);
            if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
                return out_of_range<std::int64_t>(name, lo, hi, j);
            v = static_cast<std::int64_t>(d);
        } else {
            return wrong_type<std::int64_t>(name, "an integer", j);
        }
        if (v < lo || v > hi) return out_of_range<std::int64_t>(name, lo, hi, j);
        return v;
    }

    // A number in [lo, hi] (or (lo, hi] when lo_open).
    std::optional<double> number(const std::string& name, double lo, double hi, bool lo_open = false) {
        const Json* j = get(name);
        if (!j) return std::nullopt;
        if (!j->is_number()) return wrong_type<double>(name, "a number", *j);
        const double v = j->get<double>();
        if (v < lo || v > hi || (lo_open && v == lo)) {
            fail(name, "must be " + std::string(lo_open ? "greater than " : "between ") +
                           format_number(lo) + (lo_open ? " and at most " : " and ") +
                           format_number(hi) + ", got " + preview(*j));
            return std::nullopt;
        }
        return v;
    }

    // A string or a list of strings (at most max_items); empty strings are dropped.
    std::optional<std::vector<std::string>> strings(const std::string& name, int max_items) {
        const Json* j = get(name);
        if (!j) return std::nullopt;
        std::vector<std::string> out;
        if (j->is_string()) {
            out.push_back(j->get<std::string>());
        } else if (j->is_array()) {
            if (static_cast<int>(j->size()) > max_items) {
                fail(name, "may hold at most " + std::to_string(max_items) + " sequences, got " +
                               std::to_string(j->size()));
                return std::nullopt;
            }
            for (const Json& s : *j) {
                if (!s.is_string()) return wrong_type<std::vector<std::string>>(name, "a string or a list of strings", *j);
                out.push_back(s.get<std::string>());
            }
        } else {
            return wrong_type<std::vector<std::string>>(name, "a string or a list of strings", *j);
        }
        std::erase_if(out, [](const std::string& s) { return s.empty(); });
        return out;
    }

    std::optional<std::vector<std::int32_t>> token_ids(const std::string& name, const Json& j,
                                                       bool allow_empty) {
        if (!j.is_array()) return wrong_type<std::vector<std::int32_t>>(name, "a list of token ids", j);
        if (j.empty() && !allow_empty) {
            fail(name, "must not be empty");
            return std::nullopt;
        }
        std::vector<std::int32_t> ids;
        ids.reserve(j.size());
        for (const Json& t : j) {
            auto v = integer_value(name, t, 0, kMaxTokenId);
            if (!v) return std::nullopt;
            ids.push_back(static_cast<std::int32_t>(*v));
        }
        return ids;
    }

    template <typename T>
    std::optional<T> wrong_type(const std::string& name, const char* expected, const Json& j) {
        fail(name, std::string("must be ") + expected + ", got " + j.type_name() + " " + preview(j));
        return std::nullopt;
    }

 private:
    template <typename T>
    std::optional<T> out_of_range(const std::string& name, std::int64_t lo, std::int64_t hi, const Json& j) {
        fail(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                       preview(j));
        return std::nullopt;
    }

    const Json& object_;
    std::string prefix_;
    std::optional<ApiError> error_;
};

constexpr std::size_t kMaxTokenIdsLogprob = 1024;

std::int64_t max_tokens_limit(const ProtocolOptions& o) {
    return o.max_model_len > 0 ? o.max_model_len : std::numeric_limits<std::int32_t>::max();
}

// Features that need machinery tessera does not have yet: a request that sets one is refused
// rather than served without it.
void reject_unsupported(FieldReader& r) {
    for (const char* name : {"lora_path", "lora_id", "custom_logit_processor"}) {
        if (r.has(name)) r.fail(name, "is not supported by this server");
    }
}

// custom_params: its thinking_budget (SGLang's grammar_manager.py, for --enable-strict-thinking);
// the rest is a custom logit processor's, which this server refuses, so it is read past.
void read_custom_params(FieldReader& r, GenerationParams& p) {
    const Json* j = r.get("custom_params");
    if (j == nullptr) return;
    if (!j->is_object()) return (void)r.wrong_type<bool>("custom_params", "an object", *j);
    FieldReader c(*j, r.param("custom_params."));
    if (auto v = c.integer("thinking_budget", std::numeric_limits<std::int32_t>::min(),
                           std::numeric_limits<std::int32_t>::max()))
        p.thinking_budget = *v;
    if (!c.ok()) r.fail_with(*c.error());
}

// /generate's session_params (io_struct.py SessionParams): every field optional but the id.
std::optional<SessionParams> read_session_params(FieldReader& r) {
    const Json* j = r.get("session_params");
    if (j == nullptr) return std::nullopt;
    if (!j->is_object()) return r.wrong_type<SessionParams>("session_params", "an object", *j);
    FieldReader s(*j, "session_params.");
    SessionParams p;
    if (auto id = s.string("id")) p.id = *id;
    else if (s.ok()) s.fail("id", "is required: the id /open_session answered");
    p.rid = s.string("rid");
    p.offset = s.integer("offset", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
    if (auto v = s.boolean("replace")) p.replace = *v;
    if (auto v = s.boolean("drop_previous_output")) p.drop_previous_output = *v;
    if (!s.ok()) {
        r.fail_with(*s.error());
        return std::nullopt;
    }
    return p;
}

// Constrained decoding: regex, json_schema (its JSON text, or the schema itself) and ebnf, at most
// one, as SGLang's sampling_params.py verify() says; structural_tag, which tessera's backend
// does not take, is refused by name.
void set_constraint(FieldReader& r, GenerationParams& p, OutputConstraint::Kind kind, std::string text,
                    const char* name) {
    const bool tag = p.constraint && p.constraint->kind == OutputConstraint::Kind::kStructuralTag;
    if (p.constraint && !tag) return r.fail(name, "Only one of regex, json_schema, or ebnf can be set.");
    p.constraint = OutputConstraint{kind, std::move(text)};
}

void read_constraint(FieldReader& r, GenerationParams& p) {
    if (const Json* j = r.get("regex"); j && !j->is_null()) {
        if (!j->is_string()) {
            r.wrong_type<int>("regex", "a string", *j);
            return;
        }
        set_constraint(r, p, OutputConstraint::Kind::kRegex, j->get<std::string>(), "regex");
    }
    if (const Json* j = r.get("json_schema"); j && !j->is_null()) {
        if (!j->is_string() && !j->is_object() && !j->is_boolean()) {
            r.wrong_type<int>("json_schema", "a JSON schema (an object, or its JSON text)", *j);
            return;
        }
        set_constraint(r, p, OutputConstraint::Kind::kJsonSchema, j->is_string() ? j->get<std::string>() : dump(*j),
                       "json_schema");
    }
    if (const Json* j = r.get("ebnf"); j && !j->is_null()) {
        if (!j->is_string()) {
            r.wrong_type<int>("ebnf", "a string", *j);
            return;
        }
        set_constraint(r, p, OutputConstraint::Kind::kEbnf, j->get<std::string>(), "ebnf");
    }
    // SGLang's grammar backend takes json_schema, regex and ebnf before a structural_tag
    // (scheduler.py's elif chain), so with one of them the tag is not used.
    if (const Json* j = r.get("structural_tag"); j && !j->is_null()) {
        if (!j->is_string() && !j->is_object()) {
            r.wrong_type<int>("structural_tag", "a structural tag (an object, or its JSON text)", *j);
            return;
        }
        std::string tag = j->is_string() ? j->get<std::string>() : dump(*j);
        if (!p.constraint) p.constraint = OutputConstraint{OutputConstraint::Kind::kStructuralTag, std::move(tag)};
    }
}

// OpenAI's response_format (SGLang's serving_chat.py _build_sampling_params): json_object asks
// for any object, json_schema for an instance of json_schema.schema.
void read_response_format(FieldReader& r, GenerationParams& p) {
    const Json* rf = r.get("response_format");
    if (rf == nullptr || rf->is_null()) return;
    const char* expected = "must be {\"type\": \"text\"}, {\"type\": \"json_object\"}, {\"type\": \"json_schema\", "
                           "\"json_schema\": {\"name\": ..., \"schema\": {...}}} or {\"type\": \"structural_tag\", "
                           "\"format\": {...}} (or the legacy \"structures\": [...], \"triggers\": [...])";
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
        return r.fail("response_format", expected);
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "text") return;
    if (type == "json_object")
        return set_constraint(r, p, OutputConstraint::Kind::kJsonSchema, R"({"type": "object"})", "response_format");
    if (type == "json_schema") {
        const Json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
        if (js == nullptr || !js->is_object())
            return r.fail("response_format.json_schema", "is required with type json_schema: {\"name\": ..., "
                                                         "\"schema\": {...}}");
        if (!js->contains("schema") || !((*js)["schema"].is_object() || (*js)["schema"].is_boolean()))
            return r.fail("response_format.json_schema.schema", "is required: the JSON schema of the output");
        return set_constraint(r, p, OutputConstraint::Kind::kJsonSchema, dump((*js)["schema"]), "response_format");
    }
    // serving_chat.py _build_sampling_params: the whole response_format becomes the
    // structural_tag sampling parameter, xgrammar's {"type": "structural_tag", "format": {...}}
    // or the legacy shape.
    if (type == "structural_tag") {
        if (rf->contains("format") && !(*rf)["format"].is_object())
            return r.fail("response_format.format", "must be an object: xgrammar's structural tag format");
        for (const char* key : {"structures", "triggers"})
            if (!rf->contains("format") && (!rf->contains(key) || !(*rf)[key].is_array()))
                return r.fail(std::string("response_format.") + key,
                              "is required with type structural_tag: a list (or give \"format\": {...}, "
                              "xgrammar's structural tag)");
        if (!p.constraint) p.constraint = OutputConstraint{OutputConstraint::Kind::kStructuralTag, dump(*rf)};
        return;
    }
    r.fail("response_format", expected);
}

// logit_bias: {"<token id>": bias in [-100, 100], ...} (OpenAI); ids are checked against the
// vocabulary by the backend.
constexpr std::size_t kMaxLogitBias = 1024;
void read_logit_bias(FieldReader& r, GenerationParams& p) {
    const Json* j = r.get("logit_bias");
    if (j == nullptr) return;
    if (!j->is_object()) return r.fail("logit_bias", "must be an object mapping token ids to biases");
    p.logit_bias.clear();  // replaces --preferred-sampling-params' map, as a request's keys do
    if (j->size() > kMaxLogitBias)
        return r.fail("logit_bias", "may bias at most " + std::to_string(kMaxLogitBias) + " tokens");
    for (auto it = j->begin(); it != j->end(); ++it) {
        const std::string& key = it.key();
        std::int64_t id = -1;
        if (!key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
            id = std::stoll(key);
        if (id < 0 || id > std::numeric_limits<std::int32_t>::max())
            return r.fail("logit_bias", "keys must be token ids (non-negative integers as strings), got \"" + key + "\"");
        if (!it->is_number() || it->get<double>() < -100.0 || it->get<double>() > 100.0)
            return r.fail("logit_bias", "values must be numbers in [-100, 100] (token " + key + ")");
        p.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(it->get<double>()));
    }
}

// "priority" beside the sampling fields, on every route as in SGLang's request types.
// return_hidden_states (GenerateReqInput, and the OpenAI requests): false, true (full) or "last";
// the engine checks it against what the server allows.
void read_return_hidden_states(FieldReader& r, GenerationParams& p) {
    const Json* j = r.get("return_hidden_states");
    if (j == nullptr) return;
    if (j->is_boolean()) {
        p.return_hidden_states = j->get<bool>() ? HiddenStatesMode::kFull : HiddenStatesMode::kNone;
    } else if (j->is_string() && j->get<std::string>() == "last") {
        p.return_hidden_states = HiddenStatesMode::kLast;
    } else {
        r.fail("return_hidden_states", "must be a boolean or the string literal 'last'");
    }
}

// GenerateReqInput's return_routed_experts and routed_experts_start_len (the OpenAI requests
// have them too); the engine checks the start against the prompt.
void read_routed_experts(FieldReader& r, GenerationParams& p) {
    if (auto v = r.boolean("return_routed_experts")) p.return_routed_experts = *v;
    if (auto v = r.integer("routed_experts_start_len", 0, std::numeric_limits<std::int64_t>::max()))
        p.routed_experts_start_len = *v;
}

void read_priority(FieldReader& r, GenerationParams& p) {
    if (auto v = r.integer("priority", std::numeric_limits<std::int32_t>::min(),
                           std::numeric_limits<std::int32_t>::max()))
        p.priority = static_cast<std::int32_t>(*v);
}

// Sampling fields shared by the OpenAI routes (and, with OpenAI names, SGLang's extras).
void read_openai_sampling(FieldReader& r, ApiKind kind, const ProtocolOptions& o,
                          GenerationParams& p) {
    const std::int64_t limit = max_tokens_limit(o);
    const std::int64_t min_tokens = kind == ApiKind::kChatCompletion ? 1 : 0;
    read_logit_bias(r, p);
    if (auto v = r.integer("max_tokens", min_tokens, limit)) p.max_new_tokens = *v;
    if (auto v = r.integer("max_completion_tokens", min_tokens, limit)) p.max_new_tokens = *v;
    if (auto v = r.number("temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
    if (auto v = r.number("top_p", 0.0, 1.0, /*lo_open=*/true)) p.top_p = static_cast<float>(*v);
    if (auto v = r.integer("top_k", -1, std::numeric_limits<std::int32_t>::max())) {
        if (*v == 0) r.fail("top_k", "must be -1 (disabled) or at least 1, got 0");
        p.top_k = static_cast<int>(*v);
    }
    if (auto v = r.number("min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
    if (auto v = r.integer("seed", std::numeric_limits<std::int64_t>::min(),
                           std::numeric_limits<std::int64_t>::max()))
        p.seed = static_cast<std::uint64_t>(*v);
    if (auto v = r.strings("stop", kMaxOpenAiStop)) p.stop = std::move(*v);
    if (const Json* j = r.get("stop_token_ids")) {
        if (auto ids = r.token_ids("stop_token_ids", *j, /*allow_empty=*/true)) p.stop_token_ids = *ids;
    }
    if (auto v = r.number("frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
    if (auto v = r.number("presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
    if (auto v = r.boolean("ignore_eos")) p.ignore_eos = *v;
    if (auto v = r.boolean("skip_special_tokens")) p.skip_special_tokens = *v;
    read_priority(r, p);
    read_return_hidden_states(r, p);
    read_routed_experts(r, p);
    read_constraint(r, p);
    read_response_format(r, p);
    read_custom_params(r, p);
    reject_unsupported(r);
}

// Stream flags shared by the OpenAI routes.
void read_stream(FieldReader& r, const ProtocolOptions& o, ParsedRequest& out) {
    if (auto v = r.boolean("stream")) out.stream = *v;
    out.include_usage = out.stream && o.stream_include_usage;  // unless stream_options says
    if (const Json* so = r.get("stream_options")) {
        if (!so->is_object()) {
            r.wrong_type<int>("stream_options", "an object", *so);
            return;
        }
        if (!out.stream) {
            r.fail("stream_options", "is only allowed when 'stream' is true");
            return;
        }
        FieldReader sr(*so, "stream_options.");
        if (auto v = sr.boolean("include_usage")) out.include_usage = *v;
        if (!sr.ok()) r.fail_with(*sr.error());
    }
}

int read_n(FieldReader& r, const ProtocolOptions& o) {
    return static_cast<int>(r.integer("n", 1, o.max_n).value_or(1));
}

// Text-only content: a string, or a list of {"type": "text", "text": …} joined with "\n".
void normalize_content(FieldReader& r, const std::string& param, const Json& content, Json& out) {
    if (content.is_string()) {
        out = content;
        return;
    }
    if (!content.is_array()) {
        r.wrong_type<int>(param, "a string or a list of content parts", content);
        return;
    }
    std::string text;
    for (std::size_t k = 0; k < content.size(); ++k) {
        const Json& part = content[k];
        const std::string pp = param + "[" + std::to_string(k) + "]";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            r.fail(pp, "must be an object with a string 'type'");
            return;
        }
        const std::string type = part["type"].get<std::string>();
        if (type != "text") {
            r.fail(pp + ".type", "'" + type + "' is not supported (text-only model)");
            return;
        }
        if (!part.contains("text") || !part["text"].is_string()) {
            r.fail(pp + ".text", "must be a string");
            return;
        }
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
    }
    out = text;
}

std::optional<Json> normalize_messages(FieldReader& r, const Json& messages) {
    if (!messages.is_array()) return r.wrong_type<Json>("messages", "a list of messages", messages);
    if (messages.empty()) {
        r.fail("messages", "must contain at least one message");
        return std::nullopt;
    }
    Json out = Json::array();
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return r.wrong_type<Json>(param, "an object", m);
        auto role_it = m.find("role");
        if (role_it == m.end() || !role_it->is_string()) {
            r.fail(param + ".role", "is required and must be a string");
            return std::nullopt;
        }
        const std::string role = role_it->get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
            role != "developer") {
            r.fail(param + ".role", "must be one of system, user, assistant, tool, developer; got '" +
                                        role + "'");
            return std::nullopt;
        }
        Json msg = Json::object();
        msg["role"] = role;
        auto content_it = m.find("content");
        if (content_it == m.end() || content_it->is_null()) {
            if (role != "assistant") {
                r.fail(param + ".content", "is required for role '" + role + "'");
                return std::nullopt;
            }
            msg["content"] = nullptr;
        } else {
            normalize_content(r, param + ".content", *content_it, msg["content"]);
            if (!r.ok()) return std::nullopt;
        }
        for (auto it = m.begin(); it != m.end(); ++it) {
            if (it.key() != "role" && it.key() != "content") msg[it.key()] = it.value();
        }
        out.push_back(std::move(msg));
    }
    return out;
}

// The schema tool_choice "required" (any offered function) or a named function constrains the
// output to: a JSON list of {"name", "parameters"} calls, at most one unless parallel_tool_calls
// (SGLang's function_call/utils.py get_json_schema_constraint). The tools' $defs move to the
// root, where their "#/$defs/..." references point.
std::optional<Json> forced_calls_schema(FieldReader& r, const Json& tools, const std::optional<std::string>& named,
                                        bool parallel) {
    const auto call_schema = [](const Json& function) {
        Json parameters = function.contains("parameters") && function["parameters"].is_object() &&
                                  !function["parameters"].empty()
                              ? function["parameters"]
                              : Json{{"type", "object"}, {"properties", Json::object()}};
        return Json{{"properties", {{"name", {{"type", "string"}, {"enum", Json::array({function["name"]})}}},
                                    {"parameters", std::move(parameters)}}},
                    {"required", Json::array({"name", "parameters"})}};
    };
    Json defs = Json::object();
    Json options = Json::array();
    for (const Json& tool : tools) {
        const Json& function = tool["function"];
        if (named && function["name"] != *named) continue;
        if (function.contains("parameters") && function["parameters"].is_object() &&
            function["parameters"].contains("$defs") && function["parameters"]["$defs"].is_object()) {
            for (const auto& [name, schema] : function["parameters"]["$defs"].items()) {
                if (defs.contains(name) && defs[name] != schema) {
                    r.fail("tools", "Tool definition '" + name + "' has multiple schemas, which is not supported.");
                    return std::nullopt;
                }
                defs[name] = schema;
            }
        }
        options.push_back(call_schema(function));
    }
    if (options.empty()) {
        r.fail("tool_choice", "names the function '" + named.value_or("") + "', which is not among the tools");
        return std::nullopt;
    }
    Json schema = {{"type", "array"}, {"minItems", 1}};
    schema["items"] = named ? options[0] : Json{{"type", "object"}, {"anyOf", std::move(options)}};
    if (!parallel) schema["maxItems"] = 1;
    if (!defs.empty()) schema["$defs"] = std::move(defs);
    return schema;
}

struct OfferedTools {
    Json tools;
    std::optional<Json> forced_schema;  // tool_choice "required" or a named function
};

// tools must be [{"type": "function", "function": {"name": …}}]; returns nullopt when
// tools are absent or tool_choice is "none" (the template then renders no tools).
// tool_choice: "auto", "none", "required", or {"type": "function", "function": {"name": …}}.
std::optional<OfferedTools> read_tools(FieldReader& r) {
    const Json* tools = r.get("tools");
    bool required = false;
    std::optional<std::string> named;
    if (const Json* choice = r.get("tool_choice"); choice && !choice->is_null()) {
        if (choice->is_object() && choice->value("type", "") == "function" && choice->contains("function") &&
            (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
            (*choice)["function"]["name"].is_string()) {
            named = (*choice)["function"]["name"].get<std::string>();
        } else if (!choice->is_string() ||
                   (*choice != "auto" && *choice != "none" && *choice != "required")) {
            r.fail("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                  "\"function\": {\"name\": …}}, got " + preview(*choice));
            return std::nullopt;
        }
        if (*choice == "none") return std::nullopt;
        required = *choice == "required";
        if ((required || named) && !tools) {
            r.fail("tool_choice", "asks for a tool call, but the request offers no tools");
            return std::nullopt;
        }
    }
    if (!tools) return std::nullopt;
    if (!tools->is_array()) {
        r.wrong_type<Json>("tools", "a list of tools", *tools);
        return std::nullopt;
    }
    for (std::size_t i = 0; i < tools->size(); ++i) {
        const Json& t = (*tools)[i];
        const std::string param = "tools[" + std::to_string(i) + "]";
        if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
            !t["function"].is_object() || !t["function"].contains("name") ||
            !t["function"]["name"].is_string()) {
            r.fail(param, "must be {\"type\": \"function\", \"function\": {\"name\": …}}");
            return std::nullopt;
        }
    }
    OfferedTools offered{*tools, std::nullopt};
    if (required || named) {
        const bool parallel = r.boolean("parallel_tool_calls").value_or(true);
        offered.forced_schema = forced_calls_schema(r, *tools, named, parallel);
        if (!offered.forced_schema) return std::nullopt;
    }
    return offered;
}

// function_call_parser.py get_structure_constraint / get_structure_tag: with tool_choice
// "auto", once any offered function is strict, every call the model writes in its
// --tool-call-parser format is held to a structural tag: one structure per tool (a strict one's
// arguments to its parameters schema, another's to any JSON), triggered by the format's call
// marker. nullopt when no tool is strict or the format has no structure (pythonic).
std::optional<Json> strict_tools_tag(const ToolCallFormat& format, const Json& tools) {
    const auto strict = [](const Json& t) {
        const auto it = t["function"].find("strict");
        return it != t["function"].end() && *it == true;
    };
    if (std::none_of(tools.begin(), tools.end(), strict)) return std::nullopt;
    Json structures = Json::array();
    Json triggers = Json::array();
    for (const Json& t : tools) {
        const auto structure = tool_call_structure(format, t["function"]["name"].get<std::string>());
        if (!structure) return std::nullopt;
        const Json& parameters = t["function"].contains("parameters") ? t["function"]["parameters"] : Json();
        structures.push_back({{"begin", structure->begin},
                              {"schema", strict(t) && parameters.is_object() ? parameters : Json::object()},
                              {"end", structure->end}});
        if (std::find(triggers.begin(), triggers.end(), structure->trigger) == triggers.end())
            triggers.push_back(structure->trigger);
    }
    return Json{{"type", "structural_tag"}, {"structures", std::move(structures)}, {"triggers", std::move(triggers)}};
}

void parse_chat(FieldReader& r, const ProtocolOptions& o, ParsedRequest& out,
                GenerationRequest& base) {
    const Json* messages = r.get("messages");
    if (!messages) {
        if (r.ok()) r.fail("messages", "is required");
        return;
    }
    auto normalized = normalize_messages(r, *messages);
    if (!normalized) return;
    Json chat = Json::object();
    chat["messages"] = std::move(*normalized);
    const std::optional<OfferedTools> tools = read_tools(r);
    if (!r.ok()) return;
    if (tools) {
        if (o.tool_calls || tools->forced_schema) {
            out.tool_calls = tools->forced_schema ? forced_tool_call_format() : *o.tool_calls;
            for (const Json& t : tools->tools) out.tool_names.push_back(t["function"]["name"].get<std::string>());
            // serving_chat.py _get_history_tool_calls_cnt
            for (const Json& m : chat["messages"])
                if (m["role"] == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array())
                    out.earlier_tool_calls += static_cast<int>(m["tool_calls"].size());
        }
        chat["tools"] = tools->tools;
    }
    // The server's defaults first (checked at start-up), the request's own on top.
    if (!o.default_chat_template_kwargs.empty()) {
        const Json defaults = Json::parse(o.default_chat_template_kwargs, nullptr, false);
        if (defaults.is_object())
            for (const auto& [key, value] : defaults.items()) chat[key] = value;
    }
    if (const Json* kwargs = r.get("chat_template_kwargs")) {
        if (!kwargs->is_object()) {
            r.wrong_type<int>("chat_template_kwargs", "an object", *kwargs);
            return;
        }
        for (auto it = kwargs->begin(); it != kwargs->end(); ++it) {
            if (it.key() == "messages" || it.key() == "tools") {
                r.fail("chat_template_kwargs." + it.key(), "cannot override the request's " + it.key());
                return;
            }
            chat[it.key()] = it.value();
        }
    }
    base.input.chat_json = dump(chat);
    if (auto v = r.boolean("continue_final_message")) base.input.continue_final_message = *v;
    const bool continues_answer =
        base.input.continue_final_message && chat["messages"].back()["role"] == "assistant";
    // serving_chat.py: the reasoning parser runs unless the request turns it off; the output
    // starts inside the reasoning when the format or the template says so, or the request's
    // thinking switch (chat_template_kwargs) is on.
    const bool separate = r.boolean("separate_reasoning").value_or(true);
    if (auto v = r.boolean("stream_reasoning")) out.stream_reasoning = *v;
    if (o.reasoning && separate) {
        out.reasoning = o.reasoning;
        const std::string& key = o.reasoning->request_switch;
        const auto on = !key.empty() && chat.contains(key) ? chat[key] : Json();
        out.force_reasoning = o.template_opens_reasoning || (on.is_boolean() && on.get<bool>());
    }
    base.params.max_new_tokens = -1;  // chat default: up to the context length
    if (o.chat_temperature) base.params.temperature = *o.chat_temperature;
    if (o.chat_top_p) base.params.top_p = *o.chat_top_p;
    if (o.chat_top_k) base.params.top_k = *o.chat_top_k;
    if (o.chat_min_p) base.params.min_p = *o.chat_min_p;
    read_openai_sampling(r, ApiKind::kChatCompletion, o, base.params);
    if (tools && tools->forced_schema) {
        // serving_chat.py _build_sampling_params: a constraint the request sets itself wins, and the
        // calls are then parsed by --tool-call-parser as with "auto".
        if (!base.params.constraint) {
            base.params.constraint = OutputConstraint{OutputConstraint::Kind::kJsonSchema, dump(*tools->forced_schema)};
        } else if (o.tool_calls) {
            out.tool_calls = *o.tool_calls;
        } else {
            out.tool_calls.reset();
            out.tool_names.clear();
        }
    } else if (tools && o.tool_calls && !base.params.constraint) {
        if (auto tag = strict_tools_tag(*o.tool_calls, tools->tools))
            base.params.constraint = OutputConstraint{OutputConstraint::Kind::kStructuralTag, dump(*tag)};
    }
    // serving_chat.py _process_messages: with tools on offer the output keeps its special
    // tokens, which is where many models' call markers are (Llama 3's <|python_tag|>).
    if (tools) base.params.skip_special_tokens = false;
    // _patch_reasoning_skip_special_tokens: Mistral's [THINK] markers are special tokens, kept
    // when the request asks for reasoning.
    bool mistral_reasons = false;
    if (o.reasoning && o.reasoning->name == "mistral") {
        if (auto effort = r.string("reasoning_effort"); effort && *effort != "none") {
            base.params.skip_special_tokens = false;
            mistral_reasons = true;
        }
    }
    // serving_chat.py _get_reasoning_from_request: whether the output begins with reasoning,
    // whose tokens are then counted. A thinking switch decides when the format has one
    // (enable_thinking defaults on, as Qwen3's and GLM-4.5's templates; DeepSeek's thinking off).
    if (o.reasoning) {
        const ReasoningFormat& f = *o.reasoning;
        bool on = f.name == "mistral" ? mistral_reasons : true;
        if (!f.request_switch.empty()) {
            const Json v = chat.contains(f.request_switch) ? chat[f.request_switch] : Json();
            on = v.is_boolean() ? v.get<bool>() : f.request_switch == "enable_thinking";
        }
        base.params.require_reasoning = f.always_reasoning || o.template_opens_reasoning || on;
        if (o.conversation_opens_think && base.params.require_reasoning && !continues_answer) {
            base.input.chat_prompt_suffix = "<think>";
            out.force_reasoning = out.reasoning.has_value();
        }
    }
    if (!o.conversation_stop.empty() && !base.params.ignore_eos)
        base.params.stop.insert(base.params.stop.begin(), o.conversation_stop.begin(), o.conversation_stop.end());
    if (auto v = r.boolean("logprobs")) out.logprobs = *v;
    if (auto v = r.integer("top_logprobs", 0, o.max_top_logprobs)) {
        if (!out.logprobs && *v > 0) r.fail("top_logprobs", "requires 'logprobs' to be true");
        out.top_logprobs = static_cast<int>(*v);
    }
}

// The most inputs one batched /generate or completion may hold (before n multiplies them).
constexpr std::size_t kMaxBatchInputs = 256;

// prompt: a string, a list of token ids, or a list of either (a batch: one choice per prompt, and
// per further sample of n, in SGLang's order). `batch` gets one request per prompt when there
// are several; otherwise `base` holds the one.
void parse_completion(FieldReader& r, const ProtocolOptions& o, ParsedRequest& out, GenerationRequest& base,
                      std::vector<GenerationRequest>& batch) {
    const Json* prompt = r.get("prompt");
    if (!prompt) {
        if (r.ok()) r.fail("prompt", "is required");
        return;
    }
    std::vector<GenerationInput> inputs;
    if (prompt->is_string()) {
        inputs.push_back({.text = prompt->get<std::string>()});
    } else if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
        for (std::size_t i = 0; i < prompt->size() && r.ok(); ++i) {
            const Json& p = (*prompt)[i];
            if (p.is_string()) {
                inputs.push_back({.text = p.get<std::string>()});
            } else if (p.is_array()) {
                inputs.push_back({.input_ids = r.token_ids("prompt", p, /*allow_empty=*/false)});
            } else {
                return r.fail("prompt", "a list of prompts holds strings or lists of token ids (item " +
                                            std::to_string(i) + ")");
            }
        }
        if (inputs.size() > kMaxBatchInputs)
            return r.fail("prompt", "a batch holds at most " + std::to_string(kMaxBatchInputs) + " prompts");
    } else if (prompt->is_array()) {
        inputs.push_back({.input_ids = r.token_ids("prompt", *prompt, /*allow_empty=*/false)});
    } else {
        r.wrong_type<int>("prompt", "a string, a list of token ids, or a list of either", *prompt);
        return;
    }
    if (!r.ok()) return;
    read_openai_sampling(r, ApiKind::kCompletion, o, base.params);
    if (auto v = r.integer("logprobs", 0, o.max_top_logprobs)) {
        out.logprobs = true;
        out.top_logprobs = static_cast<int>(*v);
    }
    if (auto v = r.boolean("echo")) out.echo = *v;
    // serving_completions.py _convert_to_internal_request: echo with logprobs scores the prompt.
    if (out.echo && out.logprobs) out.logprob_start_len = 0;
    if (auto suffix = r.string("suffix"); suffix && !suffix->empty()) {
        // serving_completions.py: generate_completion_prompt_from_request.
        const auto& t = o.completion_template;
        for (GenerationInput& input : inputs) {
            if (!t) {
                r.fail("suffix", "needs a fill-in-the-middle template: start the server with --completion-template "
                                 "deepseek_coder, star_coder or qwen_coder");
            } else if (!input.text) {
                r.fail("suffix", "needs a text prompt (not token ids) to make a fill-in-the-middle prompt");
            } else {
                const std::string& text = *input.text;
                input.text = t->middle_at_end ? t->fim_begin + text + t->fim_end + *suffix + t->fim_middle
                                              : t->fim_begin + text + t->fim_middle + *suffix + t->fim_end;
            }
            if (!r.ok()) return;
        }
    }
    if (auto v = r.integer("best_of", 1, o.max_n); v && *v > 1)
        r.fail("best_of", "is not supported by this server (use n)");
    if (inputs.size() == 1) {
        base.input = std::move(inputs.front());
        return;
    }
    for (GenerationInput& input : inputs) batch.push_back({"", std::move(input), base.params});
}

// SGLang's sampling_params fields that /generate reads.
constexpr std::array<std::string_view, 15> kNativeSamplingKeys = {
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "stop",
    "stop_token_ids", "ignore_eos", "skip_special_tokens", "stream_interval", "logit_bias", "sampling_seed", "n"};

// /generate's sampling_params (SGLang's SamplingParams names); sets only the fields given.
void read_native_sampling(FieldReader& s, const ProtocolOptions& o, GenerationParams& p, int& n) {
    if (auto v = s.integer("max_new_tokens", 0, max_tokens_limit(o))) p.max_new_tokens = *v;
    if (auto v = s.number("temperature", 0.0, 100.0)) p.temperature = static_cast<float>(*v);
    if (auto v = s.number("top_p", 0.0, 1.0, true)) p.top_p = static_cast<float>(*v);
    if (auto v = s.integer("top_k", -1, std::numeric_limits<std::int32_t>::max())) {
        if (*v == 0) s.fail("top_k", "must be -1 (disabled) or at least 1, got 0");
        p.top_k = static_cast<int>(*v);
    }
    if (auto v = s.number("min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
    if (auto v = s.number("frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
    if (auto v = s.number("presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
    if (auto v = s.strings("stop", kMaxNativeStop)) p.stop = std::move(*v);
    if (const Json* j = s.get("stop_token_ids")) {
        if (auto t = s.token_ids("stop_token_ids", *j, true)) p.stop_token_ids = *t;
    }
    if (auto v = s.boolean("ignore_eos")) p.ignore_eos = *v;
    if (auto v = s.boolean("skip_special_tokens")) p.skip_special_tokens = *v;
    if (auto v = s.integer("stream_interval", 1, std::numeric_limits<std::int32_t>::max()))
        p.stream_interval = static_cast<int>(*v);
    read_logit_bias(s, p);
    if (auto v = s.integer("sampling_seed", std::numeric_limits<std::int64_t>::min(),
                           std::numeric_limits<std::int64_t>::max()))
        p.seed = static_cast<std::uint64_t>(*v);
    if (auto v = s.integer("n", 1, o.max_n)) n = static_cast<int>(*v);
}

// One /generate sampling_params object into `p` (and its n); false when it failed `r` with the
// object's first error.
bool read_sampling_object(FieldReader& r, const Json& object, const std::string& prefix, const ProtocolOptions& o,
                          GenerationParams& p, int& n) {
    FieldReader s(object, prefix);
    read_native_sampling(s, o, p, n);
    read_constraint(s, p);
    read_custom_params(s, p);
    reject_unsupported(s);
    if (!s.ok()) r.fail_with(*s.error());
    return s.ok();
}

// /generate's log-probability fields of one input.
struct InputLogprobs {
    bool on = false;                      // return_logprob
    int top = 0;                          // top_logprobs_num
    std::int64_t start = -1;              // logprob_start_len: -1 asks for the output's only
    std::vector<std::int32_t> token_ids;  // token_ids_logprob; empty asks for none
    void apply(GenerationParams& p) const {
        p.logprobs = on;
        p.top_logprobs = top;
        p.logprob_start_len = start;
        p.token_ids_logprob = token_ids;
    }
};

// return_logprob, top_logprobs_num, logprob_start_len and token_ids_logprob, each one value for
// every input or, for a batch, a list of one per input (io_struct.py _normalize_logprob_params;
// token_ids_logprob's per-input form is a list of lists). Returns the name of a field given as a
// list ("" for none), which n > 1 refuses.
std::string read_input_logprobs(FieldReader& r, const ProtocolOptions& o, bool batched,
                                std::vector<InputLogprobs>& out) {
    std::string list_field;
    const auto each = [&](const char* name, bool list_form_is_nested, const auto& read_one) {
        const Json* j = r.get(name);
        if (j == nullptr) return;
        const bool nested = j->is_array() && !j->empty() && (*j)[0].is_array();
        const bool per_input = batched && j->is_array() && (list_form_is_nested ? nested : true);
        if (!per_input) {
            for (std::size_t i = 0; i < out.size() && r.ok(); ++i) read_one(name, *j, out[i]);
            return;
        }
        if (j->size() != out.size())
            return r.fail(name, "a list needs one value per input of the batch (" + std::to_string(out.size()) +
                                    "), got " + std::to_string(j->size()));
        list_field = name;
        for (std::size_t i = 0; i < out.size() && r.ok(); ++i)
            read_one(std::string(name) + "[" + std::to_string(i) + "]", (*j)[i], out[i]);
    };
    each("return_logprob", false, [&](const std::string& name, const Json& v, InputLogprobs& lp) {
        if (!v.is_boolean()) return (void)r.wrong_type<bool>(name, "a boolean, or for a batch a list of them", v);
        lp.on = v.get<bool>();
    });
    each("top_logprobs_num", false, [&](const std::string& name, const Json& v, InputLogprobs& lp) {
        if (auto k = r.integer_value(name, v, 0, o.max_top_logprobs)) lp.top = static_cast<int>(*k);
    });
    each("logprob_start_len", false, [&](const std::string& name, const Json& v, InputLogprobs& lp) {
        if (auto s = r.integer_value(name, v, -1, std::numeric_limits<std::int32_t>::max())) lp.start = *s;
    });
    each("token_ids_logprob", true, [&](const std::string& name, const Json& v, InputLogprobs& lp) {
        auto ids = r.token_ids(name, v, /*allow_empty=*/true);
        if (!ids) return;
        // Every scored row answers each id: a bound keeps a request's answer a reasonable size.
        if (ids->size() > kMaxTokenIdsLogprob)
            return r.fail(name, "holds at most " + std::to_string(kMaxTokenIdsLogprob) + " token ids");
        lp.token_ids = std::move(*ids);
    });
    return list_field;
}

// /generate (SGLang's GenerateReqInput): one input, or a batch, a list of texts or of id lists.
// A batch answers a list, in the order of io_struct.py _normalize_batch_inputs: every input
// once, then again for each further sample of n. sampling_params is one object for all, or one
// per input; rid one string, or one per input (its samples of n are RID-0, RID-1, ...).
// Single: `base` holds the request; batched: `batch` holds one per input, with its params.
void parse_generate(FieldReader& r, const ProtocolOptions& o, ParsedRequest& out, GenerationRequest& base, int& n,
                    std::vector<GenerationRequest>& batch, std::vector<std::string>& rids) {
    const Json* text = r.get("text");
    const Json* ids = r.get("input_ids");
    if (r.has("input_embeds") || r.has("image_data") || r.has("video_data") || r.has("audio_data"))
        return r.fail("input_embeds", "embeddings and multimodal inputs are not supported by this server");
    reject_unsupported(r);  // lora_path, custom_logit_processor, ... sit beside sampling_params
    if ((text != nullptr) == (ids != nullptr)) {
        if (r.ok()) r.fail("text", "exactly one of 'text' and 'input_ids' must be given");
        return;
    }
    std::vector<GenerationInput> inputs;
    const char* field = text ? "text" : "input_ids";
    if (text) {
        if (text->is_string()) {
            inputs.push_back({.text = text->get<std::string>()});
        } else if (text->is_array() && !text->empty()) {
            out.batched_input = true;
            for (std::size_t i = 0; i < text->size(); ++i) {
                if (!(*text)[i].is_string())
                    return r.fail("text", "a batch must be a list of strings (item " + std::to_string(i) + ")");
                inputs.push_back({.text = (*text)[i].get<std::string>()});
            }
        } else {
            r.wrong_type<int>("text", "a string or a non-empty list of strings", *text);
            return;
        }
    } else if (ids->is_array() && !ids->empty() && (*ids)[0].is_array()) {
        out.batched_input = true;
        for (std::size_t i = 0; i < ids->size() && r.ok(); ++i)
            inputs.push_back({.input_ids = r.token_ids("input_ids", (*ids)[i], false)});
    } else {
        inputs.push_back({.input_ids = r.token_ids("input_ids", *ids, false)});
    }
    if (inputs.size() > kMaxBatchInputs)
        return r.fail(field, "a batch holds at most " + std::to_string(kMaxBatchInputs) + " inputs");
    if (auto rid = r.get("rid")) {
        if (rid->is_string() && !rid->get<std::string>().empty()) {
            out.id = rid->get<std::string>();
        } else if (rid->is_array() && !rid->empty() &&
                   std::all_of(rid->begin(), rid->end(), [](const Json& x) { return x.is_string() && x != ""; })) {
            for (const Json& x : *rid) rids.push_back(x.get<std::string>());
        } else {
            return r.fail("rid", "must be a non-empty string, or for a batch a list of them");
        }
    }
    if (auto v = r.boolean("stream")) out.stream = *v;
    out.incremental = out.stream && o.incremental_streaming_output;
    std::vector<InputLogprobs> logprobs(inputs.size());
    const std::string logprob_list = read_input_logprobs(r, o, out.batched_input, logprobs);
    if (!r.ok()) return;
    out.return_text_in_logprobs = false;
    if (auto v = r.boolean("return_text_in_logprobs")) out.return_text_in_logprobs = *v;
    if (o.preferred_sampling) {
        base.params = o.preferred_sampling->params;
        n = o.preferred_sampling->n;
    } else {
        base.params.max_new_tokens = 128;  // SGLang's SamplingParams default
    }
    read_priority(r, base.params);
    read_return_hidden_states(r, base.params);
    read_routed_experts(r, base.params);
    // GenerateReqInput.require_reasoning: the client says the output begins with reasoning.
    if (auto v = r.boolean("require_reasoning")) base.params.require_reasoning = *v;
    if (!r.ok()) return;
    const Json* sp = r.get("sampling_params");
    std::vector<GenerationParams> params(inputs.size(), base.params);
    if (sp && sp->is_array()) {
        if (!out.batched_input || sp->size() != inputs.size()) {
            return r.fail("sampling_params", "a list needs one object per input of a batch (" +
                                                 std::to_string(inputs.size()) + "), got " +
                                                 std::to_string(sp->size()));
        }
        const int default_n = n;
        for (std::size_t i = 0; i < sp->size(); ++i) {
            const std::string prefix = "sampling_params[" + std::to_string(i) + "].";
            if (!(*sp)[i].is_object()) return r.fail(prefix.substr(0, prefix.size() - 1), "must be an object");
            int item_n = default_n;
            if (!read_sampling_object(r, (*sp)[i], prefix, o, params[i], item_n)) return;
            // io_struct.py: "The parallel_sample_num should be the same for all samples in sample params."
            if (i > 0 && item_n != n)
                return r.fail(prefix + "n", "The parallel_sample_num should be the same for all samples in sample "
                                            "params.");
            n = item_n;
        }
    } else if (sp) {
        if (!sp->is_object()) {
            r.wrong_type<int>("sampling_params", "an object, or for a batch a list of them", *sp);
            return;
        }
        if (!read_sampling_object(r, *sp, "sampling_params.", o, base.params, n)) return;
        std::fill(params.begin(), params.end(), base.params);
    }
    if (!logprob_list.empty() && n > 1)
        return r.fail(logprob_list, "Cannot use list " + logprob_list + " with parallel_sample_num > 1");
    base.params.session = read_session_params(r);
    if (base.params.session && (out.batched_input || n > 1))
        return r.fail("session_params", "continues one request: it takes one input and n 1");
    if (!r.ok()) return;
    if (!out.batched_input) {
        logprobs[0].apply(base.params);
        base.input = std::move(inputs.front());
        return;
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        logprobs[i].apply(params[i]);
        batch.push_back({"", std::move(inputs[i]), std::move(params[i])});
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Errors and helpers

std::string ApiError::to_json() const {
    Json err = Json::object();
    err["message"] = message;
    err["type"] = type;
    err["param"] = param.empty() ? Json(nullptr) : Json(param);
    err["code"] = code.empty() ? Json(nullptr) : Json(code);
    Json root = Json::object();
    root["error"] = std::move(err);
    return dump(root);
}

ApiError ApiError::from_status(const Status& status) {
    ApiError e{.message = status.message()};
    switch (status.code()) {
        case StatusCode::kInvalidArgument:
        case StatusCode::kOutOfRange:
        case StatusCode::kUnimplemented: e.http_status = 400; break;
        case StatusCode::kNotFound: e.http_status = 404; e.type = "not_found_error"; break;
        case StatusCode::kResourceExhausted:
        case StatusCode::kUnavailable: e.http_status = 503; e.type = "service_unavailable"; break;
        case StatusCode::kDeadlineExceeded: e.http_status = 504; e.type = "timeout"; break;
        default: e.http_status = 500; e.type = "internal_error"; break;
    }
    return e;
}

std::size_t find_invalid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;        // no overlongs
            if (c == 0xED) hi = 0x9F;        // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;        // ≤ U+10FFFF
        } else {
            return i;
        }
        if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
        for (std::size_t k = 2; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) return i;
        }
        i += len;
    }
    return std::string_view::npos;
}

std::string random_hex_id() {
    static std::atomic<std::uint64_t> counter{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const std::uint64_t a = rng();
    const std::uint64_t b = rng() ^ counter.fetch_add(1, std::memory_order_relaxed);
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    return buf;
}

std::string openai_finish_reason(const std::string& backend_reason) { return backend_reason; }

// ---------------------------------------------------------------------------------------
// Request parsing

// `body` parsed into `root`, a JSON object of valid UTF-8 nesting at most kMaxJsonDepth levels;
// otherwise the error to answer.
std::optional<ApiError> parse_json_object(std::string_view body, Json& root) {
    if (const std::size_t bad = find_invalid_utf8(body); bad != std::string_view::npos)
        return invalid("", "request body is not valid UTF-8 (invalid byte at offset " + std::to_string(bad) + ")");
    auto parsed = parse_json_text(body, kMaxJsonDepth, "request body");
    if (!parsed.ok()) return invalid("", parsed.status().message());
    root = std::move(parsed).value();
    if (!root.is_object())
        return invalid("", std::string("request body must be a JSON object, got ") + root.type_name());
    return std::nullopt;
}

OpenSessionOutcome parse_open_session(std::string_view body) {
    OpenSessionOutcome outcome;
    Json root;
    if (auto bad = parse_json_object(body, root)) {
        outcome.error = std::move(bad);
        return outcome;
    }
    FieldReader r(root, "");
    OpenSessionParams& p = outcome.params;
    if (auto v = r.integer("capacity_of_str_len", 0, std::numeric_limits<std::int64_t>::max()))
        p.capacity_of_str_len = *v;
    else if (r.ok())
        r.fail("capacity_of_str_len", "is required (SGLang's OpenSessionReqInput)");
    p.session_id = r.string("session_id");
    if (p.session_id && p.session_id->empty()) r.fail("session_id", "must not be empty");
    if (auto v = r.boolean("streaming")) p.streaming = *v;
    p.timeout_s = r.number("timeout", 0.0, 1e9, /*lo_open=*/true);
    outcome.error = r.error();
    return outcome;
}

namespace {

// A route's JSON object body as `read` takes it from its fields (failing through the reader),
// or the error to answer.
template <typename T, typename Read>
std::variant<T, ApiError> read_body(std::string_view body, Read read) {
    Json root;
    if (auto bad = parse_json_object(body, root)) return std::move(*bad);
    FieldReader r(root, "");
    T out = read(r);
    if (!r.ok()) return *r.error();
    return out;
}

}  // namespace

std::variant<std::string, ApiError> parse_close_session(std::string_view body) {
    return read_body<std::string>(body, [](FieldReader& r) {
        std::optional<std::string> id = r.string("session_id");
        if (!id && r.ok()) r.fail("session_id", "is required");
        return id.value_or("");
    });
}

std::variant<AbortSelection, ApiError> parse_abort_request(std::string_view body) {
    return read_body<AbortSelection>(body, [](FieldReader& r) {
        AbortSelection selection;
        if (auto rid = r.string("rid")) selection.rid = std::move(*rid);
        if (auto all = r.boolean("abort_all")) selection.all = *all;
        return selection;
    });
}

std::variant<Backend::PauseMode, ApiError> parse_pause_generation(std::string_view body) {
    return read_body<Backend::PauseMode>(body, [](FieldReader& r) {
        const std::optional<std::string> mode = r.string("mode");
        if (!mode || *mode == "abort") return Backend::PauseMode::kAbort;
        if (*mode == "retract") return Backend::PauseMode::kRetract;
        if (*mode == "in_place") return Backend::PauseMode::kInPlace;
        r.fail("mode", "is '" + *mode + "': give one of 'abort', 'retract', 'in_place'");
        return Backend::PauseMode::kAbort;
    });
}

std::variant<WeightUpdateInput, ApiError> parse_update_weights_from_disk(std::string_view body) {
    return read_body<WeightUpdateInput>(body, [](FieldReader& r) {
        WeightUpdateInput in;
        const std::optional<std::string> path = r.string("model_path");
        if (!path || path->empty()) r.fail("model_path", "is required: the folder of the new weights");
        in.update.model_path = path.value_or("");
        in.update.load_format = r.string("load_format").value_or("");
        if (auto v = r.boolean("abort_all_requests")) in.update.abort_all_requests = *v;
        if (auto v = r.boolean("flush_cache")) in.update.flush_cache = *v;
        in.weight_version = r.string("weight_version");
        for (const char* ignored : {"is_async", "torch_empty_cache", "keep_pause", "recapture_cuda_graph"})
            r.boolean(ignored);
        r.integer("token_step", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
        if (const Json* manifest = r.get("manifest"); manifest != nullptr && !manifest->is_object())
            r.fail("manifest", "must be an object");
        return in;
    });
}

std::variant<WeightVersionInput, ApiError> parse_update_weight_version(std::string_view body) {
    return read_body<WeightVersionInput>(body, [](FieldReader& r) {
        WeightVersionInput in;
        const std::optional<std::string> version = r.string("new_version");
        if (!version && r.ok()) r.fail("new_version", "is required: the weight version to report");
        in.new_version = version.value_or("");
        if (auto v = r.boolean("abort_all_requests")) in.abort_all_requests = *v;
        return in;
    });
}

std::variant<Backend::LoggingChange, ApiError> parse_configure_logging(std::string_view body) {
    return read_body<Backend::LoggingChange>(body, [](FieldReader& r) {
        Backend::LoggingChange change;
        change.log_requests = r.boolean("log_requests");
        change.log_requests_level = r.integer("log_requests_level", 0, 3);
        if (const std::optional<std::string> format = r.string("log_requests_format")) {
            if (*format == "text" || *format == "json") change.log_requests_json = *format == "json";
            else r.fail("log_requests_format", "is '" + *format + "': give 'text' or 'json'");
        }
        if (const std::optional<std::string> level = r.string("log_level")) {
            change.log_level = logging::level_named(ascii_lower(*level));
            if (!change.log_level) r.fail("log_level", "is '" + *level + "': give debug, info, warning or error");
        }
        if (r.has("crash_dump_folder"))
            r.fail("crash_dump_folder", "cannot change while serving: give --crash-dump-folder at launch");
        for (const char* dump :
             {"dump_requests_folder", "dump_requests_threshold", "dump_requests_exclude_meta_keys"}) {
            if (r.has(dump)) r.fail(dump, "is not supported: tessera does not dump requests to a folder");
        }
        return change;
    });
}

std::variant<std::string, ApiError> separate_reasoning_answer(std::string_view body) {
    std::optional<ReasoningFormat> format;
    std::variant<Json, ApiError> answer = read_body<Json>(body, [&](FieldReader& r) {
        const std::optional<std::string> text = r.string("text");
        if (!text && r.ok()) r.fail("text", "is required: the text to separate");
        const std::optional<std::string> name = r.string("reasoning_parser");
        if (!name && r.ok()) r.fail("reasoning_parser", "is required, e.g. \"deepseek-r1\" or \"qwen3\"");
        const bool blocks = r.boolean("return_blocks").value_or(false);
        if (!r.ok()) return Json();
        StatusOr<ReasoningFormat> found = reasoning_format(*name);
        if (!found.ok()) {
            r.fail("reasoning_parser", found.status().message());
            return Json();
        }
        // reasoning_parser.py ReasoningParser: the detector's own force_reasoning, streamed.
        const ReasoningParts parts = ReasoningDetector(*found, found->always_reasoning, true).parse_all(*text);
        Json out = {{"reasoning_text", parts.reasoning}, {"text", parts.normal}};
        if (blocks) {
            Json all = Json::array();
            if (!parts.reasoning.empty()) all.push_back({{"type", "reasoning"}, {"text", parts.reasoning}});
            if (!parts.normal.empty()) all.push_back({{"type", "text"}, {"text", parts.normal}});
            out["reasoning_blocks"] = parts.reasoning.empty() ? Json::array() : Json::array({parts.reasoning});
            out["text_blocks"] = parts.normal.empty() ? Json::array() : Json::array({parts.normal});
            out["blocks"] = std::move(all);
        }
        return out;
    });
    if (auto* error = std::get_if<ApiError>(&answer)) return std::move(*error);
    return std::get<Json>(answer).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::variant<std::string, ApiError> parse_function_call_answer(std::string_view body,
                                                                const std::optional<ToolCallFormat>& launch_format) {
    std::variant<Json, ApiError> answer = read_body<Json>(body, [&](FieldReader& r) {
        const std::optional<std::string> text = r.string("text");
        if (!text && r.ok()) r.fail("text", "is required: the text to parse");
        std::optional<ToolCallFormat> format = launch_format;
        if (const std::optional<std::string> name = r.string("tool_call_parser")) {
            StatusOr<ToolCallFormat> found = tool_call_format(*name);
            if (found.ok()) format = *found;
            else r.fail("tool_call_parser", found.status().message());
        } else if (!format && r.ok()) {
            r.fail("tool_call_parser", "is required: this server was started without --tool-call-parser");
        }
        std::vector<std::string> names;
        if (const Json* tools = r.get("tools"); tools && !tools->is_array()) {
            r.wrong_type<Json>("tools", "a list of tools", *tools);
        } else if (tools) {
            for (std::size_t i = 0; i < tools->size(); ++i) {
                const Json& t = (*tools)[i];
                if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
                    !t["function"].contains("name") || !t["function"]["name"].is_string()) {
                    r.fail("tools[" + std::to_string(i) + "]", "must be {\"type\": \"function\", \"function\": "
                                                               "{\"name\": …}}");
                    break;
                }
                names.push_back(t["function"]["name"].get<std::string>());
            }
        }
        if (!r.ok()) return Json();
        // function_call_parser.py parse_non_stream: no tools, or no call, leaves the text whole.
        const ToolCallParts parts = names.empty() ? ToolCallParts{.normal = *text}
                                                  : ToolCallDetector(*format, names).parse_all(*text);
        Json calls = Json::array();
        for (const ParsedToolCall& call : parts.calls) {
            const auto at = std::find(names.begin(), names.end(), call.name);
            calls.push_back({{"tool_index", at == names.end() ? -1 : static_cast<int>(at - names.begin())},
                             {"name", call.name},
                             {"parameters", call.arguments}});
        }
        return Json{{"normal_text", calls.empty() ? *text : parts.normal}, {"calls", std::move(calls)}};
    });
    if (auto* error = std::get_if<ApiError>(&answer)) return std::move(*error);
    return std::get<Json>(answer).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::variant<Backend::MemoryRegions, ApiError> parse_memory_occupation(std::string_view body) {
    const bool blank = std::all_of(body.begin(), body.end(), [](unsigned char c) { return std::isspace(c); });
    return read_body<Backend::MemoryRegions>(blank ? std::string_view("{}") : body, [](FieldReader& r) {
        const std::optional<std::vector<std::string>> tags = r.strings("tags", 8);
        if (!tags || tags->empty())
            return Backend::MemoryRegions{.weights = true, .kv_cache = true, .cuda_graph = true};
        Backend::MemoryRegions regions;
        for (const std::string& tag : *tags) {
            if (tag == "weights") regions.weights = true;
            else if (tag == "kv_cache") regions.kv_cache = true;
            else if (tag == "cuda_graph") regions.cuda_graph = true;
            else r.fail("tags", "holds '" + tag + "': give 'weights', 'kv_cache' or 'cuda_graph' (null: all)");
        }
        return regions;
    });
}

std::variant<TokenizeInput, ApiError> parse_tokenize_request(std::string_view body) {
    return read_body<TokenizeInput>(body, [](FieldReader& r) {
        TokenizeInput in;
        const Json* prompt = r.get("prompt");
        if (prompt && prompt->is_string()) {
            in.prompts.push_back(prompt->get<std::string>());
        } else if (prompt && prompt->is_array() &&
                   std::all_of(prompt->begin(), prompt->end(), [](const Json& p) { return p.is_string(); })) {
            in.batched = true;
            for (const Json& p : *prompt) in.prompts.push_back(p.get<std::string>());
        } else {
            r.fail("prompt", "is required: a string or a list of strings");
        }
        if (auto v = r.boolean("add_special_tokens")) in.add_special_tokens = *v;
        return in;
    });
}

std::variant<DetokenizeInput, ApiError> parse_detokenize_request(std::string_view body) {
    return read_body<DetokenizeInput>(body, [](FieldReader& r) {
        DetokenizeInput in;
        const auto ids = [](const Json& list, std::vector<std::int32_t>& out) {
            for (const Json& t : list) {
                if (!t.is_number_integer() || t.get<std::int64_t>() < INT32_MIN || t.get<std::int64_t>() > INT32_MAX)
                    return false;
                out.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
            }
            return true;
        };
        const Json* tokens = r.get("tokens");
        bool ok = tokens && tokens->is_array();
        if (ok && !tokens->empty() && (*tokens)[0].is_array()) {
            in.batched = true;
            for (const Json& list : *tokens) {
                in.sequences.emplace_back();
                ok = ok && list.is_array() && ids(list, in.sequences.back());
            }
        } else if (ok) {
            in.sequences.emplace_back();
            ok = ids(*tokens, in.sequences.back());
        }
        if (!ok) r.fail("tokens", "is required: a list of token ids, or a list of such lists");
        if (auto v = r.boolean("skip_special_tokens")) in.skip_special_tokens = *v;
        return in;
    });
}

ParseOutcome parse_request(ApiKind kind, std::string_view body, const ProtocolOptions& options,
                           std::string id) {
    ParseOutcome outcome;
    ParsedRequest& out = outcome.request;
    out.kind = kind;
    out.id = std::move(id);
    out.model = options.served_model_name;
    out.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();

    Json root;
    if (auto bad = parse_json_object(body, root)) {
        outcome.error = std::move(bad);
        return outcome;
    }

    FieldReader r(root, "");
    if (kind != ApiKind::kGenerate) {
        if (auto model = r.string("model"); model && *model != options.served_model_name) {
            outcome.error = ApiError{.http_status = 404,
                                     .message = "The model `" + *model + "` does not exist; this server serves `" +
                                                options.served_model_name + "`.",
                                     .param = "model",
                                     .code = "model_not_found"};
            return outcome;
        }
    }
    const bool embedding_route = kind == ApiKind::kEmbedding || kind == ApiKind::kEncode;
    if (embedding_route != options.embedding.has_value()) {
        // SGLang's tokenizer_manager.py messages for an embedding request to a generation model;
        // tessera also refuses the generation routes on an embedding server.
        outcome.error = invalid("", embedding_route ? "This model does not appear to be an embedding model by default. "
                                                      "Please add `--is-embedding` when launching the server or try "
                                                      "another model."
                                                    : "This server serves an embedding model (--is-embedding): use "
                                                      "POST /v1/embeddings or /encode");
        return outcome;
    }
    if (embedding_route) {
        outcome.error = parse_embedding_request(kind, root, options, out);
        return outcome;
    }
    if (kind == ApiKind::kScore) {
        outcome.error = parse_score_request(root, options, out);
        return outcome;
    }
    if (options.skip_tokenizer_init && kind != ApiKind::kGenerate) {
        outcome.error = invalid("", "this server runs without a tokenizer (--skip-tokenizer-init): send input_ids to "
                                    "POST /generate, which answers with output_ids");
        return outcome;
    }
    GenerationRequest base;
    int n = 1;
    std::vector<GenerationRequest> batch;  // a batched /generate or completion: one per input
    std::vector<std::string> rids;         // its rid list, one per answer
    switch (kind) {
        case ApiKind::kChatCompletion:
            parse_chat(r, options, out, base);
            n = read_n(r, options);
            read_stream(r, options, out);
            break;
        case ApiKind::kCompletion:
            parse_completion(r, options, out, base, batch);
            n = read_n(r, options);
            read_stream(r, options, out);
            break;
        case ApiKind::kGenerate:
            parse_generate(r, options, out, base, n, batch, rids);
            break;
        case ApiKind::kEmbedding:
        case ApiKind::kEncode:
        case ApiKind::kScore:
            break;  // parse_embedding_request and parse_score_request, above
    }
    if (batch.empty()) batch.push_back(base);
    // io_struct.py _normalize_rid: one rid per input (the samples of n are named after it).
    if (r.ok() && !rids.empty() && rids.size() != batch.size()) {
        r.fail("rid", "The specified rids length mismatch with the batch_size for batch processing. (" +
                          std::to_string(rids.size()) + " rids for " + std::to_string(batch.size()) + " inputs)");
    }
    if (r.ok() && options.skip_tokenizer_init) {
        const auto has_text = [](const GenerationRequest& b) { return b.input.text.has_value(); };
        if (std::any_of(batch.begin(), batch.end(), has_text))
            r.fail("text", "needs the tokenizer, which --skip-tokenizer-init leaves out; send input_ids");
        else if (std::any_of(batch.begin(), batch.end(),
                             [](const GenerationRequest& b) { return !b.params.stop.empty(); }))
            r.fail("sampling_params.stop", "strings need the tokenizer, which --skip-tokenizer-init leaves out; use "
                                           "stop_token_ids");
        out.token_ids_only = true;
    }
    if (!r.ok()) {
        outcome.error = r.error();
        return outcome;
    }
    // Every input once, then again for each further sample (io_struct.py _expand_inputs).
    const std::size_t answers = batch.size() * static_cast<std::size_t>(n);
    for (int round = 0; round < n; ++round) {
        for (const GenerationRequest& item : batch) {
            GenerationRequest req = item;
            if (kind != ApiKind::kGenerate) {  // /generate's are per input
                req.params.logprobs = out.logprobs;
                req.params.top_logprobs = out.top_logprobs;
                req.params.logprob_start_len = out.logprob_start_len;
                req.params.echo = out.echo;
            }
            if (kind != ApiKind::kGenerate && options.preferred_sampling)
                req.params.stream_interval = options.preferred_sampling->params.stream_interval;
            const std::size_t k = out.requests.size();
            if (!rids.empty()) {
                const std::string& rid = rids[k % batch.size()];
                req.request_id = n == 1 ? rid : rid + "-" + std::to_string(round);
            } else {
                req.request_id = answers == 1 ? out.id : out.id + "-" + std::to_string(k);
            }
            out.requests.push_back(std::move(req));
        }
    }
    return outcome;
}

StatusOr<PreferredSampling> parse_preferred_sampling_params(std::string_view json, const ProtocolOptions& options) {
    const Json root = Json::parse(json, nullptr, false);
    if (!root.is_object()) {
        return Status::InvalidArgument(fmt::format(
            "--preferred-sampling-params {}: give a JSON object of sampling parameters, e.g. "
            "'{{\"temperature\": 0.6, \"top_p\": 0.95}}'", json));
    }
    for (const auto& item : root.items()) {
        if (std::find(kNativeSamplingKeys.begin(), kNativeSamplingKeys.end(), item.key()) ==
            kNativeSamplingKeys.end()) {
            return Status::InvalidArgument(fmt::format(
                "--preferred-sampling-params: '{}' is not a sampling parameter tessera applies; it takes {}",
                item.key(), fmt::join(kNativeSamplingKeys, ", ")));
        }
    }
    PreferredSampling preferred{.json = std::string(json)};
    preferred.params.max_new_tokens = 128;  // SGLang's SamplingParams default
    FieldReader reader(root, "");
    read_native_sampling(reader, options, preferred.params, preferred.n);
    if (!reader.ok()) return Status::InvalidArgument("--preferred-sampling-params: " + reader.error()->message);
    if (options.skip_tokenizer_init && !preferred.params.stop.empty())
        return Status::InvalidArgument("--preferred-sampling-params: 'stop' strings need the tokenizer, which "
                                       "--skip-tokenizer-init leaves out; use stop_token_ids");
    return preferred;
}

}  // namespace tessera::server
