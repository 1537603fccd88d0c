#pragma once
// tokenizer/conversation_template.h — SGLang's conversation templates (conversation.py
// Conversation): the chat format chosen with `--chat-template NAME`, `--chat-template FILE.json`,
// or inferred from the model path, instead of a Jinja template. A template is a system-prompt
// format, two role tags, a separator style and the stop strings its prompt asks for.
// Immutable; thread-safe.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::tokenizer {

// conversation.py SeparatorStyle, each a rule for joining (role, message) pairs in get_prompt.
enum class SeparatorStyle {
    kAddColonSingle, kAddColonTwo, kAddColonSpaceSingle, kNoColonSingle, kNoColonTwo, kAddNewLineSingle,
    kLlama2, kLlama3, kLlama4, kChatGlm, kChatMl, kChatIntern, kDolly, kRwkv, kPhoenix, kRobin, kFalconChat,
    kChatGlm3, kDeepSeekChat, kMetaMath, kDeepSeekVl2, kQwen2VlEmbed, kGemma3, kMpt,
};

class ConversationTemplate {
 public:
    std::string name;
    std::string system_template = "{system_message}";  // Python str.format text with {system_message}
    std::string system_message;                          // the default, replaced by a request's system message
    std::array<std::string, 2> roles = {"USER", "ASSISTANT"};
    SeparatorStyle sep_style = SeparatorStyle::kAddColonSingle;
    std::string sep = "\n";
    std::optional<std::string> sep2;  // the styles that alternate separators need it
    std::vector<std::string> stop_str;

    // SGLang's built-in template of that name (conversation.py register_conv_template), or nullopt.
    static std::optional<ConversationTemplate> builtin(std::string_view name);
    // "chatml, llama-2, ...": for messages that list them.
    static std::string builtin_names();
    // The built-in template SGLang infers from a model path when no --chat-template is given
    // (conversation.py's matching functions, in their order), e.g. "llama-2" for
    // ".../Llama-2-7b-chat-hf"; nullopt when none matches.
    static std::optional<std::string> infer_from_model_path(std::string_view model_path);
    // A JSON template file as template_manager.py _load_json_chat_template reads it: name,
    // system, user, assistant, sep_style, stop_str, and optionally system_message and sep.
    static StatusOr<ConversationTemplate> parse_json(std::string_view text, const std::string& origin);
    // parse_json of a file; its errors name the flag, "--chat-template PATH".
    static StatusOr<ConversationTemplate> load(const std::string& path);

    // The prompt generate_chat_conv + get_prompt build for a chat request's messages
    // ([{"role", "content"}], content a string or null): the last system message replaces the
    // default, user and assistant messages are the turns, an open assistant turn ends it.
    // InvalidArgument for another role or a separator the style needs and the template lacks.
    // `continue_answer`: the last message is an answer to continue, so no open turn follows and
    // the end-of-answer stop string and separators are cut from its end.
    StatusOr<std::string> prompt(const nlohmann::ordered_json& messages, bool continue_answer = false) const;

    // True when the style's prompt reads sep2 (alternating separators).
    bool uses_sep2() const;
};

}  // namespace tessera::tokenizer
