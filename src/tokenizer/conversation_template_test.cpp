// tokenizer/conversation_template_test.cpp — SGLang's conversation templates: the prompts
// conversation.py get_prompt builds (worked out from its code for each style), the JSON file
// format, the model-path guesses.

#include "tokenizer/conversation_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_format.h"

namespace tessera::tokenizer {
namespace {

using nlohmann::ordered_json;

const char* kOne = R"([{"role": "user", "content": "Hi"}])";
const char* kThree = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                         {"role": "user", "content": "Q"}])";
const char* kWithSystem = R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])";

std::string prompt(const ConversationTemplate& t, const char* messages) {
    auto text = t.prompt(ordered_json::parse(messages));
    EXPECT_TRUE(text.ok()) << t.name << ": " << text.status().message();
    return text.ok() ? *text : std::string();
}

std::string builtin_prompt(const char* name, const char* messages) {
    const auto t = ConversationTemplate::builtin(name);
    EXPECT_TRUE(t.has_value()) << name;
    return t ? prompt(*t, messages) : std::string();
}

TEST(ConversationTemplateTest, BuiltinsRenderAsGetPrompt) {
    // CHATML: the system block always (its default message), each turn closed by sep + "\n".
    EXPECT_EQ(builtin_prompt("chatml", kOne),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(builtin_prompt("chatml", kWithSystem),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    // LLAMA2: the first message bare, later ones tagged by position, sep2 after answers.
    EXPECT_EQ(builtin_prompt("llama-2", kOne), "[INST] Hi [/INST]");
    EXPECT_EQ(builtin_prompt("llama-2", kThree), "[INST] Hi [/INST] Hello </s><s>[INST] Q [/INST]");
    EXPECT_EQ(builtin_prompt("llama-2", kWithSystem), "[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]");
    // With a system prompt the first [INST] is not written (as SGLang renders it).
    EXPECT_EQ(builtin_prompt("mistral", kWithSystem), "[SYSTEM_PROMPT]\nS\n[/SYSTEM_PROMPT]\n\nHi [/INST]");
    EXPECT_EQ(builtin_prompt("mistral", kThree), "[INST] Hi [/INST] Hello </s><s>[INST] Q [/INST]");
    // ADD_COLON_TWO: "ROLE: text" + sep / sep2 alternating, the open turn "ROLE:".
    EXPECT_EQ(builtin_prompt("vicuna_v1.1", kThree),
              "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
              "detailed, and polite answers to the user's questions. USER: Hi ASSISTANT: Hello</s>USER: Q "
              "ASSISTANT:");
    // LLAMA3: the system block only when there is a system message; messages stripped.
    EXPECT_EQ(builtin_prompt("llava_llama_3", R"([{"role": "system", "content": ""},
                                                 {"role": "user", "content": " Hi\n"}])"),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
              "<|end_header_id|>\n\n");
    // GEMMA3: the system text opens the first user turn, whose own tag is not written again.
    EXPECT_EQ(builtin_prompt("gemma-it", kThree),
              "<start_of_turn>user\nYou are a helpful assistant.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
              "Hello<end_of_turn>\n<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n");
    // DeepSeekVL2: an empty system prompt writes nothing.
    EXPECT_EQ(builtin_prompt("deepseek-vl2", kThree),
              "<|User|>: Hi\n\n<|Assistant|>: Hello<｜end▁of▁sentence｜><|User|>: Q\n\n<|Assistant|>:");
    // An assistant message without content is an open turn (Python's `if message:`).
    EXPECT_EQ(builtin_prompt("phi-4-mm", R"([{"role": "user", "content": "Hi"},
                                            {"role": "assistant", "content": null}])"),
              "<|user|>Hi<|end|><|assistant|><|assistant|>");
    EXPECT_FALSE(ConversationTemplate::builtin("llama-3-instruct").has_value());
    const auto chatml = ConversationTemplate::builtin("chatml");
    ASSERT_TRUE(chatml.has_value());
    EXPECT_EQ(chatml->stop_str, (std::vector<std::string>{"<|endoftext|>", "<|im_end|>"}));
}

