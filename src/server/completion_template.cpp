#include "server/completion_template.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::server {

namespace {

Status invalid(std::string_view arg, const std::string& message) {
    return Status::InvalidArgument("--completion-template " + std::string(arg) + ": " + message);
}

}  // namespace

StatusOr<CompletionTemplate> completion_template_from_json(std::string_view text, std::string_view source) {
    const nlohmann::json t = nlohmann::json::parse(text, nullptr, false);
    if (!t.is_object()) return invalid(source, "the file is not a JSON object");
    CompletionTemplate out;
    const std::pair<const char*, std::string*> fields[] = {{"name", &out.name},
                                                           {"fim_begin_token", &out.fim_begin},
                                                           {"fim_middle_token", &out.fim_middle},
                                                           {"fim_end_token", &out.fim_end}};
    for (const auto& [key, field] : fields) {
        if (!t.contains(key) || !t[key].is_string()) return invalid(source, std::string("missing string field ") + key);
        *field = t[key].get<std::string>();
    }
    const std::string position = t.contains("fim_position") && t["fim_position"].is_string()
                                     ? t["fim_position"].get<std::string>()
                                     : (t.contains("fim_position") ? t["fim_position"].dump() : "None");
    if (position != "MIDDLE" && position != "END") return invalid(source, "Unknown fim position: " + position);
    out.middle_at_end = position == "END";
    return out;
}

StatusOr<CompletionTemplate> completion_template(std::string_view arg) {
    // DeepSeek's markers use U+FF5C (｜) and U+2581 (▁).
    static const std::array<CompletionTemplate, 3> kTemplates = {{
        {"deepseek_coder", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
         "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
         false},
        {"star_coder", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", true},
        {"qwen_coder", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", true},
    }};
    for (const CompletionTemplate& t : kTemplates)
        if (t.name == arg) return t;
    const std::string path(arg);
    if (!std::filesystem::is_regular_file(path))
        return invalid(arg, "Completion template " + path + " is not a built-in template name or a valid completion "
                            "template file path (built-in: deepseek_coder, star_coder, qwen_coder).");
    if (!path.ends_with(".json")) return invalid(arg, "unrecognized format of completion template file");
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return completion_template_from_json(text.str(), arg);
}

}  // namespace tessera::server
