#pragma once
// tokenizer/chat_template.h — a model's chat template: renders `messages` (+ tools, flags
// such as enable_thinking) into the prompt text, with the tokenizer's bos/eos strings, as
// transformers' apply_chat_template(tokenize=False) does. Immutable; thread-safe.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/jinja/template.h"

namespace tessera::tokenizer {

class ChatTemplate {
 public:
    static StatusOr<ChatTemplate> compile(const std::string& source, std::string bos_token,
                                          std::string eos_token);

    // request: {"messages": [...], "add_generation_prompt": bool, "tools": [...] (optional),
    // any other key (e.g. "enable_thinking") passed to the template as a variable}.
    // Fails with InvalidArgument when messages is missing or not a list, when the template
    // calls raise_exception (e.g. a role order it rejects) or hits a type error.
    StatusOr<std::string> render(const nlohmann::json& request) const;
    // Same, keeping the request's key order so that `tojson` prints tool schemas in the
    // order the client sent them, as transformers does (nlohmann::json sorts keys).
    StatusOr<std::string> render(const nlohmann::ordered_json& request) const;

 private:
    ChatTemplate(jinja::Template t, std::string bos, std::string eos)
        : template_(std::move(t)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}
    jinja::Template template_;
    std::string bos_token_;
    std::string eos_token_;
};

}  // namespace tessera::tokenizer
