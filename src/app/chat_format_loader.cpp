#include "app/chat_format_loader.h"

#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "server/server_args.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {
namespace {

Status use_named_chat_template(const std::string& name, tokenizer::Tokenizer& tok) {
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

// _load_jinja_template: the file without its leading and trailing newlines, and a written "\n"
// (backslash, n) turned into a newline.
Status use_jinja_file(const std::string& path, tokenizer::Tokenizer& tok) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream read;
    if (in) read << in.rdbuf();
    std::string text = read.str();
    const std::size_t begin = text.find_first_not_of('\n');
    text = begin == std::string::npos ? "" : text.substr(begin, text.find_last_not_of('\n') - begin + 1);
    if (!in || text.empty())
        return Status::InvalidArgument("--chat-template " + path + ": cannot read a template from this file");
    std::string unescaped;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
            unescaped += '\n';
            ++i;
        } else {
            unescaped += text[i];
        }
    }
    tok.set_chat_template(unescaped);
    TSR_LOG(INFO, "chat template from {} ({} bytes)", path, unescaped.size());
    return Status::Ok();
}

}  // namespace

StatusOr<tokenizer::ChatFormat> load_chat_format(const server::ServerArgs& args, tokenizer::Tokenizer& tok) {
    if (!args.hf_chat_template_name.empty())
        TSR_RETURN_IF_ERROR(use_named_chat_template(args.hf_chat_template_name, tok));
    tokenizer::ChatFormat format;
    const std::string& chosen = args.chat_template;
    if (!chosen.empty()) {
        if (auto builtin = tokenizer::ConversationTemplate::builtin(chosen)) {
            format.conversation = std::move(builtin);
            TSR_LOG(INFO, "chat template: SGLang's built-in conversation template {}", chosen);
        } else if (chosen.ends_with(".jinja")) {
            TSR_RETURN_IF_ERROR(use_jinja_file(chosen, tok));
        } else {
            TSR_ASSIGN_OR_RETURN(format.conversation, tokenizer::ConversationTemplate::load(chosen));
            TSR_LOG(INFO, "chat template: the conversation template {} from {}", format.conversation->name, chosen);
        }
    } else if (auto inferred = tokenizer::ConversationTemplate::infer_from_model_path(args.model_path)) {
        format.conversation = tokenizer::ConversationTemplate::builtin(*inferred);
        TSR_LOG(INFO, "Inferred chat template from model path: {} (SGLang's conversation template; give "
                "--chat-template FILE.jinja to use another)", *inferred);
    }
    if (format.conversation) {
        if (!format.conversation->stop_str.empty()) {
            std::string stops;
            for (const std::string& s : format.conversation->stop_str) stops += (stops.empty() ? "" : ", ") + s;
            TSR_LOG(INFO, "chat requests also stop at the template's stop strings: {}", stops);
        }
        return format;
    }
    if (!tok.chat_template().empty()) {
        TSR_ASSIGN_OR_RETURN(format.jinja,
                             tokenizer::ChatTemplate::compile(tok.chat_template(), tok.bos_token(), tok.eos_token()));
    }
    // A template chosen at launch is the only one; else requests with tools take the
    // tokenizer's "tool_use" template when it has one (transformers' get_chat_template).
    const auto named = tok.named_chat_templates();
    if (const auto it = named.find("tool_use");
        it != named.end() && chosen.empty() && args.hf_chat_template_name.empty()) {
        TSR_ASSIGN_OR_RETURN(format.tool_use,
                             tokenizer::ChatTemplate::compile(it->second, tok.bos_token(), tok.eos_token()));
        TSR_LOG(INFO, "chat requests that offer tools render with the tokenizer's \"tool_use\" template");
    }
    return format;
}

}  // namespace tessera::app
