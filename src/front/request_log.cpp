#include "front/request_log.h"

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "base/text.h"

namespace tessera::front {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kPartialChars = 2048;  // level 2 (SGLang's max_length for partial logs)

std::string cut(std::string_view text, std::size_t chars) {
    if (text.size() <= chars) return std::string(text);
    return std::string(text.substr(0, chars)) + "...";
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// "Receive: rid=..., prompt_tokens=..." or, as JSON, the fields and "event": "receive".
void emit(std::string_view label, Json line, bool json) {
    if (json) {
        line["event"] = ascii_lower(label);
        TSR_LOG_C(INFO, "request", "{}", dump(line));
        return;
    }
    std::string text;
    for (const auto& [key, value] : line.items())
        text += (text.empty() ? "" : ", ") + key + "=" + (value.is_string() ? value.get<std::string>() : dump(value));
    TSR_LOG_C(INFO, "request", "{}: {}", label, text);
}

}  // namespace

std::size_t RequestLog::output_chars() const {
    if (options_.level < 2) return 0;
    return options_.level == 2 ? kPartialChars : std::string::npos;
}

void RequestLog::received(std::string_view rid, const server::GenerationInput& in, const server::GenerationParams& p,
                          std::int64_t prompt_tokens) const {
    if (!on()) return;
    Json line = Json::object();
    line["rid"] = rid;
    line["prompt_tokens"] = prompt_tokens;
    if (options_.level >= 1) {
        line["sampling_params"] = Json{{"max_new_tokens", p.max_new_tokens}, {"temperature", p.temperature},
                                       {"top_p", p.top_p}, {"top_k", p.top_k}, {"min_p", p.min_p},
                                       {"frequency_penalty", p.frequency_penalty},
                                       {"presence_penalty", p.presence_penalty}, {"ignore_eos", p.ignore_eos},
                                       {"stop", p.stop}};
    }
    if (options_.level >= 2) {
        const std::size_t chars = output_chars();
        if (in.text) line["text"] = cut(*in.text, chars);
        if (in.chat_json) line["chat"] = cut(*in.chat_json, chars);
        if (in.input_ids) line["input_ids"] = cut(dump(Json(*in.input_ids)), chars);
    }
    emit("Receive", std::move(line), options_.json);
}

void RequestLog::finished(std::string_view rid, std::string_view finish_reason, const server::Usage& usage,
                          std::string_view output) const {
    if (!on()) return;
    Json line = Json{{"rid", rid},
                     {"finish_reason", finish_reason},
                     {"prompt_tokens", usage.prompt_tokens},
                     {"completion_tokens", usage.completion_tokens},
                     {"cached_tokens", usage.cached_tokens}};
    if (options_.level >= 2) line["out"] = cut(output, output_chars());
    emit("Finish", std::move(line), options_.json);
}

}  // namespace tessera::front
