// `tessera tokenize`: the model's tokenizer and chat template for users and scripts, one JSON
// value per line on stdin → one JSON value per line on stdout, so thousands of cases run in
// one process. A line that cannot be processed yields {"error": "..."} in its place (the
// output stays aligned with the input) and the exit code becomes 1.

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/logging.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera::app {

namespace {

// Ordered: tools in a chat request must reach the template (tojson) in the client's key order.
using json = nlohmann::ordered_json;

StatusOr<json> handle_line(const TokenizeCommandOptions& o, const tokenizer::Tokenizer& tok,
                           const tokenizer::ChatTemplate* chat, const json& in) {
    if (o.decode) {
        if (!in.is_array()) return Status::InvalidArgument("--decode expects an array of token ids");
        std::vector<std::int32_t> ids;
        for (const auto& v : in) {
            if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= tok.vocab_size())
                return Status::InvalidArgument("token id " + v.dump() + " is not in [0, " +
                                               std::to_string(tok.vocab_size()) + ")");
            ids.push_back(v.get<std::int32_t>());
        }
        return json(tok.decode(ids, o.skip_special_tokens));
    }
    if (o.chat) {
        json request = in.is_array() ? json{{"messages", in}, {"add_generation_prompt", true}} : in;
        if (!request.is_object()) return Status::InvalidArgument("--chat expects a messages array or an object");
        TSR_ASSIGN_OR_RETURN(std::string text, chat->render(request));
        return json(text);
    }
    if (!in.is_string()) return Status::InvalidArgument("expected a JSON string to encode");
    return json(tok.encode(in.get<std::string>(), o.add_special_tokens));
}

}  // namespace

int run_tokenize(const TokenizeCommandOptions& o) {
    if (o.decode && o.chat) {
        TSR_LOG(ERROR, "--decode and --chat exclude each other: decode ids, or render messages");
        return 2;
    }
    auto tok = tokenizer::Tokenizer::load(o.model_path);
    if (!tok.ok()) {
        TSR_LOG(ERROR, "{}", tok.status().message());
        return 2;
    }
    std::optional<tokenizer::ChatTemplate> chat;
    if (o.chat) {
        if ((*tok)->chat_template().empty()) {
            TSR_LOG(ERROR, "{}/tokenizer_config.json has no chat_template; --chat needs one", o.model_path);
            return 2;
        }
        auto compiled = tokenizer::ChatTemplate::compile((*tok)->chat_template(), (*tok)->bos_token(),
                                                         (*tok)->eos_token());
        if (!compiled.ok()) {
            TSR_LOG(ERROR, "chat template of {}: {}", o.model_path, compiled.status().message());
            return 2;
        }
        chat.emplace(std::move(compiled).value());
    }
    int exit_code = 0;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(std::cin, line)) {
        ++line_no;
        if (line.empty()) continue;
        StatusOr<json> out = Status::InvalidArgument("");
        try {
            out = handle_line(o, **tok, chat ? &*chat : nullptr, json::parse(line));
        } catch (const json::exception& e) {
            out = Status::InvalidArgument(std::string("not valid JSON: ") + e.what());
        }
        if (out.ok()) {
            std::cout << out->dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
        } else {
            std::cout << json{{"error", "line " + std::to_string(line_no) + ": " + out.status().message()}}.dump()
                      << '\n';
            exit_code = 1;
        }
        std::cout.flush();
    }
    return exit_code;
}

}  // namespace tessera::app
