// tokenizer/chat_template_test.cpp — the real Qwen3 and Llama 3 chat templates rendered
// byte for byte like transformers' apply_chat_template(tokenize=False). Goldens:
// tests/chat_templates/{qwen3,llama3}.json (generate_goldens.py, python3-jinja2).

#include "tokenizer/chat_template.h"

#include "tokenizer/builtin_chat_templates.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace tessera::tokenizer {
namespace {

using nlohmann::ordered_json;

ordered_json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

std::string token_or_empty(const ordered_json& config, const char* key) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return "";
    if (it->is_object()) return it->value("content", "");  // serialized AddedToken
    return it->get<std::string>();
}

StatusOr<ChatTemplate> load_template(const std::string& model) {
    ordered_json config =
        read_json(std::string(TSR_TOKENIZER_ASSETS) + "/" + model + "/tokenizer_config.json");
    if (!config.is_object() || !config.contains("chat_template")) {
        return Status::NotFound("no chat_template in the " + model + " tokenizer_config.json");
    }
    return ChatTemplate::compile(config["chat_template"].get<std::string>(),
                                 token_or_empty(config, "bos_token"),
                                 token_or_empty(config, "eos_token"));
}

void check_goldens(const std::string& model) {
    StatusOr<ChatTemplate> tmpl = load_template(model);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    ordered_json goldens =
        read_json(std::string(TSR_CHAT_TEMPLATE_GOLDENS) + "/" + model + ".json");
    ASSERT_TRUE(goldens.is_object()) << "bad goldens for " << model;
    const ordered_json& cases = goldens["cases"];
    ASSERT_GE(cases.size(), 8u);
    for (const ordered_json& c : cases) {
        SCOPED_TRACE(model + "/" + c["name"].get<std::string>());
        StatusOr<std::string> out = tmpl->render(c["request"]);
        ASSERT_TRUE(out.ok()) << out.status().message();
        EXPECT_EQ(*out, c["expected"].get<std::string>());
    }
}

TEST(ChatTemplate, Qwen3Goldens) { check_goldens("qwen3"); }
TEST(ChatTemplate, Llama3Goldens) { check_goldens("llama3"); }

TEST(ChatTemplate, RequestWithoutMessagesIsRejected) {
    StatusOr<ChatTemplate> tmpl = load_template("llama3");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    StatusOr<std::string> out = tmpl->render(nlohmann::json{{"add_generation_prompt", true}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("messages"), std::string::npos);
}

TEST(ChatTemplate, TokensAndExtraKeysReachTheTemplate) {
    StatusOr<ChatTemplate> tmpl = ChatTemplate::compile(
        "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|"
        "{{ documents is none }}|{{ flavor }}|{{ messages|length }}",
        "<s>", "</s>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    StatusOr<std::string> out =
        tmpl->render(nlohmann::json{{"messages", nlohmann::json::array()}, {"flavor", "x"}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(*out, "<s>|</s>|False|True|True|x|0");
}

TEST(ChatTemplate, EmptyBosTokenIsUndefined) {
    // Qwen3's tokenizer_config.json has bos_token null, which transformers leaves out.
    StatusOr<ChatTemplate> tmpl = ChatTemplate::compile("{{ bos_token is defined }}", "", "e");
    ASSERT_TRUE(tmpl.ok());
    StatusOr<std::string> out = tmpl->render(nlohmann::json{{"messages", nlohmann::json::array()}});
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, "False");
}

TEST(ChatTemplate, RaiseExceptionBecomesInvalidArgument) {
    StatusOr<ChatTemplate> tmpl = ChatTemplate::compile(
        "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be user') }}"
        "{% endif %}",
        "", "");
    ASSERT_TRUE(tmpl.ok());
    StatusOr<std::string> out =
        tmpl->render(nlohmann::json{{"messages", {{{"role", "assistant"}, {"content", "x"}}}}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find("first message must be user"), std::string::npos);
}

// SGLang's built-in conversation templates render the prompts its get_prompt builds
// (conversation.py: SeparatorStyle.CHATML and LLAMA2, generate_chat_conv's final open turn).
TEST(BuiltinChatTemplateTest, RenderAsSglangConversations) {
    const auto render = [](const char* name, const char* messages) {
        auto source = builtin_chat_template(name);
        EXPECT_TRUE(source.has_value()) << name;
        auto compiled = ChatTemplate::compile(source.value_or(""), "<s>", "</s>");
        EXPECT_TRUE(compiled.ok()) << name << ": " << compiled.status().message();
        if (!compiled.ok()) return std::string();
        auto text = compiled->render(ordered_json{{"messages", ordered_json::parse(messages)},
                                                  {"add_generation_prompt", true}});
        EXPECT_TRUE(text.ok()) << name << ": " << text.status().message();
        return text.ok() ? *text : std::string();
    };
    const char* one = R"([{"role": "user", "content": "Hi"}])";
    const char* three = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                            {"role": "user", "content": "Q"}])";
    const char* with_system = R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])";
    EXPECT_EQ(render("chatml", one),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(render("chatml", with_system),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(render("llama-2", one), "[INST] Hi [/INST]");
    EXPECT_EQ(render("llama-2", three), "[INST] Hi [/INST] Hello </s><s>[INST] Q [/INST]");
    EXPECT_EQ(render("llama-2", with_system), "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]");
    // As SGLang renders it: with a system prompt the first [INST] is not written.
    EXPECT_EQ(render("mistral", with_system), "[SYSTEM_PROMPT]\nS\n[/SYSTEM_PROMPT]\n\nHi [/INST]");
    EXPECT_EQ(render("mistral", three), "[INST] Hi [/INST] Hello </s><s>[INST] Q [/INST]");
    EXPECT_FALSE(builtin_chat_template("llama-3-instruct").has_value());
}

}  // namespace
}  // namespace tessera::tokenizer
