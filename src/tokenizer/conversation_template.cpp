// tokenizer/conversation_template.cpp — SGLang's conversation.py: the built-in templates, the
// model-path guesses, the JSON file format of template_manager.py, and get_prompt per
// separator style.

#include "tokenizer/conversation_template.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace tessera::tokenizer {
namespace {

using S = SeparatorStyle;

constexpr std::pair<std::string_view, SeparatorStyle> kStyleNames[] = {
    {"ADD_COLON_SINGLE", S::kAddColonSingle}, {"ADD_COLON_TWO", S::kAddColonTwo},
    {"ADD_COLON_SPACE_SINGLE", S::kAddColonSpaceSingle}, {"NO_COLON_SINGLE", S::kNoColonSingle},
    {"NO_COLON_TWO", S::kNoColonTwo}, {"ADD_NEW_LINE_SINGLE", S::kAddNewLineSingle}, {"LLAMA2", S::kLlama2},
    {"LLAMA3", S::kLlama3}, {"LLAMA4", S::kLlama4}, {"CHATGLM", S::kChatGlm}, {"CHATML", S::kChatMl},
    {"CHATINTERN", S::kChatIntern}, {"DOLLY", S::kDolly}, {"RWKV", S::kRwkv}, {"PHOENIX", S::kPhoenix},
    {"ROBIN", S::kRobin}, {"FALCON_CHAT", S::kFalconChat}, {"CHATGLM3", S::kChatGlm3},
    {"DEEPSEEK_CHAT", S::kDeepSeekChat}, {"METAMATH", S::kMetaMath}, {"DeepSeekVL2", S::kDeepSeekVl2},
    {"QWEN2_VL_EMBED", S::kQwen2VlEmbed}, {"GEMMA3", S::kGemma3}, {"MPT", S::kMpt},
};

ConversationTemplate make(std::string name, std::string system_template, std::string system_message,
                          std::array<std::string, 2> roles, SeparatorStyle style, std::string sep,
                          std::optional<std::string> sep2, std::vector<std::string> stop) {
    ConversationTemplate t;
    t.name = std::move(name);
    t.system_template = std::move(system_template);
    t.system_message = std::move(system_message);
    t.roles = std::move(roles);
    t.sep_style = style;
    t.sep = std::move(sep);
    t.sep2 = std::move(sep2);
    t.stop_str = std::move(stop);
    return t;
}

constexpr const char* kVisionAssistant =
    "You are a helpful language and vision assistant. You are able to understand the visual content that the user "
    "provides, and assist the user with a variety of tasks using natural language";
constexpr const char* kInternVlSystem =
    "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。";

// conversation.py's register_conv_template calls, in its order. Devstral's system message is
// read there from a Hugging Face cache this engine does not have, so it is empty, as SGLang's
// is when the file is not cached.
std::vector<ConversationTemplate> builtins() {
    const std::array<std::string, 2> inst = {"[INST]", "[/INST]"};
    const std::array<std::string, 2> im = {"<|im_start|>user", "<|im_start|>assistant"};
    const std::array<std::string, 2> plain = {"user", "assistant"};
    const std::string im_system = "<|im_start|>system\n{system_message}";
    const std::string mistral_system = "[SYSTEM_PROMPT]\n{system_message}\n[/SYSTEM_PROMPT]\n\n";
    const std::vector<std::string> mistral_stop = {"[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"};
    const std::string llama3_system = "<|start_header_id|>system<|end_header_id|>\n\n{system_message}<|eot_id|>";
    return {
        make("llama-2", "[INST] <<SYS>>\n{system_message}\n<</SYS>>\n\n", "", inst, S::kLlama2, " ", " </s><s>",
             {"[INST]", "[/INST]", "<<SYS>>", "<</SYS>>"}),
        make("mistral", mistral_system, "", inst, S::kLlama2, " ", " </s><s>", mistral_stop),
        make("devstral", mistral_system, "", inst, S::kLlama2, " ", " </s><s>", mistral_stop),
        make("llama-4", "<|header_start|>system<|header_end|>\n\n{system_message}<|eot|>", "", plain, S::kLlama4, "",
             std::nullopt, {"<|end_of_text|>", "<|eot|>", "<|eom|>"}),
        make("phi-4-mm", "{system_message}", "", {"<|user|>", "<|assistant|>"}, S::kNoColonSingle, "<|end|>",
             std::nullopt, {"<|end|>"}),
        make("chatml", im_system, "You are a helpful assistant.", im, S::kChatMl, "<|im_end|>", std::nullopt,
             {"<|endoftext|>", "<|im_end|>"}),
        make("chatml-llava", im_system, "You are a helpful assistant.", im, S::kChatMl, "<|im_end|>", std::nullopt,
             {"<|endoftext|>", "<|im_end|>"}),
        make("vicuna_v1.1", "{system_message}",
             "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
             "detailed, and polite answers to the user's questions.",
             {"USER", "ASSISTANT"}, S::kAddColonTwo, " ", "</s>", {}),
        make("llama_3_vision", llama3_system, std::string(kVisionAssistant) + ".", plain, S::kLlama3, "",
             std::nullopt, {"<|end_of_text|>", "<|eot_id|>"}),
        make("llava_llama_3", llama3_system, std::string(kVisionAssistant) + ".", plain, S::kLlama3, "",
             std::nullopt, {"<|end_of_text|>", "<|eot_id|>"}),
        make("internlm2-chat", im_system, "", im, S::kAddColonSingle, "\n", std::nullopt,
             {"<|im_end|>", "<|action_end|>"}),
        make("internvl-2-5", im_system, kInternVlSystem, {"<|im_start|>user\n", "<|im_start|>assistant\n"}, S::kMpt,
             "<|im_end|>\n", std::nullopt, {"<|im_end|>", "<|action_end|>"}),
        make("qwen2-vl", im_system, "You are a helpful assistant.", im, S::kAddNewLineSingle, "<|im_end|>\n",
             std::nullopt, {"<|im_end|>"}),
        make("qwen2-5-o", im_system, "You are a helpful assistant.", im, S::kAddNewLineSingle, "<|im_end|>\n",
             std::nullopt, {"<|im_end|>"}),
        make("deepseek-vl2", "{system_message}", "", {"<|User|>", "<|Assistant|>"}, S::kDeepSeekVl2, "\n\n",
             "<｜end▁of▁sentence｜>", {"User:", "<｜end▁of▁sentence｜>"}),
        make("gemma-it", "<start_of_turn>user\n{system_message}\n\n", "You are a helpful assistant.",
             {"<start_of_turn>user\n", "<start_of_turn>model\n"}, S::kGemma3, "<end_of_turn>\n", std::nullopt,
             {"<end_of_turn>"}),
        make("gme-qwen2-vl", im_system, "You are a helpful assistant.", im, S::kQwen2VlEmbed, "<|im_end|>\n",
             std::nullopt, {"<|endoftext|>"}),
        make("minicpmv", "<|im_start|>system\n{system_message}.", "You are a helpful assistant", im,
             S::kAddNewLineSingle, "<|im_end|>\n", std::nullopt, {"<|im_end|>", "<|endoftext|>"}),
        make("janus-pro", "{system_message}.", kVisionAssistant, {"User", "Assistant"}, S::kAddColonTwo, "\n\n",
             "<｜end▁of▁sentence｜>", {"<|User|>", "<｜end▁of▁sentence｜>"}),
        make("minicpmo", im_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", im,
             S::kAddNewLineSingle, "<|im_end|>\n", std::nullopt, {"<|im_end|>", "<|endoftext|>"}),
        make("kimi-vl", "<|im_system|>system<|im_middle|>{system_message}", "You are a helpful assistant",
             {"<|im_user|>user<|im_middle|>", "<|im_assistant|>assistant<|im_middle|>"}, S::kNoColonSingle,
             "<|im_end|>", std::nullopt, {"<|im_end|>"}),
    };
}

// Python's str.format with one keyword, system_message: "{{" and "}}" are braces, any other
// field is an error (SGLang's KeyError / ValueError on the first request).
StatusOr<std::string> format_system(const std::string& format, const std::string& system_message) {
    std::string out;
    for (std::size_t i = 0; i < format.size(); ++i) {
        const char c = format[i];
        if ((c == '{' || c == '}') && i + 1 < format.size() && format[i + 1] == c) {
            out += c;
            ++i;
        } else if (c == '{') {
            const std::size_t close = format.find('}', i);
            const std::string field = format.substr(i + 1, close == std::string::npos ? close : close - i - 1);
            if (close == std::string::npos || field != "system_message")
                return Status::InvalidArgument("the system format \"" + format + "\" has the field {" + field +
                                               "}; only {system_message} is filled (write {{ and }} for braces)");
            out += system_message;
            i = close;
        } else if (c == '}') {
            return Status::InvalidArgument("the system format \"" + format + "\" has a single '}' (write }})");
        } else {
            out += c;
        }
    }
    return out;
}

// Python's str.strip(): ASCII whitespace and the separators it also counts.
std::string strip(const std::string& s) {
    const char* space = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
    const std::size_t begin = s.find_first_not_of(space);
    if (begin == std::string::npos) return "";
    return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

// Python's str.replace: every non-overlapping occurrence, left to right, in one pass.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    std::string out;
    std::size_t at = 0;
    for (std::size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
        out.append(s, at, hit - at).append(to);
    return out.append(s, at);
}

StatusOr<std::string> required_string(const nlohmann::json& j, const char* key, const std::string& origin) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string())
        return Status::InvalidArgument(origin + ": the template needs \"" + key + "\" as a string");
    return it->get<std::string>();
}

}  // namespace

