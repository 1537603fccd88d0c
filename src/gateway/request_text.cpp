#include "gateway/request_text.h"

#include <nlohmann/json.hpp>

namespace tessera::gateway {

namespace {

// A prompt field: a string, a list of strings (the first is routed by), or token ids (routed
// by their decimal text, which keeps equal prefixes equal).
std::string prompt_text(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array() && !v.empty()) {
        if (v.front().is_string()) return v.front().get<std::string>();
        std::string ids;
        for (const auto& x : v) {
            if (x.is_number_integer()) ids += std::to_string(x.get<long long>()) + ",";
            else if (x.is_array()) return prompt_text(x);
        }
        return ids;
    }
    return {};
}

std::string message_text(const nlohmann::json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string text;
    if (content.is_array()) {
        for (const auto& part : content)
            if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string())
                text += part["text"].get<std::string>();
    }
    return text;
}

}  // namespace

RequestFacts read_request(std::string_view path, std::string_view body) {
    RequestFacts facts;
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return facts;
    if (auto s = j.find("stream"); s != j.end() && s->is_boolean()) facts.stream = s->get<bool>();
    if (auto r = j.find("data_parallel_rank"); r != j.end() && r->is_number_integer())
        facts.data_parallel_rank = r->get<int>();
    if (auto sp = j.find("session_params"); sp != j.end() && sp->is_object()) {
        if (auto id = sp->find("id"); id != sp->end() && id->is_string()) facts.session_id = id->get<std::string>();
    }
    if (path == "/v1/chat/completions") {
        if (auto m = j.find("messages"); m != j.end() && m->is_array())
            for (const auto& message : *m)
                if (message.is_object() && message.contains("content")) facts.text += message_text(message["content"]);
    } else if (path == "/v1/completions") {
        if (auto p = j.find("prompt"); p != j.end()) facts.text = prompt_text(*p);
    } else {
        if (auto t = j.find("text"); t != j.end()) facts.text = prompt_text(*t);
        else if (auto ids = j.find("input_ids"); ids != j.end()) facts.text = prompt_text(*ids);
    }
    return facts;
}

}  // namespace tessera::gateway
