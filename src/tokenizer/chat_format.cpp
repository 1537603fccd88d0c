#include "tokenizer/chat_format.h"

#include <nlohmann/json.hpp>

namespace tessera::tokenizer {

StatusOr<std::string> ChatFormat::render(const nlohmann::ordered_json& request) const {
    if (!request.is_object() || !request.contains("messages"))
        return Status::InvalidArgument("a chat request needs \"messages\"");
    if (conversation) return conversation->prompt(request["messages"]);
    if (!jinja) return Status::InvalidArgument("no chat template");
    const std::optional<ChatTemplate>& chosen = request.contains("tools") && tool_use ? tool_use : jinja;
    if (request.contains("add_generation_prompt")) return chosen->render(request);
    nlohmann::ordered_json with_prompt = request;
    with_prompt["add_generation_prompt"] = true;
    return chosen->render(with_prompt);
}

}  // namespace tessera::tokenizer
