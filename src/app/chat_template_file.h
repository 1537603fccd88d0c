#pragma once
// app/chat_template_file.h — --chat-template FILE or NAME: chat requests render with that Jinja
// template, or SGLang's built-in one of that name, instead of the tokenizer's (SGLang's
// template_manager.py _load_explicit_chat_template).

#include <string>

#include "base/status.h"

namespace tessera::tokenizer {
class Tokenizer;
}

namespace tessera::app {

// No-op for an empty path.
Status use_chat_template_file(const std::string& path, tokenizer::Tokenizer& tok);

// --hf-chat-template-name: the tokenizer's template of that name (a name it lacks is refused,
// listing those it has); no-op for an empty name.
Status use_named_chat_template(const std::string& name, tokenizer::Tokenizer& tok);

}  // namespace tessera::app