std::optional<ConversationTemplate> ConversationTemplate::builtin(std::string_view name) {
    for (ConversationTemplate& t : builtins())
        if (t.name == name) return std::move(t);
    return std::nullopt;
}

std::string ConversationTemplate::builtin_names() {
    std::string names;
    for (const ConversationTemplate& t : builtins()) names += (names.empty() ? "" : ", ") + t.name;
    return names;
}

std::optional<std::string> ConversationTemplate::infer_from_model_path(std::string_view model_path) {
    // conversation.py's @register_conv_template_matching_function functions, first match wins.
    // Called once at start-up: each pattern is compiled when it is tried.
    constexpr std::pair<const char*, const char*> kMatchers[] = {
        {"internvl2_5", "internvl-2-5"},
        {"llama.*3\\.2.*vision", "llama_3_vision"},
        {"janus", "janus-pro"},
        {"vicuna|llava-v1\\.5|llava-next-video-7b", "vicuna_v1.1"},
        {"llama-2.*chat|codellama.*instruct", "llama-2"},
        {"pixtral|(mistral|mixtral).*instruct", "mistral"},
        {"deepseek.*vl2", "deepseek-vl2"},
        {"gme.*qwen.*vl", "gme-qwen2-vl"},
        {"qwen.*vl", "qwen2-vl"},
        {"qwen2.5.*omni.*", "qwen2-5-o"},
        {"llava-v1\\.6-34b|llava-v1\\.6-yi-34b|llava-next-video-34b|llava-onevision-qwen2", "chatml-llava"},
        {"gemma-3.*it", "gemma-it"},
        {"minicpm-v", "minicpmv"},
        {"minicpm-o", "minicpmo"},
        {"kimi.*vl", "kimi-vl"},
        {"devstral", "devstral"},
        {"phi-4-multimodal", "phi-4-mm"},
    };
    const std::string path(model_path);
    for (const auto& [pattern, name] : kMatchers)
        if (std::regex_search(path, std::regex(pattern, std::regex::icase))) return name;
    return std::nullopt;
}