TEST(ConversationTemplateTest, RefusesRolesItHasNoTagFor) {
    const auto t = ConversationTemplate::builtin("chatml");
    ASSERT_TRUE(t.has_value());
    auto text = t->prompt(ordered_json::parse(R"([{"role": "tool", "content": "42"}])"));
    ASSERT_FALSE(text.ok());
    EXPECT_NE(text.status().message().find("Unknown role: tool"), std::string::npos) << text.status().message();
}

// SGLang's docs example (custom_chat_template.md), read as template_manager.py does: the
// system format gains "\n{system_message}", sep defaults to "\n", there is no sep2.
TEST(ConversationTemplateTest, JsonTemplateAsTheTemplateManagerReadsIt) {
    auto t = ConversationTemplate::parse_json(R"({
        "name": "my_model", "system": "<|im_start|>system", "user": "<|im_start|>user",
        "assistant": "<|im_start|>assistant", "sep_style": "CHATML", "sep": "<|im_end|>",
        "stop_str": ["<|im_end|>", "<|im_start|>"]})", "t.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t->name, "my_model");
    EXPECT_EQ(t->stop_str, (std::vector<std::string>{"<|im_end|>", "<|im_start|>"}));
    EXPECT_EQ(prompt(*t, kOne),
              "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(prompt(*t, kWithSystem),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

    auto colon = ConversationTemplate::parse_json(R"({"name": "c", "system": "Be {{brief}}.",
        "system_message": "ok", "user": "Q", "assistant": "A", "sep_style": "ADD_COLON_SINGLE",
        "stop_str": "Q:"})", "c.json");
    ASSERT_TRUE(colon.ok()) << colon.status().message();
    EXPECT_EQ(colon->stop_str, std::vector<std::string>{"Q:"});
    EXPECT_EQ(prompt(*colon, kThree), "Be {brief}.\nok\nQ: Hi\nA: Hello\nQ: Q\nA:");

    // A style that alternates separators renders one turn, and refuses history (SGLang fails
    // concatenating its missing sep2).
    auto two = ConversationTemplate::parse_json(R"({"name": "v", "system": "", "user": "USER",
        "assistant": "ASSISTANT", "sep_style": "ADD_COLON_TWO", "sep": " ", "stop_str": null})", "v.json");
    ASSERT_TRUE(two.ok()) << two.status().message();
    EXPECT_TRUE(two->stop_str.empty());
    EXPECT_EQ(prompt(*two, kOne), "\n USER: Hi ASSISTANT:");
    auto history = two->prompt(ordered_json::parse(kThree));
    ASSERT_FALSE(history.ok());
    EXPECT_NE(history.status().message().find("second separator (sep2)"), std::string::npos);

    EXPECT_FALSE(ConversationTemplate::parse_json("[1]", "x.json").ok());
    EXPECT_FALSE(ConversationTemplate::parse_json(R"({"name": "x", "system": "", "user": "U", "assistant": "A",
        "sep_style": "CHATML", "stop_str": [1]})", "x.json").ok());
    auto single_brace = ConversationTemplate::parse_json(R"({"name": "x", "system": "}", "user": "U",
        "assistant": "A", "sep_style": "CHATML", "stop_str": []})", "x.json");
    ASSERT_FALSE(single_brace.ok());
    EXPECT_NE(single_brace.status().message().find("single '}'"), std::string::npos);
}

