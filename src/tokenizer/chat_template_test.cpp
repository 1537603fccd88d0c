// tokenizer/chat_template_test.cpp — the real Qwen3 and Llama 3 chat templates rendered
// byte for byte like transformers' apply_chat_template(tokenize=False). Goldens:
// tests/chat_templates/{qwen3,llama3}.json (generate_goldens.py, python3-jinja2).

#include "tokenizer/chat_template.h"

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


}  // namespace
}  // namespace tessera::tokenizer
