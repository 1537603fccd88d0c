#pragma once
// tokenizer/chat_format.h — how a chat request becomes prompt text: a Jinja template (the
// tokenizer's, a --chat-template .jinja file or --hf-chat-template-name), or one of SGLang's
// conversation templates, which then replaces them (serving_chat.py: a conversation template
// name wins over apply_chat_template). Immutable; thread-safe.

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/conversation_template.h"

namespace tessera::tokenizer {

struct ChatFormat {
    std::optional<ConversationTemplate> conversation;
    std::optional<ChatTemplate> jinja;
    std::optional<ChatTemplate> tool_use;  // for requests that offer tools (the tokenizer's "tool_use")

    bool has_template() const { return conversation || jinja; }

    // request: {"messages", "tools" (optional), "add_generation_prompt" (default true), template
    // variables}. A conversation template reads only the messages. A last message of the
    // assistant's is continued when `continue_final_message`; otherwise a Jinja template gets
    // it as the user's (serving_chat.py _handle_last_assistant_message).
    StatusOr<std::string> render(const nlohmann::ordered_json& request, bool continue_final_message = false) const;

    // A conversation template's prompt is encoded with the tokenizer's special tokens
    // (serving_chat.py _apply_conversation_template: tokenizer.encode(prompt)); a Jinja
    // template writes its own.
    bool encode_with_special_tokens() const { return conversation.has_value(); }
};

}  // namespace tessera::tokenizer
