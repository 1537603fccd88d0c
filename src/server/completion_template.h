#pragma once
// server/completion_template.h — --completion-template NAME or FILE.json: how a completion's
// prompt and suffix become a fill-in-the-middle prompt (SGLang's code_completion_parser.py:
// its built-in templates, or a JSON file of name, fim_begin_token, fim_middle_token,
// fim_end_token and fim_position MIDDLE or END).

#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::server {

struct CompletionTemplate {
    std::string name;
    std::string fim_begin, fim_middle, fim_end;
    bool middle_at_end = false;  // begin prompt end suffix middle; else begin prompt middle suffix end
};

// A built-in name (deepseek_coder, star_coder, qwen_coder) first, else a .json file of that
// path (load_completion_template_for_openai_api); errors give SGLang's messages after the flag.
StatusOr<CompletionTemplate> completion_template(std::string_view name_or_path);

// The JSON text of a template file; `source` names it in errors.
StatusOr<CompletionTemplate> completion_template_from_json(std::string_view text, std::string_view source);

}  // namespace tessera::server
