#pragma once
// app/chat_format_loader.h — which chat format a server or `tessera generate --chat` renders
// with, decided as SGLang's template_manager.py TemplateManager.load_chat_template does.

#include "base/status.h"
#include "tokenizer/chat_format.h"

namespace tessera::server {
struct ServerArgs;
}
namespace tessera::tokenizer {
class Tokenizer;
}

namespace tessera::app {

// --hf-chat-template-name picks one of the tokenizer's named templates (a name it lacks is
// refused, listing those it has). Then --chat-template: a built-in conversation template name,
// a .json conversation template, or a .jinja file that replaces the tokenizer's template. With
// no --chat-template, a conversation template inferred from --model-path (e.g. "mistral" for a
// Mistral ...-Instruct path) wins over the tokenizer's; else the tokenizer's own Jinja
// template, and its "tool_use" one for requests that offer tools. Logs the choice.
StatusOr<tokenizer::ChatFormat> load_chat_format(const server::ServerArgs& args, tokenizer::Tokenizer& tok);

}  // namespace tessera::app