StatusOr<ConversationTemplate> ConversationTemplate::parse_json(std::string_view text, const std::string& origin) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return Status::InvalidArgument(origin + ": not a JSON object (SGLang's conversation template)");
    ConversationTemplate t;
    TSR_ASSIGN_OR_RETURN(t.name, required_string(j, "name", origin));
    TSR_ASSIGN_OR_RETURN(std::string system, required_string(j, "system", origin));
    TSR_ASSIGN_OR_RETURN(t.roles[0], required_string(j, "user", origin));
    TSR_ASSIGN_OR_RETURN(t.roles[1], required_string(j, "assistant", origin));
    TSR_ASSIGN_OR_RETURN(std::string style, required_string(j, "sep_style", origin));
    t.system_template = system + "\n{system_message}";
    const auto named = std::find_if(std::begin(kStyleNames), std::end(kStyleNames),
                                    [&](const auto& entry) { return entry.first == style; });
    if (named == std::end(kStyleNames)) {
        std::string known;
        for (const auto& [name, _] : kStyleNames) known += (known.empty() ? "" : ", ") + std::string(name);
        return Status::InvalidArgument(origin + ": Unknown separator style: " + style + " (one of " + known + ")");
    }
    t.sep_style = named->second;
    for (const auto& [key, target] : {std::pair{"system_message", &t.system_message}, std::pair{"sep", &t.sep}}) {
        if (!j.contains(key)) continue;
        if (!j[key].is_string()) return Status::InvalidArgument(origin + ": \"" + key + "\" must be a string");
        *target = j[key].get<std::string>();
    }
    if (!j.contains("stop_str"))
        return Status::InvalidArgument(origin + ": the template needs \"stop_str\" (a string, a list of strings, "
                                       "or null)");
    const nlohmann::json& stop = j["stop_str"];
    if (stop.is_string()) {
        t.stop_str = {stop.get<std::string>()};
    } else if (stop.is_array()) {
        for (const nlohmann::json& s : stop) {
            if (!s.is_string()) return Status::InvalidArgument(origin + ": \"stop_str\" must list strings");
            t.stop_str.push_back(s.get<std::string>());
        }
    } else if (!stop.is_null()) {
        return Status::InvalidArgument(origin + ": \"stop_str\" must be a string, a list of strings, or null");
    }
    // A bad system format would otherwise fail every request.
    if (auto formatted = format_system(t.system_template, ""); !formatted.ok())
        return Status::InvalidArgument(origin + ": " + formatted.status().message());
    return t;
}

