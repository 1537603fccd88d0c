// tokenizer/chat_template.cpp — builds the variables transformers passes to a chat template
// (apply_chat_template → render_jinja_template) and renders it.

#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

namespace tessera::tokenizer {

StatusOr<ChatTemplate> ChatTemplate::compile(const std::string& source, std::string bos_token,
                                             std::string eos_token) {
    TSR_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::compile(source));
    return ChatTemplate(std::move(t), std::move(bos_token), std::move(eos_token));
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& request) const {
    if (!request.is_object()) {
        return Status::InvalidArgument("chat template request must be a JSON object, got " +
                                       std::string(request.type_name()));
    }
    auto messages = request.find("messages");
    if (messages == request.end() || !messages->is_array()) {
        return Status::InvalidArgument("chat template request needs \"messages\" as a list");
    }
    // transformers: render(messages=..., tools=None, documents=None,
    // add_generation_prompt=False, **special_tokens_map, **extra_kwargs). Tokens that are None
    // in tokenizer_config.json (Qwen3's bos_token) are absent from special_tokens_map, so an
    // empty token here stays undefined in the template.
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    context["tools"] = nullptr;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = false;
    if (!bos_token_.empty()) context["bos_token"] = bos_token_;
    if (!eos_token_.empty()) context["eos_token"] = eos_token_;
    for (auto it = request.begin(); it != request.end(); ++it) context[it.key()] = it.value();
    return template_.render(context);
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json& request) const {
    return render(nlohmann::ordered_json(request));
}

}  // namespace tessera::tokenizer