TEST(ConversationTemplateTest, InfersTheTemplateFromTheModelPathAsSglang) {
    EXPECT_EQ(ConversationTemplate::infer_from_model_path("meta-llama/Llama-2-7b-chat-hf"), "llama-2");
    EXPECT_EQ(ConversationTemplate::infer_from_model_path("/models/Mixtral-8x7B-Instruct-v0.1"), "mistral");
    EXPECT_EQ(ConversationTemplate::infer_from_model_path("lmsys/vicuna-7b-v1.5"), "vicuna_v1.1");
    EXPECT_EQ(ConversationTemplate::infer_from_model_path("Qwen/Qwen2-VL-7B-Instruct"), "qwen2-vl");
    EXPECT_EQ(ConversationTemplate::infer_from_model_path("Alibaba-NLP/gme-Qwen2-VL-2B-Instruct"), "gme-qwen2-vl");
    EXPECT_FALSE(ConversationTemplate::infer_from_model_path("Qwen/Qwen3-8B").has_value());
    EXPECT_FALSE(ConversationTemplate::infer_from_model_path("mistralai/Mistral-7B-v0.1").has_value());
    EXPECT_FALSE(ConversationTemplate::infer_from_model_path("meta-llama/Meta-Llama-3-8B-Instruct").has_value());
    // Every name a guess gives is built in.
    for (const char* path : {"internvl2_5", "llama-3.2-vision", "janus", "deepseek-vl2", "qwen2.5-omni",
                             "llava-onevision-qwen2", "gemma-3-4b-it", "minicpm-v", "minicpm-o", "kimi-vl",
                             "devstral", "phi-4-multimodal"}) {
        const auto name = ConversationTemplate::infer_from_model_path(path);
        ASSERT_TRUE(name.has_value()) << path;
        EXPECT_TRUE(ConversationTemplate::builtin(*name).has_value()) << *name;
    }
}

// A conversation template replaces the Jinja one and is encoded with special tokens.
TEST(ChatFormatTest, AConversationTemplateWinsOverTheJinjaOne) {
    ChatFormat format;
    auto jinja = ChatTemplate::compile("{{ messages[0]['content'] }}!", "", "");
    ASSERT_TRUE(jinja.ok());
    format.jinja = std::move(jinja).value();
    const ordered_json request = {{"messages", ordered_json::parse(kOne)}};
    EXPECT_EQ(format.render(request).value(), "Hi!");
    EXPECT_FALSE(format.encode_with_special_tokens());
    format.conversation = ConversationTemplate::builtin("llama-2");
    EXPECT_EQ(format.render(request).value(), "[INST] Hi [/INST]");
    EXPECT_TRUE(format.encode_with_special_tokens());
}

// serving_chat.py: a chat that ends with the assistant's message either continues it or, with
// a Jinja template, sends it as the user's (_handle_last_assistant_message); a conversation
// template continuing an answer drops the open turn and cuts the answer's stop string and sep.
TEST(ChatFormatTest, ALastAssistantMessageIsContinuedOrSentAsTheUsers) {
    const ordered_json request = {{"messages", ordered_json::parse(R"([{"role": "user", "content": "Hi"},
                                                                        {"role": "assistant", "content": "Sure"}])")}};
    ChatFormat format;
    auto jinja = ChatTemplate::compile(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}", "", "");
    ASSERT_TRUE(jinja.ok());
    format.jinja = std::move(jinja).value();
    EXPECT_EQ(format.render(request).value(), "<user>Hi<user>Sure<assistant>");
    EXPECT_EQ(format.render(request, /*continue_final_message=*/true).value(), "<user>Hi<assistant>Sure");
    const ordered_json asked = {{"messages", ordered_json::parse(kOne)}};
    EXPECT_EQ(format.render(asked, true).value(), "<user>Hi<assistant>") << "nothing to continue";

    format.conversation = ConversationTemplate::builtin("chatml");
    EXPECT_EQ(format.render(request).value(),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nSure<|im_end|>\n<|im_start|>assistant\n");
    // "...Sure<|im_end|>\n": no stop string ends it, sep does not either (the "\n" after it).
    EXPECT_EQ(format.render(request, true).value(),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nSure<|im_end|>\n");
    format.conversation = ConversationTemplate::builtin("llama-2");
    EXPECT_EQ(format.render(request, true).value(), "[INST] Hi [/INST] Sure") << "sep2 \" </s><s>\" cut";
    format.conversation = ConversationTemplate::builtin("phi-4-mm");
    EXPECT_EQ(format.render(request, true).value(), "<|user|>Hi<|end|><|assistant|>Sure") << "stop_str cut";
}

}  // namespace
}  // namespace tessera::tokenizer
