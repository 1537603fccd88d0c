#pragma once
// tokenizer/builtin_chat_templates.h — SGLang's built-in conversation templates for text that
// `--chat-template NAME` takes (conversation.py: chatml, llama-2, mistral), written as Jinja
// templates that render the prompt its Conversation.get_prompt builds.

#include <optional>
#include <string>
#include <string_view>

namespace tessera::tokenizer {

// The Jinja source of a built-in template, or nullopt for another name.
std::optional<std::string> builtin_chat_template(std::string_view name);

// "chatml, llama-2, mistral": for messages that list them.
std::string builtin_chat_template_names();

}  // namespace tessera::tokenizer
