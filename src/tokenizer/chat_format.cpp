#include "tokenizer/chat_format.h"

#include <nlohmann/json.hpp>

namespace tessera::tokenizer {

StatusOr<std::string> ChatFormat::render(const nlohmann::ordered_json& request, bool continue_final_message) const {
    if (!request.is_object() || !request.contains("messages") || !request["messages"].is_array() ||
        request["messages"].empty())
        return Status::InvalidArgument("a chat request needs \"messages\" as a non-empty list");
    const nlohmann::ordered_json& last = request["messages"].back();
    const bool ends_with_answer = last.is_object() && last.value("role", "") == "assistant";
    if (conversation) return conversation->prompt(request["messages"], continue_final_message && ends_with_answer);
    if (!jinja) return Status::InvalidArgument("no chat template");
    const std::optional<ChatTemplate>& chosen = request.contains("tools") && tool_use ? tool_use : jinja;
    nlohmann::ordered_json sent = request;
    if (!sent.contains("add_generation_prompt")) sent["add_generation_prompt"] = true;
    // An answer with text content is continued after the generation prompt, or becomes the
    // user's message.
    std::string answer_prefix;
    if (ends_with_answer && last.contains("content") && last["content"].is_string()) {
        if (continue_final_message) {
            answer_prefix = last["content"].get<std::string>();
            sent["messages"].erase(sent["messages"].size() - 1);
        } else {
            sent["messages"].back() = {{"role", "user"}, {"content", last["content"]}};
        }
    }
    TSR_ASSIGN_OR_RETURN(std::string text, chosen->render(sent));
    return text + answer_prefix;
}

}  // namespace tessera::tokenizer