StatusOr<ConversationTemplate> ConversationTemplate::load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (in) text << in.rdbuf();
    if (!in) return Status::InvalidArgument("--chat-template " + path + ": cannot read this file");
    return parse_json(text.str(), "--chat-template " + path);
}

bool ConversationTemplate::uses_sep2() const {
    switch (sep_style) {
        case S::kAddColonTwo: case S::kNoColonTwo: case S::kLlama2: case S::kChatIntern: case S::kDolly:
        case S::kMetaMath: case S::kDeepSeekChat: case S::kDeepSeekVl2:
            return true;
        default:
            return false;
    }
}

StatusOr<std::string> ConversationTemplate::prompt(const nlohmann::ordered_json& messages, bool continue_answer) const {
    if (!messages.is_array()) return Status::InvalidArgument("the chat messages must be a list");
    // generate_chat_conv: (role tag, message) pairs, an empty message standing for None.
    std::string system = system_message;
    std::vector<std::pair<std::string, std::string>> turns;
    for (const nlohmann::ordered_json& m : messages) {
        const std::string role = m.value("role", "");
        const auto content = m.find("content");
        const std::string text = content != m.end() && content->is_string() ? content->get<std::string>() : "";
        if (role == "system") {
            system = text;
        } else if (role == "user") {
            turns.emplace_back(roles[0], text);
        } else if (role == "assistant") {
            turns.emplace_back(roles[1], text);
        } else {
            return Status::InvalidArgument("Unknown role: " + role + " (the conversation template " + name +
                                           " takes system, user and assistant messages)");
        }
    }
    if (!continue_answer) turns.emplace_back(roles[1], "");
    TSR_ASSIGN_OR_RETURN(const std::string system_prompt, format_system(system_template, system));

    bool lacks_sep2 = false;
    const auto sep_at = [&](std::size_t i) -> const std::string& {
        if (i % 2 == 0) return sep;
        if (!sep2) lacks_sep2 = true;
        return sep2 ? *sep2 : sep;
    };
    std::string ret;
    switch (sep_style) {
        case S::kAddColonSingle:
        case S::kAddColonSpaceSingle:
            ret = system_prompt + sep;
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + (sep_style == S::kAddColonSingle ? ":" : ": ")
                                       : role + ": " + message + sep;
            break;
        case S::kAddColonTwo:
            ret = system_prompt + sep;
            for (std::size_t i = 0; i < turns.size(); ++i)
                ret += turns[i].second.empty() ? turns[i].first + ":"
                                               : turns[i].first + ": " + turns[i].second + sep_at(i);
            break;
        case S::kAddNewLineSingle:
        case S::kQwen2VlEmbed:
            ret = system_prompt.empty() ? "" : system_prompt + sep;
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + "\n" : role + "\n" + message + sep;
            if (sep_style == S::kQwen2VlEmbed) {
                if (stop_str.size() != 1)
                    return Status::InvalidArgument("the conversation template " + name +
                                                   " (QWEN2_VL_EMBED) needs one stop string to end its prompt");
                ret += stop_str.front();
            }
            break;
        case S::kNoColonSingle:
            ret = system_prompt;
            for (const auto& [role, message] : turns) ret += message.empty() ? role : role + message + sep;
            break;
        case S::kNoColonTwo:
            ret = system_prompt;
            for (std::size_t i = 0; i < turns.size(); ++i)
                ret += turns[i].second.empty() ? turns[i].first : turns[i].first + turns[i].second + sep_at(i);
            break;
        case S::kRwkv:
            ret = system_prompt;
            for (const auto& [role, message] : turns)
                ret += message.empty()
                           ? role + ":"
                           : role + ": " + replace_all(replace_all(message, "\r\n", "\n"), "\n\n", "\n") + "\n\n";
            break;
        case S::kLlama4:
        case S::kLlama3: {
            const bool v4 = sep_style == S::kLlama4;
            const std::string open = v4 ? "<|header_start|>" : "<|start_header_id|>";
            const std::string close = v4 ? "<|header_end|>\n\n" : "<|end_header_id|>\n\n";
            const std::string end = v4 ? "<|eot|>" : "<|eot_id|>";
            ret = system.empty() ? "" : system_prompt;
            for (const auto& [role, message] : turns)
                ret += open + role + close + (message.empty() ? "" : strip(message) + end);
            break;
        }
        case S::kLlama2:
            ret = system.empty() ? "[INST] " : system_prompt;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                const std::string& tag = roles[i % 2];
                const std::string& message = turns[i].second;
                if (message.empty()) ret += tag;
                else if (i == 0) ret += message + " ";
                else ret += tag + " " + message + sep_at(i);
            }
            break;
        case S::kChatGlm: {
            const std::size_t round_add = name == "chatglm2" ? 1 : 0;
            ret = system_prompt.empty() ? "" : system_prompt + sep;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                if (i % 2 == 0) ret += "[Round " + std::to_string(i / 2 + round_add) + "]" + sep;
                ret += turns[i].first + "：" + (turns[i].second.empty() ? "" : turns[i].second + sep);
            }
            break;
        }
        case S::kChatMl:
            ret = system_prompt.empty() ? "" : system_prompt + sep + "\n";
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + "\n" : role + "\n" + message + sep + "\n";
            break;
        case S::kChatGlm3:
            ret = system.empty() ? "" : system_prompt;
            for (const auto& [role, message] : turns) ret += message.empty() ? role : role + "\n" + message;
            break;
        case S::kChatIntern:
            ret = system_prompt;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                if (i % 2 == 0) ret += "<s>";
                ret += turns[i].second.empty() ? turns[i].first + ":"
                                               : turns[i].first + ":" + turns[i].second + sep_at(i) + "\n";
            }
            break;
        case S::kDolly:
            ret = system_prompt;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                if (turns[i].second.empty()) {
                    ret += turns[i].first + ":\n";
                } else {
                    ret += turns[i].first + ":\n" + turns[i].second + sep_at(i);
                    if (i % 2 == 1) ret += "\n\n";
                }
            }
            break;
        case S::kPhoenix:
            ret = system_prompt;
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + ": <s>" : role + ": <s>" + message + "</s>";
            break;
        case S::kRobin:
            ret = system_prompt + sep;
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + ":\n" : role + ":\n" + message + sep;
            break;
        case S::kFalconChat:
            ret = system.empty() ? "" : system_prompt + sep;
            for (const auto& [role, message] : turns)
                ret += message.empty() ? role + ":" : role + ": " + message + sep;
            break;
        case S::kMetaMath:
            ret = system_prompt.empty() ? "" : system_prompt + sep;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                // sep2 prefixes the answer here.
                const std::string starting = i % 2 == 0 ? ":\n" : ": " + sep_at(i);
                ret += turns[i].first + starting +
                       (turns[i].second.empty() ? "" : turns[i].second + (i % 2 == 0 ? sep : ""));
            }
            break;
        case S::kDeepSeekChat:
        case S::kDeepSeekVl2:
            ret = sep_style == S::kDeepSeekChat ? system_prompt : system_prompt.empty() ? "" : system_prompt + sep;
            for (std::size_t i = 0; i < turns.size(); ++i)
                ret += turns[i].second.empty() ? turns[i].first + ":"
                                               : turns[i].first + ": " + turns[i].second + sep_at(i);
            break;
        case S::kGemma3:
            ret = system_prompt;
            for (std::size_t i = 0; i < turns.size(); ++i) {
                const auto& [role, message] = turns[i];
                ret += message.empty() ? role : (i == 0 ? "" : role) + message + sep;
            }
            break;
        case S::kMpt:
            ret = system_prompt + sep;
            for (const auto& [role, message] : turns) ret += message.empty() ? role : role + message + sep;
            break;
    }
    if (lacks_sep2)
        return Status::InvalidArgument("the conversation template " + name +
                                       " joins answers with a second separator (sep2) it does not have: SGLang's "
                                       "JSON templates carry none, so its separator style only renders one turn; "
                                       "use a style without sep2 or a Jinja template");
    if (continue_answer) {
        // serving_chat.py _apply_conversation_template: each stop string in turn, then sep, then sep2.
        const auto cut = [&ret](const std::string& end) {
            if (!end.empty() && ret.ends_with(end)) ret.resize(ret.size() - end.size());
        };
        for (const std::string& stop : stop_str) cut(stop);
        cut(sep);
        if (sep2) cut(*sep2);
    }
    return ret;
}

}  // namespace tessera::tokenizer
