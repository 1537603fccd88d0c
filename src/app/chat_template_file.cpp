#include "app/chat_template_file.h"

#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "tokenizer/builtin_chat_templates.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

Status use_chat_template_file(const std::string& path, tokenizer::Tokenizer& tok) {
    if (path.empty()) return Status::Ok();
    // TemplateManager._load_explicit_chat_template: a built-in name first, then a file.
    if (auto builtin = tokenizer::builtin_chat_template(path)) {
        tok.set_chat_template(std::move(*builtin));
        TSR_LOG(INFO, "chat template: SGLang's built-in {}", path);
        return Status::Ok();
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (in) text << in.rdbuf();
    if (!in || text.str().empty())
        return Status::InvalidArgument("--chat-template " + path + ": cannot read a template from this file");
    tok.set_chat_template(text.str());
    TSR_LOG(INFO, "chat template from {} ({} bytes)", path, text.str().size());
    return Status::Ok();
}

Status use_named_chat_template(const std::string& name, tokenizer::Tokenizer& tok) {
    if (name.empty()) return Status::Ok();
    const auto templates = tok.named_chat_templates();
    const auto it = templates.find(name);
    if (it == templates.end()) {
        std::string names;
        for (const auto& [have, source] : templates) names += (names.empty() ? "" : ", ") + have;
        return Status::InvalidArgument("--hf-chat-template-name " + name + ": the tokenizer has " +
                                       (names.empty() ? "no named chat templates" : "the chat templates " + names));
    }
    tok.set_chat_template(it->second);
    TSR_LOG(INFO, "chat template: the tokenizer's \"{}\"", name);
    return Status::Ok();
}

}  // namespace tessera::app
