#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "grammar/lazy_dfa.h"
#include "grammar/structural_tag.h"

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

ProtocolOptions options() { return ProtocolOptions{.served_model_name = "tiny", .max_model_len = 4096}; }

ParseOutcome chat(const std::string& body) {
    return parse_request(ApiKind::kChatCompletion, body, options(), "chatcmpl-1");
}
ParseOutcome completion(const std::string& body) {
    return parse_request(ApiKind::kCompletion, body, options(), "cmpl-1");
}
ParseOutcome generate(const std::string& body) {
    return parse_request(ApiKind::kGenerate, body, options(), "gen-1");
}

// Expects a 400 (or `status`) naming `param`; returns the message.
std::string expect_error(const ParseOutcome& o, const std::string& param, int status = 400) {
    EXPECT_FALSE(o.ok()) << "expected an error about " << param;
    if (o.ok()) return "";
    EXPECT_EQ(o.error->http_status, status) << o.error->message;
    EXPECT_EQ(o.error->param, param) << o.error->message;
    const Json body = Json::parse(o.error->to_json());
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_EQ(body["error"]["message"], o.error->message);
    return o.error->message;
}

TEST(OpenAiProtocolTest, ChatRequestBecomesChatJson) {
    auto o = chat(R"({"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}],
        "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "seed": 42,
        "stop": ["\n", "END"], "frequency_penalty": 0.5, "presence_penalty": -0.5, "ignore_eos": true,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "chat_template_kwargs": {"enable_thinking": false}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ASSERT_EQ(o.request.requests.size(), 1u);
    const GenerationRequest& r = o.request.requests[0];
    EXPECT_EQ(r.request_id, "chatcmpl-1");
    ASSERT_TRUE(r.input.chat_json.has_value());
    EXPECT_FALSE(r.input.text.has_value());
    const Json cj = Json::parse(*r.input.chat_json);
    EXPECT_EQ(cj["messages"][1]["content"], "hi\nthere");
    EXPECT_EQ(cj["messages"][0]["role"], "system");
    EXPECT_EQ(cj["tools"][0]["function"]["name"], "f");
    EXPECT_EQ(cj["enable_thinking"], false);
    EXPECT_EQ(cj.begin().key(), "messages");  // key order preserved
    EXPECT_EQ(r.params.max_new_tokens, 7);
    EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
    EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
    EXPECT_EQ(r.params.top_k, 20);
    EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
    EXPECT_EQ(r.params.seed, 42u);
    EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n", "END"}));
    EXPECT_FLOAT_EQ(r.params.frequency_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.params.presence_penalty, -0.5f);
    EXPECT_TRUE(r.params.ignore_eos);
    EXPECT_FALSE(o.request.stream);
}

// SGLang's request field "priority", on every route; an integer only.
TEST(OpenAiProtocolTest, PriorityOnEveryRoute) {
    auto c = chat(R"({"messages": [{"role": "user", "content": "x"}], "priority": 7})");
    ASSERT_TRUE(c.ok()) << c.error->message;
    EXPECT_EQ(c.request.requests[0].params.priority, 7);
    auto p = completion(R"({"prompt": "x", "priority": -3})");
    ASSERT_TRUE(p.ok()) << p.error->message;
    EXPECT_EQ(p.request.requests[0].params.priority, -3);
    auto g = generate(R"({"text": "x", "priority": 12})");
    ASSERT_TRUE(g.ok()) << g.error->message;
    EXPECT_EQ(g.request.requests[0].params.priority, 12);
    EXPECT_FALSE(generate(R"({"text": "x"})").request.requests[0].params.priority.has_value());  // the server's default
    expect_error(generate(R"({"text": "x", "priority": "high"})"), "priority");
}

TEST(OpenAiProtocolTest, ChatDefaultsAndN) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 3, "stream": true,
        "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
        "max_completion_tokens": 5})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ASSERT_EQ(o.request.requests.size(), 3u);
    EXPECT_EQ(o.request.requests[2].request_id, "chatcmpl-1-2");
    EXPECT_TRUE(o.request.stream);
    EXPECT_TRUE(o.request.include_usage);
    EXPECT_TRUE(o.request.requests[0].params.logprobs);
    EXPECT_EQ(o.request.requests[0].params.top_logprobs, 2);
    EXPECT_EQ(o.request.requests[0].params.max_new_tokens, 5);
    auto d = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
    ASSERT_TRUE(d.ok());
    EXPECT_LT(d.request.requests[0].params.max_new_tokens, 0);  // up to the context length
}

TEST(OpenAiProtocolTest, ToolChoiceNoneDropsTools) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
        "tools": [{"type": "function", "function": {"name": "f"}}]})");
    ASSERT_TRUE(o.ok());
    EXPECT_FALSE(Json::parse(*o.request.requests[0].input.chat_json).contains("tools"));
    EXPECT_TRUE(o.request.requests[0].params.skip_special_tokens);
}

// tool_choice "required" and a named function constrain the output to a JSON list of calls
// (SGLang's get_json_schema_constraint), parsed as such whatever --tool-call-parser says.
TEST(OpenAiProtocolTest, ForcedToolChoiceConstrainsTheOutput) {
    const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
    const std::string tools = R"("tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
            "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "g"}}])";
    const auto schema_of = [](const ParseOutcome& o) {
        EXPECT_TRUE(o.ok()) << (o.ok() ? "" : o.error->message);
        if (!o.ok() || !o.request.requests[0].params.constraint) return Json();
        EXPECT_EQ(o.request.tool_calls->name, "json_array");
        EXPECT_EQ(o.request.tool_names, (std::vector<std::string>{"f", "g"}));
        return Json::parse(o.request.requests[0].params.constraint->text);
    };
    const Json f_call = Json::parse(R"({"properties": {"name": {"type": "string", "enum": ["f"]},
        "parameters": {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
                       "$defs": {"P": {"type": "integer"}}}},
        "required": ["name", "parameters"]})");
    const Json g_call = Json::parse(R"({"properties": {"name": {"type": "string", "enum": ["g"]},
        "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]})");
    Json required = schema_of(chat("{" + m + ", " + tools + R"(, "tool_choice": "required"})"));
    EXPECT_EQ(required, Json({{"type", "array"}, {"minItems", 1},
                              {"items", {{"type", "object"}, {"anyOf", Json::array({f_call, g_call})}}},
                              {"$defs", {{"P", {{"type", "integer"}}}}}}));
    Json named = schema_of(chat("{" + m + ", " + tools +
                                R"(, "tool_choice": {"type": "function", "function": {"name": "g"}},
                                   "parallel_tool_calls": false})"));
    EXPECT_EQ(named, Json({{"type", "array"}, {"minItems", 1}, {"items", g_call}, {"maxItems", 1}}));
    // The request's own constraint wins; without --tool-call-parser the calls are then not parsed.
    auto own = chat("{" + m + ", " + tools + R"(, "tool_choice": "required", "regex": "x+"})");
    ASSERT_TRUE(own.ok());
    EXPECT_EQ(own.request.requests[0].params.constraint->text, "x+");
    EXPECT_FALSE(own.request.tool_calls);
    expect_error(chat("{" + m + R"(, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "a", "parameters": {"$defs": {"D": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "b", "parameters": {"$defs": {"D": {"type": "null"}}}}}]})"),
                 "tools");
}

// serving_chat.py: tools on offer keep the special tokens in the output (call markers), even
// over the request's own skip_special_tokens.
// _patch_reasoning_skip_special_tokens: --reasoning-parser mistral keeps [THINK] (a special
// token) when the request sets reasoning_effort other than "none".
TEST(OpenAiProtocolTest, MistralReasoningEffortKeepsSpecialTokens) {
    ProtocolOptions o = options();
    o.reasoning = reasoning_format("mistral").value();
    const auto skip = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion,
                             R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}", o, "c")
            .request.requests[0]
            .params.skip_special_tokens;
    };
    EXPECT_TRUE(skip(""));
    EXPECT_TRUE(skip(R"(, "reasoning_effort": "none")"));
    EXPECT_FALSE(skip(R"(, "reasoning_effort": "high")"));
    o.reasoning = reasoning_format("qwen3").value();
    EXPECT_TRUE(skip(R"(, "reasoning_effort": "high")"));
}

TEST(OpenAiProtocolTest, ToolsKeepSpecialTokens) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "skip_special_tokens": true,
        "tools": [{"type": "function", "function": {"name": "f"}}]})");
    ASSERT_TRUE(o.ok());
    EXPECT_FALSE(o.request.requests[0].params.skip_special_tokens);
    const auto plain = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
    EXPECT_TRUE(plain.request.requests[0].params.skip_special_tokens);
}

TEST(OpenAiProtocolTest, ChatErrorsNameTheField) {
    expect_error(chat(R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})"), "model", 404);
    EXPECT_EQ(chat(R"({"model": "gpt-4", "messages": []})").error->code, "model_not_found");
    expect_error(chat(R"({"messages": []})"), "messages");
    expect_error(chat(R"({})"), "messages");
    expect_error(chat(R"({"messages": "hi"})"), "messages");
    expect_error(chat(R"({"messages": [{"role": "wizard", "content": "x"}]})"), "messages[0].role");
    expect_error(chat(R"({"messages": [{"role": "user"}]})"), "messages[0].content");
    expect_error(chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
                 "messages[0].content[0].type");
    const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
    std::string msg = expect_error(chat("{" + m + R"(, "max_tokens": "ten"})"), "max_tokens");
    EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
    expect_error(chat("{" + m + R"(, "max_tokens": -1})"), "max_tokens");
    expect_error(chat("{" + m + R"(, "max_tokens": 0})"), "max_tokens");
    expect_error(chat("{" + m + R"(, "max_tokens": 1.5})"), "max_tokens");
    expect_error(chat("{" + m + R"(, "max_tokens": 99999999999999999999})"), "max_tokens");
    expect_error(chat("{" + m + R"(, "max_tokens": 5000})"), "max_tokens");  // > max_model_len
    expect_error(chat("{" + m + R"(, "max_tokens": true})"), "max_tokens");
    expect_error(chat("{" + m + R"(, "temperature": 2.5})"), "temperature");
    expect_error(chat("{" + m + R"(, "temperature": "hot"})"), "temperature");
    expect_error(chat("{" + m + R"(, "top_p": 0})"), "top_p");
    expect_error(chat("{" + m + R"(, "top_k": 0})"), "top_k");
    expect_error(chat("{" + m + R"(, "frequency_penalty": 3})"), "frequency_penalty");
    expect_error(chat("{" + m + R"(, "presence_penalty": -2.1})"), "presence_penalty");
    expect_error(chat("{" + m + R"(, "stop": ["a", "b", "c", "d", "e"]})"), "stop");
    expect_error(chat("{" + m + R"(, "stop": [1]})"), "stop");
    expect_error(chat("{" + m + R"(, "n": 0})"), "n");
    expect_error(chat("{" + m + R"(, "n": 1000})"), "n");
    expect_error(chat("{" + m + R"(, "logprobs": 1})"), "logprobs");
    expect_error(chat("{" + m + R"(, "top_logprobs": 21, "logprobs": true})"), "top_logprobs");
    expect_error(chat("{" + m + R"(, "top_logprobs": 3})"), "top_logprobs");
    expect_error(chat("{" + m + R"(, "stream": "yes"})"), "stream");
    expect_error(chat("{" + m + R"(, "stream_options": {"include_usage": true}})"), "stream_options");
    expect_error(chat("{" + m + R"(, "stream": true, "stream_options": {"include_usage": 1}})"),
                 "stream_options.include_usage");
    expect_error(chat("{" + m + R"(, "response_format": {"type": "xml"}})"), "response_format");
    expect_error(chat("{" + m + R"(, "response_format": {"type": "json_schema"}})"), "response_format.json_schema");
    expect_error(chat("{" + m + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})"),
                 "response_format.json_schema.schema");
    expect_error(chat("{" + m + R"(, "response_format": {"type": "structural_tag"}})"), "response_format.structures");
    expect_error(chat("{" + m + R"(, "regex": "a", "response_format": {"type": "json_object"}})"), "response_format");
    expect_error(chat("{" + m + R"(, "regex": 5})"), "regex");
    expect_error(chat("{" + m + R"(, "tool_choice": "required"})"), "tool_choice");  // no tools
    expect_error(chat("{" + m + R"(, "tool_choice": "any"})"), "tool_choice");
    expect_error(chat("{" + m + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}},
        "tools": [{"type": "function", "function": {"name": "f"}}]})"), "tool_choice");
    expect_error(chat("{" + m + R"(, "tools": [{"type": "function"}]})"), "tools[0]");
    expect_error(chat("{" + m + R"(, "chat_template_kwargs": [1]})"), "chat_template_kwargs");
    // null is "absent"
    EXPECT_TRUE(chat("{" + m + R"(, "max_tokens": null, "temperature": null})").ok());
}

// 10^5 nested arrays in a message, in a tool's parameters or in chat_template_kwargs: a 400
// naming the limit, never a crash; nesting up to the limit is still accepted.
TEST(OpenAiProtocolTest, DeepNestingIsRefusedNotCrashedOn) {
    const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    const std::string deep = nested(100000);
    for (const std::string& body :
         {R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
          R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": )" +
              deep + "}}}]}",
          R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": )" + deep + "}}"}) {
        const ParseOutcome o = chat(body);
        ASSERT_FALSE(o.ok());
        EXPECT_EQ(o.error->http_status, 400);
        EXPECT_NE(o.error->message.find("nests deeper than 128 levels"), std::string::npos) << o.error->message;
    }
    const ParseOutcome ok = chat(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": )" +
                                 nested(100) + "}}");
    EXPECT_TRUE(ok.ok()) << (ok.error ? ok.error->message : "");
}

// Fields the server does not implement are refused, not silently ignored.
TEST(OpenAiProtocolTest, UnimplementedFieldsAreRefused) {
    expect_error(generate(R"({"text": "hi", "lora_path": "adapter"})"), "lora_path");
    expect_error(generate(R"({"text": "hi", "custom_logit_processor": "x"})"), "custom_logit_processor");
    expect_error(generate(R"({"text": "hi", "sampling_params": {"custom_params": 3}})"),
                 "sampling_params.custom_params");
    expect_error(generate(R"({"text": "hi", "lora_id": "adapter-1"})"), "lora_id");
}

// SGLang's sessions: session_params on /generate, the bodies of /open_session and /close_session.
TEST(OpenAiProtocolTest, SessionFields) {
    const ParseOutcome o =
        generate(R"({"text": "hi", "session_params": {"id": "s1", "rid": "r0", "offset": -1, "replace": true}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    const auto& s = o.request.requests.at(0).params.session;
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->id, "s1");
    EXPECT_EQ(s->rid, "r0");
    EXPECT_EQ(s->offset, -1);
    EXPECT_TRUE(s->replace);
    EXPECT_FALSE(s->drop_previous_output);
    const ParseOutcome new_branch = generate(R"({"text": "hi", "session_params": {"id": "s1", "rid": null}})");
    EXPECT_FALSE(new_branch.request.requests.at(0).params.session->rid);
    expect_error(generate(R"({"text": "hi", "session_params": {"rid": "r0"}})"), "session_params.id");
    expect_error(generate(R"({"text": "hi", "session_params": "s1"})"), "session_params");
    expect_error(generate(R"({"text": ["a", "b"], "session_params": {"id": "s1"}})"), "session_params");
    expect_error(generate(R"({"text": "a", "sampling_params": {"n": 2}, "session_params": {"id": "s1"}})"),
                 "session_params");

    const OpenSessionOutcome open = parse_open_session(R"({"capacity_of_str_len": 1000, "session_id": "x",
        "timeout": 2.5})");
    ASSERT_FALSE(open.error) << open.error->message;
    EXPECT_EQ(open.params.capacity_of_str_len, 1000);
    EXPECT_EQ(open.params.session_id, "x");
    EXPECT_EQ(open.params.timeout_s, 2.5);
    EXPECT_FALSE(open.params.streaming);
    EXPECT_TRUE(parse_open_session(R"({"session_id": "x"})").error) << "capacity_of_str_len is required";
    EXPECT_TRUE(parse_open_session(R"({"capacity_of_str_len": 1, "timeout": 0})").error);
    EXPECT_TRUE(parse_open_session("[]").error);
    EXPECT_EQ(std::get<std::string>(parse_close_session(R"({"session_id": "x"})")), "x");
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_close_session("{}")));
}

TEST(OpenAiProtocolTest, LogitBias) {
    const ParseOutcome o = chat(R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"42": 5, "7": -100}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    auto bias = o.request.requests[0].params.logit_bias;
    std::sort(bias.begin(), bias.end());
    EXPECT_EQ(bias, (std::vector<std::pair<std::int32_t, float>>{{7, -100.0f}, {42, 5.0f}}));
    const ParseOutcome g = generate(R"({"text": "hi", "sampling_params": {"logit_bias": {"3": 1.5}}})");
    ASSERT_TRUE(g.ok()) << g.error->message;
    EXPECT_EQ(g.request.requests[0].params.logit_bias, (std::vector<std::pair<std::int32_t, float>>{{3, 1.5f}}));
    expect_error(completion(R"({"prompt": "hi", "logit_bias": {"42": 101}})"), "logit_bias");
    expect_error(completion(R"({"prompt": "hi", "logit_bias": {"-1": 1}})"), "logit_bias");
    expect_error(completion(R"({"prompt": "hi", "logit_bias": {"abc": 1}})"), "logit_bias");
    expect_error(completion(R"({"prompt": "hi", "logit_bias": [1, 2]})"), "logit_bias");
    expect_error(generate(R"({"text": "hi", "sampling_params": {"logit_bias": {"1": "x"}}})"),
                 "sampling_params.logit_bias");
}

TEST(OpenAiProtocolTest, BodyLevelErrors) {
    std::string msg = expect_error(chat("{not json"), "");
    EXPECT_NE(msg.find("not valid JSON"), std::string::npos);
    msg = expect_error(chat("[1, 2]"), "");
    EXPECT_NE(msg.find("JSON object"), std::string::npos);
    msg = expect_error(chat("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"), "");
    EXPECT_NE(msg.find("UTF-8"), std::string::npos);
    expect_error(chat(""), "");
}

TEST(OpenAiProtocolTest, Utf8Validator) {
    EXPECT_EQ(find_invalid_utf8("plain"), std::string_view::npos);
    EXPECT_EQ(find_invalid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"), std::string_view::npos);
    EXPECT_EQ(find_invalid_utf8("ab\xc0\xaf"), 2u);         // overlong
    EXPECT_EQ(find_invalid_utf8("\xed\xa0\x80"), 0u);        // surrogate
    EXPECT_EQ(find_invalid_utf8("x\xe2\x82"), 1u);           // truncated
    EXPECT_EQ(find_invalid_utf8("\xf4\x90\x80\x80"), 0u);    // > U+10FFFF
}

TEST(OpenAiProtocolTest, CompletionPrompts) {
    auto o = completion(R"({"model": "tiny", "prompt": "Once", "max_tokens": 3, "logprobs": 2})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    EXPECT_EQ(o.request.requests[0].input.text, "Once");
    EXPECT_EQ(o.request.requests[0].params.max_new_tokens, 3);
    EXPECT_TRUE(o.request.logprobs);
    EXPECT_EQ(o.request.top_logprobs, 2);
    auto d = completion(R"({"prompt": "x"})");
    EXPECT_EQ(d.request.requests[0].params.max_new_tokens, 16);  // OpenAI's completions default
    auto ids = completion(R"({"prompt": [1, 2, 3]})");
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids.request.requests[0].input.input_ids, (std::vector<std::int32_t>{1, 2, 3}));
    EXPECT_TRUE(completion(R"({"prompt": ["one"]})").ok());
    EXPECT_TRUE(completion(R"({"prompt": [[4, 5]]})").ok());
    // A batch: one choice per prompt and per further sample, in SGLang's order.
    auto batch = completion(R"({"prompt": ["a", [4, 5]], "n": 2, "max_tokens": 3})");
    ASSERT_TRUE(batch.ok()) << batch.error->message;
    ASSERT_EQ(batch.request.requests.size(), 4u);
    EXPECT_EQ(*batch.request.requests[0].input.text, "a");
    EXPECT_EQ(*batch.request.requests[1].input.input_ids, (std::vector<std::int32_t>{4, 5}));
    EXPECT_EQ(*batch.request.requests[2].input.text, "a");
    EXPECT_EQ(batch.request.requests[3].params.max_new_tokens, 3);
    EXPECT_EQ(batch.request.requests[3].request_id, "cmpl-1-3");
    expect_error(completion(R"({"prompt": ["a", 5]})"), "prompt");
    expect_error(completion(R"({"prompt": [1, -2]})"), "prompt");
    expect_error(completion(R"({"prompt": []})"), "prompt");
    expect_error(completion(R"({"prompt": 5})"), "prompt");
    expect_error(completion(R"({})"), "prompt");
    expect_error(completion(R"({"prompt": "x", "echo": 1})"), "echo");
    expect_error(completion(R"({"prompt": "x", "logprobs": true})"), "logprobs");
}

TEST(OpenAiProtocolTest, NativeGenerate) {
    auto o = generate(R"({"text": "hi", "rid": "r1", "stream": true, "return_logprob": true,
        "top_logprobs_num": 3, "sampling_params": {"max_new_tokens": 9, "temperature": 0,
        "stop_token_ids": [2, 3], "skip_special_tokens": false, "n": 2}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ASSERT_EQ(o.request.requests.size(), 2u);
    EXPECT_EQ(o.request.requests[0].request_id, "r1-0");
    EXPECT_EQ(o.request.requests[1].request_id, "r1-1");
    const GenerationParams& p = o.request.requests[0].params;
    EXPECT_EQ(p.max_new_tokens, 9);
    EXPECT_EQ(p.temperature, 0.0f);
    EXPECT_EQ(p.stop_token_ids, (std::vector<std::int32_t>{2, 3}));
    EXPECT_FALSE(p.skip_special_tokens);
    EXPECT_TRUE(p.logprobs);
    EXPECT_EQ(p.top_logprobs, 3);
    auto d = generate(R"({"input_ids": [5, 6]})");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.request.requests[0].request_id, "gen-1");
    EXPECT_EQ(d.request.requests[0].params.max_new_tokens, 128);
    expect_error(generate(R"({})"), "text");
    expect_error(generate(R"({"text": "a", "input_ids": [1]})"), "text");
    expect_error(generate(R"({"text": []})"), "text");
    expect_error(generate(R"({"text": ["a", 5]})"), "text");
    expect_error(generate(R"({"text": "a", "sampling_params": {"max_new_tokens": -5}})"),
                 "sampling_params.max_new_tokens");
    expect_error(generate(R"({"text": "a", "sampling_params": {"regex": "a+", "json_schema": "{}"}})"),
                 "sampling_params.json_schema");
    expect_error(generate(R"({"text": "a", "sampling_params": {"ebnf": 5}})"), "sampling_params.ebnf");
    expect_error(generate(R"({"text": "a", "sampling_params": {"ebnf": "root ::= \"a\"", "regex": "a"}})"),
                 "sampling_params.ebnf");
    expect_error(generate(R"({"text": "a", "sampling_params": {"structural_tag": 5}})"),
                 "sampling_params.structural_tag");
    expect_error(generate(R"({"text": "a", "sampling_params": {"json_schema": 5}})"), "sampling_params.json_schema");
    expect_error(generate(R"({"text": "a", "sampling_params": [{}]})"), "sampling_params");
    expect_error(generate(R"({"text": "a", "rid": 5})"), "rid");
}

// A batched /generate (SGLang's GenerateReqInput with a list): every input once, then again for
// each further sample of n; sampling_params one for all or one per input; rid one per answer.
TEST(OpenAiProtocolTest, BatchedGenerate) {
    auto o = generate(R"({"text": ["a", "b"], "sampling_params": {"max_new_tokens": 3, "n": 2}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    EXPECT_TRUE(o.request.batched_input);
    ASSERT_EQ(o.request.requests.size(), 4u);
    std::vector<std::string> texts, ids;
    for (const GenerationRequest& req : o.request.requests) {
        texts.push_back(*req.input.text);
        ids.push_back(req.request_id);
        EXPECT_EQ(req.params.max_new_tokens, 3);
    }
    EXPECT_EQ(texts, (std::vector<std::string>{"a", "b", "a", "b"}));
    EXPECT_EQ(ids, (std::vector<std::string>{"gen-1-0", "gen-1-1", "gen-1-2", "gen-1-3"}));
    o = generate(R"({"input_ids": [[1, 2], [3]], "rid": ["x", "y"], "return_logprob": true,
        "sampling_params": [{"temperature": 0, "max_new_tokens": 2}, {"temperature": 0.5, "regex": "a+"}]})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ASSERT_EQ(o.request.requests.size(), 2u);
    EXPECT_EQ(o.request.requests[0].request_id, "x");
    EXPECT_EQ(*o.request.requests[1].input.input_ids, (std::vector<std::int32_t>{3}));
    EXPECT_EQ(o.request.requests[0].params.max_new_tokens, 2);
    EXPECT_EQ(o.request.requests[1].params.max_new_tokens, 128);
    EXPECT_EQ(o.request.requests[1].params.temperature, 0.5f);
    EXPECT_FALSE(o.request.requests[0].params.constraint);
    EXPECT_TRUE(o.request.requests[1].params.constraint);
    EXPECT_TRUE(o.request.requests[1].params.logprobs);
    o = generate(R"({"text": ["only"]})");  // a list of one is a batch of one
    ASSERT_TRUE(o.ok());
    EXPECT_TRUE(o.request.batched_input);
    EXPECT_EQ(o.request.requests.size(), 1u);
    expect_error(generate(R"({"text": ["a", "b"], "rid": ["x"]})"), "rid");
    o = generate(R"({"text": ["a", "b"], "rid": ["x", "y"], "sampling_params": {"n": 2}})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ids.clear();
    for (const GenerationRequest& req : o.request.requests) ids.push_back(req.request_id);
    EXPECT_EQ(ids, (std::vector<std::string>{"x-0", "y-0", "x-1", "y-1"}));
    expect_error(generate(R"({"text": "a", "sampling_params": [{}]})"), "sampling_params");
    expect_error(generate(R"({"text": ["a", "b"], "sampling_params": [{}]})"), "sampling_params");
    expect_error(generate(R"({"text": ["a", "b"], "sampling_params": [{"n": 2}, {"n": 1}]})"),
                 "sampling_params[1].n");
    expect_error(generate(R"({"text": ["a", "b"], "sampling_params": [{"n": 2}, {}]})"),
                 "sampling_params[1].n");  // the second's n is the default, 1
    expect_error(generate(R"({"text": ["a", "b"], "sampling_params": [{}, {"top_k": 0}]})"),
                 "sampling_params[1].top_k");
    std::string many = R"({"text": [)";
    for (int i = 0; i < 257; ++i) many += std::string(i ? "," : "") + "\"x\"";
    expect_error(generate(many + "]}"), "text");
}

// regex / json_schema in /generate's sampling_params, at the top of the OpenAI routes, and the
// OpenAI response_format (json_object asks for any object, as SGLang's serving_chat.py).
TEST(OpenAiProtocolTest, ConstraintsReachTheParams) {
    using Kind = OutputConstraint::Kind;
    const auto constraint_of = [](const ParseOutcome& parsed) -> std::optional<OutputConstraint> {
        EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error->message);
        if (!parsed.ok()) return std::nullopt;
        return parsed.request.requests[0].params.constraint;
    };
    auto c = constraint_of(generate(R"({"text": "a", "sampling_params": {"regex": "[ab]+"}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kRegex);
    EXPECT_EQ(c->text, "[ab]+");
    c = constraint_of(generate(R"({"text": "a", "sampling_params": {"json_schema": "{\"type\": \"string\"}"}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kJsonSchema);
    EXPECT_EQ(c->text, R"({"type": "string"})");
    c = constraint_of(generate(R"({"text": "a", "sampling_params": {"json_schema": {"type": "integer"}}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->text, R"({"type":"integer"})");
    EXPECT_FALSE(constraint_of(generate(R"({"text": "a", "sampling_params": {"regex": null}})")));
    c = constraint_of(generate(R"({"text": "a", "sampling_params": {"ebnf": "root ::= \"x\""}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kEbnf);
    const std::string m = R"("model": "tiny", "messages": [{"role": "user", "content": "hi"}])";
    c = constraint_of(chat("{" + m + R"(, "response_format": {"type": "json_object"}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kJsonSchema);
    EXPECT_EQ(c->text, R"({"type": "object"})");
    c = constraint_of(chat("{" + m + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n",
        "schema": {"type": "object", "properties": {"b": {}, "a": {}}}, "strict": true}}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->text, R"({"type":"object","properties":{"b":{},"a":{}}})");  // key order kept
    EXPECT_FALSE(constraint_of(chat("{" + m + R"(, "response_format": {"type": "text"}})")));
    c = constraint_of(chat("{" + m + R"(, "regex": "x{2}"})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kRegex);
    // structural_tag: the whole response_format (serving_chat.py), or /generate's own; the
    // other constraints win over it, as in SGLang's scheduler.
    c = constraint_of(chat("{" + m + R"(, "response_format": {"type": "structural_tag", "structures": [],
        "triggers": ["<f"]}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kStructuralTag);
    EXPECT_EQ(c->text, R"({"type":"structural_tag","structures":[],"triggers":["<f"]})");
    // xgrammar's structural tag, as SGLang's docs send it.
    c = constraint_of(chat("{" + m + R"(, "response_format": {"type": "structural_tag",
        "format": {"type": "const_string", "value": "ok"}}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kStructuralTag);
    EXPECT_EQ(c->text, R"({"type":"structural_tag","format":{"type":"const_string","value":"ok"}})");
    expect_error(chat("{" + m + R"(, "response_format": {"type": "structural_tag", "format": [1]}})"),
                 "response_format.format");
    c = constraint_of(chat("{" + m + R"(, "regex": "x", "response_format": {"type": "structural_tag",
        "structures": [], "triggers": []}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kRegex);
    c = constraint_of(generate(R"({"text": "a", "sampling_params": {"structural_tag": "{\"triggers\": []}"}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kStructuralTag);
    EXPECT_EQ(c->text, R"({"triggers": []})");
    c = constraint_of(generate(R"({"text": "a", "sampling_params": {"structural_tag": "{}", "regex": "b"}})"));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, Kind::kRegex);
}

GenerationEvent event(std::string text, std::vector<std::int32_t> ids, std::int64_t completion,
                      std::optional<std::string> finish = std::nullopt) {
    GenerationEvent e;
    e.text = std::move(text);
    e.token_ids = std::move(ids);
    e.usage = Usage{.prompt_tokens = 5, .completion_tokens = completion, .cached_tokens = 2};
    e.finish_reason = std::move(finish);
    return e;
}

// Splits "data: …\n\n" SSE text into its payloads.
std::vector<std::string> sse_payloads(const std::string& s) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while ((pos = s.find("data: ", pos)) != std::string::npos) {
        const std::size_t end = s.find("\n\n", pos);
        out.push_back(s.substr(pos + 6, end - pos - 6));
        pos = end + 2;
    }
    return out;
}

TEST(ResponseBuilderTest, ChatNonStreaming) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
    ResponseBuilder b(o.request);
    EXPECT_EQ(b.add_event(0, event("Hel", {1}, 1)), "");
    EXPECT_FALSE(b.finished());
    auto last = event("lo", {2}, 2, "stop");
    last.matched_stop = "\n";
    b.add_event(0, last);
    ASSERT_TRUE(b.finished());
    const Json j = Json::parse(b.body());
    EXPECT_EQ(j["id"], "chatcmpl-1");
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["model"], "tiny");
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["choices"][0]["matched_stop"], "\n");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(j["usage"]["completion_tokens"], 2);
    EXPECT_EQ(j["usage"]["total_tokens"], 7);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(ResponseBuilderTest, ChatStreamingRoleThenContentThenUsage) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
        "stream_options": {"include_usage": true}})");
    ResponseBuilder b(o.request);
    std::string out = b.add_event(0, event("Hi", {1}, 1));
    out += b.add_event(0, event("", {2}, 2, "length"));
    ASSERT_TRUE(b.finished());
    auto payloads = sse_payloads(out);
    ASSERT_EQ(payloads.size(), 5u) << out;
    const Json role = Json::parse(payloads[0]);
    EXPECT_EQ(role["object"], "chat.completion.chunk");
    EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
    const Json content = Json::parse(payloads[1]);
    EXPECT_EQ(content["choices"][0]["delta"]["content"], "Hi");
    EXPECT_TRUE(content["choices"][0]["finish_reason"].is_null());
    const Json fin = Json::parse(payloads[2]);
    EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(fin["choices"][0]["delta"].empty());
    const Json usage = Json::parse(payloads[3]);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
    EXPECT_EQ(payloads[4], "[DONE]");
}

// --reasoning-parser qwen3: the think block goes to reasoning_content, whole or streamed.
ParseOutcome reasoning_chat(const std::string& body, bool template_opens = false) {
    ProtocolOptions o = options();
    o.reasoning = reasoning_format("qwen3").value();
    o.template_opens_reasoning = template_opens;
    return parse_request(ApiKind::kChatCompletion, body, o, "chatcmpl-1");
}

Json chat_body(const ParseOutcome& o, const std::vector<std::string>& pieces) {
    ResponseBuilder b(o.request);
    for (std::size_t i = 0; i < pieces.size(); ++i)
        b.add_event(0, event(pieces[i], {static_cast<std::int32_t>(i)}, static_cast<std::int64_t>(i + 1),
                             i + 1 == pieces.size() ? std::optional<std::string>("stop") : std::nullopt));
    return Json::parse(b.body());
}

// serving_chat.py _apply_conversation_template: a conversation template's stop strings come
// first unless the request ignores EOS; a reasoning request's prompt opens the think block.
TEST(OpenAiProtocolTest, ConversationTemplateStopsAndThink) {
    ProtocolOptions o = options();
    o.conversation_stop = {"<|im_end|>", "<|endoftext|>"};
    const auto parse = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion,
                             R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}", o, "c");
    };
    EXPECT_EQ(parse(R"(, "stop": "END")").request.requests[0].params.stop,
              (std::vector<std::string>{"<|im_end|>", "<|endoftext|>", "END"}));
    EXPECT_EQ(parse(R"(, "stop": "END", "ignore_eos": true)").request.requests[0].params.stop,
              std::vector<std::string>{"END"});
    EXPECT_EQ(parse("").request.requests[0].input.chat_prompt_suffix, "") << "no reasoning parser";

    o.reasoning = reasoning_format("deepseek-v3").value();
    o.conversation_opens_think = true;
    const ParseOutcome thinking = parse(R"(, "chat_template_kwargs": {"thinking": true})");
    EXPECT_EQ(thinking.request.requests[0].input.chat_prompt_suffix, "<think>");
    EXPECT_TRUE(thinking.request.force_reasoning) << "the output starts inside the think block";
    const ParseOutcome plain = parse("");
    EXPECT_EQ(plain.request.requests[0].input.chat_prompt_suffix, "") << "DeepSeek's switch defaults off";
    EXPECT_FALSE(plain.request.force_reasoning);
    const ParseOutcome continued = parse_request(ApiKind::kChatCompletion, R"({"messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "continue_final_message": true,
        "chat_template_kwargs": {"thinking": true}})", o, "c");
    EXPECT_TRUE(continued.request.requests[0].input.continue_final_message);
    EXPECT_EQ(continued.request.requests[0].input.chat_prompt_suffix, "") << "an answer continues as it is";
}

// serving_chat.py _get_reasoning_from_request: which requests count reasoning tokens; usage
// reports them at the top level (SGLang's UsageInfo), /generate in meta_info.
TEST(ResponseBuilderTest, ReasoningTokens) {
    const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
    EXPECT_TRUE(reasoning_chat("{" + messages + "}").request.requests[0].params.require_reasoning);
    EXPECT_FALSE(reasoning_chat("{" + messages + R"(, "chat_template_kwargs": {"enable_thinking": false}})")
                     .request.requests[0].params.require_reasoning);
    ProtocolOptions o = options();
    o.reasoning = reasoning_format("deepseek-v3").value();
    const auto deepseek = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion, "{" + messages + extra + "}", o, "c").request.requests[0];
    };
    EXPECT_FALSE(deepseek("").params.require_reasoning) << "DeepSeek's thinking switch defaults off";
    EXPECT_TRUE(deepseek(R"(, "chat_template_kwargs": {"thinking": true})").params.require_reasoning);
    EXPECT_FALSE(chat("{" + messages + "}").request.requests[0].params.require_reasoning) << "no parser";
    EXPECT_TRUE(generate(R"({"text": "x", "require_reasoning": true})").request.requests[0].params.require_reasoning);
    // custom_params.thinking_budget (--enable-strict-thinking), in sampling_params or the OpenAI body.
    EXPECT_EQ(generate(R"({"text": "x", "sampling_params": {"custom_params": {"thinking_budget": 7, "k": 1}}})")
                  .request.requests[0].params.thinking_budget,
              7);
    EXPECT_EQ(reasoning_chat("{" + messages + R"(, "custom_params": {"thinking_budget": 3}})")
                  .request.requests[0].params.thinking_budget,
              3);
    EXPECT_FALSE(chat("{" + messages + "}").request.requests[0].params.thinking_budget.has_value());
    expect_error(generate(R"({"text": "x", "sampling_params": {"custom_params": {"thinking_budget": "a"}}})"),
                 "sampling_params.custom_params.thinking_budget");

    ResponseBuilder b(reasoning_chat("{" + messages + "}").request);
    GenerationEvent e = event("<think>a</think>b", {1, 2, 3}, 3, "stop");
    e.usage.reasoning_tokens = 2;
    b.add_event(0, e);
    EXPECT_EQ(Json::parse(b.body())["usage"]["reasoning_tokens"], 2);
    ResponseBuilder g(generate(R"({"text": "x"})").request);
    g.add_event(0, e);
    EXPECT_EQ(Json::parse(g.body())["meta_info"]["reasoning_tokens"], 2);
}

// return_hidden_states: /generate's meta_info keeps every entry (the prompt's as rows), the
// OpenAI routes the last output token's state; "last" keeps one; other values are refused.
TEST(ResponseBuilderTest, HiddenStates) {
    EXPECT_EQ(generate(R"({"text": "x", "return_hidden_states": true})")
                  .request.requests[0].params.return_hidden_states,
              HiddenStatesMode::kFull);
    EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "return_hidden_states": "last"})")
                  .request.requests[0].params.return_hidden_states,
              HiddenStatesMode::kLast);
    EXPECT_EQ(completion(R"({"prompt": "x", "return_hidden_states": false})")
                  .request.requests[0].params.return_hidden_states,
              HiddenStatesMode::kNone);
    EXPECT_NE(expect_error(generate(R"({"text": "x", "return_hidden_states": "full"})"), "return_hidden_states")
                  .find("must be a boolean or the string literal 'last'"),
              std::string::npos);

    const auto with_states = [](GenerationEvent e, std::vector<float> values, std::int64_t rows, bool prompt) {
        e.hidden_states.push_back({std::move(values), rows, prompt});
        return e;
    };
    const std::vector<GenerationEvent> events = {with_states(event("a", {1}, 1), {1, 2, 3, 4}, 2, true),
                                                 with_states(event("b", {2}, 2), {5, 6}, 1, false),
                                                 with_states(event("c", {3}, 3, "length"), {7, 8}, 1, false)};
    ResponseBuilder g(generate(R"({"text": "x", "return_hidden_states": true})").request);
    for (const auto& e : events) g.add_event(0, e);
    EXPECT_EQ(Json::parse(g.body())["meta_info"]["hidden_states"], Json::parse("[[[1, 2], [3, 4]], [5, 6], [7, 8]]"));
    ResponseBuilder plain(generate(R"({"text": "x"})").request);
    plain.add_event(0, event("a", {1}, 1, "length"));
    EXPECT_FALSE(Json::parse(plain.body())["meta_info"].contains("hidden_states"));

    ResponseBuilder c(completion(R"({"prompt": "x", "return_hidden_states": true})").request);
    for (const auto& e : events) c.add_event(0, e);
    EXPECT_EQ(Json::parse(c.body())["choices"][0]["hidden_states"], Json::parse("[7, 8]"));
    ResponseBuilder one(completion(R"({"prompt": "x", "return_hidden_states": true})").request);
    one.add_event(0, with_states(event("a", {1}, 1, "stop"), {1, 2}, 1, true));
    EXPECT_EQ(Json::parse(one.body())["choices"][0]["hidden_states"], Json::array()) << "only the prompt's state";

    ResponseBuilder last(chat(R"({"messages": [{"role": "user", "content": "x"}], "return_hidden_states": "last",
                                  "stream": true})").request);
    std::string sse;
    for (const auto& e : events) sse += last.add_event(0, e);
    const std::size_t finish = sse.find(R"("finish_reason":"length")");
    const std::size_t states = sse.find(R"("hidden_states":[[7.0,8.0]])");
    ASSERT_NE(finish, std::string::npos) << sse;
    ASSERT_NE(states, std::string::npos) << sse;
    EXPECT_LT(finish, states) << "the states follow the finishing chunk";
    EXPECT_EQ(sse.find("[1.0,2.0]"), std::string::npos) << "\"last\" keeps only the latest";
}

// return_routed_experts: base64 of the int32 ids in /generate's meta_info, in the OpenAI
// body's sglext (first choice), and streamed as a chunk of its own with no choices.
TEST(ResponseBuilderTest, RoutedExperts) {
    const auto parsed = generate(R"({"text": "x", "return_routed_experts": true, "routed_experts_start_len": 2})");
    EXPECT_TRUE(parsed.request.requests[0].params.return_routed_experts);
    EXPECT_EQ(parsed.request.requests[0].params.routed_experts_start_len, 2);
    expect_error(generate(R"({"text": "x", "routed_experts_start_len": -1})"), "routed_experts_start_len");
    GenerationEvent done = event("a", {1}, 1, "length");
    done.routed_experts = std::vector<std::int32_t>{1, 256};
    ResponseBuilder g(parsed.request);
    g.add_event(0, done);
    EXPECT_EQ(Json::parse(g.body())["meta_info"]["routed_experts"], "AQAAAAABAAA=");
    ResponseBuilder c(completion(R"({"prompt": "x", "return_routed_experts": true})").request);
    c.add_event(0, done);
    EXPECT_EQ(Json::parse(c.body())["sglext"]["routed_experts"], "AQAAAAABAAA=");
    ResponseBuilder plain(completion(R"({"prompt": "x"})").request);
    plain.add_event(0, event("a", {1}, 1, "length"));
    EXPECT_FALSE(Json::parse(plain.body()).contains("sglext"));
    ResponseBuilder s(chat(R"({"messages": [{"role": "user", "content": "x"}], "stream": true})").request);
    const std::string sse = s.add_event(0, done);
    EXPECT_NE(sse.find(R"("choices":[],"sglext":{"routed_experts":"AQAAAAABAAA="})"), std::string::npos) << sse;
}

TEST(ResponseBuilderTest, ReasoningContentWholeAndStreamed) {
    const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
    Json j = chat_body(reasoning_chat("{" + messages + "}"), {"<think>\nSum", " it.</think>", "\n\n4"});
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "Sum it.");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "4");
    // separate_reasoning false: the text as generated; no parser: the same.
    j = chat_body(reasoning_chat("{" + messages + R"(, "separate_reasoning": false})"), {"<think>a</think>b"});
    EXPECT_EQ(j["choices"][0]["message"]["content"], "<think>a</think>b");
    EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
    j = chat_body(chat("{" + messages + "}"), {"<think>a</think>b"});
    EXPECT_EQ(j["choices"][0]["message"]["content"], "<think>a</think>b");
    // The output starts inside the reasoning when the request turns thinking on, or the
    // template opens the block; not otherwise.
    const std::vector<std::string> opened = {"a", "</think>b"};
    j = chat_body(reasoning_chat("{" + messages + R"(, "chat_template_kwargs": {"enable_thinking": true}})"), opened);
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "a");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "b");
    j = chat_body(reasoning_chat("{" + messages + "}", /*template_opens=*/true), opened);
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "a");
    j = chat_body(reasoning_chat("{" + messages + "}"), opened);
    EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
    EXPECT_EQ(j["choices"][0]["message"]["content"], "a</think>b");

    auto o = reasoning_chat("{" + messages + R"(, "stream": true})");
    ResponseBuilder b(o.request);
    std::string out;
    const std::vector<std::string> pieces = {"<th", "ink>Sum", " it.</th", "ink>4", ""};
    for (std::size_t i = 0; i < pieces.size(); ++i)
        out += b.add_event(0, event(pieces[i], {1}, static_cast<std::int64_t>(i + 1),
                                    i + 1 == pieces.size() ? std::optional<std::string>("stop") : std::nullopt));
    std::string reasoning, content;
    for (const std::string& payload : sse_payloads(out)) {
        if (payload == "[DONE]") continue;
        const Json delta = Json::parse(payload)["choices"][0]["delta"];
        EXPECT_FALSE(delta.contains("reasoning_content") && delta.contains("content") &&
                     !delta["content"].get<std::string>().empty())
            << "one kind per chunk: " << payload;
        if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
        if (delta.contains("content")) content += delta["content"].get<std::string>();
    }
    EXPECT_EQ(reasoning, "Sum it.");
    EXPECT_EQ(content, "4");
}

// --tool-call-parser kimi_k2: a call's id is functions.NAME:N, N counting the calls of the
// conversation's earlier assistant messages first (serving_chat.py _process_tool_call_id).
TEST(ResponseBuilderTest, KimiK2CallIdsCountTheConversationsCalls) {
    ProtocolOptions o = options();
    o.tool_calls = tool_call_format("kimi_k2").value();
    const ParseOutcome parsed = parse_request(ApiKind::kChatCompletion, R"({"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "functions.add:0", "type": "function",
            "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "content": "3", "tool_call_id": "functions.add:0"}],
        "tools": [{"type": "function", "function": {"name": "add"}}]})", o, "chatcmpl-1");
    ASSERT_TRUE(parsed.ok());
    const std::string call =
        "<|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{\"a\": 2}<|tool_call_end|>";
    const Json j = chat_body(parsed, {"<|tool_calls_section_begin|>" + call + call + "<|tool_calls_section_end|>"});
    const Json& calls = j["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0]["id"], "functions.add:1");
    EXPECT_EQ(calls[1]["id"], "functions.add:2");
}

// tool_choice "required": the output's JSON list becomes tool_calls (arguments from
// "parameters"), and "stop" becomes "tool_calls"; no --tool-call-parser needed.
TEST(ResponseBuilderTest, ForcedToolCallsAreTheOutputsList) {
    const auto parsed = parse_request(ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}],
        "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "add"}},
                                             {"type": "function", "function": {"name": "neg"}}]})",
                                      options(), "chatcmpl-1");
    ASSERT_TRUE(parsed.ok());
    const Json j = chat_body(parsed, {R"([{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "neg", )"
                                      R"("parameters": {"x": 5}}])"});
    const Json& message = j["choices"][0]["message"];
    ASSERT_EQ(message["tool_calls"].size(), 2u);
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "add");
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"a":1,"b":2})");
    EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "neg");
    EXPECT_EQ(message["tool_calls"][1]["index"], 1);
    EXPECT_TRUE(message["content"].is_null() || message["content"] == "") << message;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
}

// function_call_parser.py get_structure_constraint: tool_choice "auto" with a strict tool holds
// the calls to a structural tag built from the parser's call format; a tool that is not strict
// gets any JSON; the request's own constraint wins; the pythonic format has no structure.
TEST(OpenAiProtocolTest, StrictToolsHoldAutoCallsToAStructuralTag) {
    ProtocolOptions o = options();
    o.tool_calls = tool_call_format("qwen25").value();
    const std::string tools = R"("tools": [
        {"type": "function", "function": {"name": "weather", "strict": true, "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "time", "parameters": {"type": "object"}}}])";
    const auto constraint = [&](const std::string& extra, const std::string& tool_list) {
        const ParseOutcome p = parse_request(
            ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}], )" + tool_list + extra + "}",
            o, "c");
        EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error->message);
        return p.ok() ? p.request.requests[0].params.constraint : std::nullopt;
    };
    const auto tag = constraint("", tools);
    ASSERT_TRUE(tag.has_value());
    ASSERT_EQ(tag->kind, OutputConstraint::Kind::kStructuralTag);
    const Json spec = Json::parse(tag->text);
    EXPECT_EQ(spec["triggers"], Json::array({"<tool_call>"}));
    ASSERT_EQ(spec["structures"].size(), 2u);
    EXPECT_EQ(spec["structures"][0]["begin"], "<tool_call>\n{\"name\":\"weather\", \"arguments\":");
    EXPECT_EQ(spec["structures"][0]["end"], "}\n</tool_call>");
    EXPECT_EQ(spec["structures"][0]["schema"]["required"], Json::array({"city"}));
    EXPECT_EQ(spec["structures"][1]["schema"], Json::object()) << "not strict: any JSON";
    // The tag compiles, and holds a call to the schema while the text around it is free.
    auto nfa = grammar::structural_tag_nfa(tag->text);
    ASSERT_TRUE(nfa.ok()) << nfa.status().message();
    grammar::LazyDfa dfa(std::move(nfa.value()));
    const auto matches = [&](std::string_view text) {
        const std::int32_t end = dfa.walk(dfa.start(), text);
        return end != grammar::LazyDfa::kDead && dfa.accepting(end);
    };
    EXPECT_TRUE(matches("Let me look.\n<tool_call>\n{\"name\":\"weather\", \"arguments\":{\"city\": \"Paris\"}}\n"
                        "</tool_call>"));
    EXPECT_FALSE(matches("<tool_call>\n{\"name\":\"weather\", \"arguments\":{\"town\": 1}}\n</tool_call>"));
    EXPECT_TRUE(matches("<tool_call>\n{\"name\":\"time\", \"arguments\":{\"zone\": 1}}\n</tool_call>"));

    const std::string loose = R"("tools": [{"type": "function", "function": {"name": "time"}}])";
    EXPECT_FALSE(constraint("", loose).has_value()) << "no strict tool: no constraint";
    EXPECT_FALSE(constraint(R"(, "tool_choice": "none")", tools).has_value());
    const auto own = constraint(R"(, "regex": "a+")", tools);
    ASSERT_TRUE(own.has_value());
    EXPECT_EQ(own->kind, OutputConstraint::Kind::kRegex) << "the request's own constraint wins";
    const auto forced = constraint(R"(, "tool_choice": "required")", tools);
    ASSERT_TRUE(forced.has_value());
    EXPECT_EQ(forced->kind, OutputConstraint::Kind::kJsonSchema) << "required stays a JSON list of calls";
    o.tool_calls = tool_call_format("pythonic").value();
    EXPECT_FALSE(constraint("", tools).has_value()) << "pythonic calls are not JSON: no structure";
    o.tool_calls = tool_call_format("deepseekv31").value();
    const auto deepseek = constraint("", tools);
    ASSERT_TRUE(deepseek.has_value());
    EXPECT_EQ(Json::parse(deepseek->text)["structures"][0]["begin"],
              "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>weather"
              "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>");
}

// --tool-call-parser qwen25 with a tool offered: calls become tool_calls, "stop" becomes
// "tool_calls"; without tools in the request nothing is parsed.
TEST(ResponseBuilderTest, ToolCallsWholeAndStreamed) {
    ProtocolOptions o = options();
    o.tool_calls = tool_call_format("qwen25").value();
    const std::string tools = R"("tools": [{"type": "function", "function": {"name": "add"}}])";
    const std::string text = "Adding.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    const auto request = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion,
                             R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}", o, "chatcmpl-1");
    };
    Json j = chat_body(request(tools), {text});
    const Json& message = j["choices"][0]["message"];
    EXPECT_EQ(message["content"], "Adding.");
    ASSERT_EQ(message["tool_calls"].size(), 1u);
    EXPECT_EQ(message["tool_calls"][0]["type"], "function");
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "add");
    EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
    EXPECT_EQ(message["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    j = chat_body(request(R"("stream": false)"), {text});  // no tools: plain content
    EXPECT_EQ(j["choices"][0]["message"]["content"], text);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    j = chat_body(request(tools + R"(, "tool_choice": "none")"), {text});
    EXPECT_TRUE(j["choices"][0]["message"]["tool_calls"].is_null());

    ResponseBuilder b(request(tools + R"(, "stream": true)").request);
    std::string out;
    for (std::size_t i = 0; i < text.size(); i += 9)
        out += b.add_event(0, event(text.substr(i, 9), {1}, 1));
    out += b.add_event(0, event("", {2}, 2, "stop"));
    // The call opens with its id, type and name, then its arguments come in pieces that carry
    // only the index (as OpenAI streams them); joined, they are the whole call's.
    std::string content, finish, arguments;
    int opened = 0, pieces = 0;
    for (const std::string& payload : sse_payloads(out)) {
        if (payload == "[DONE]") continue;
        const Json choice = Json::parse(payload)["choices"][0];
        if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
        if (choice["delta"].contains("tool_calls")) {
            const Json& call = choice["delta"]["tool_calls"][0];
            EXPECT_EQ(call["index"], 0);
            if (call.contains("id")) {
                ++opened;
                EXPECT_EQ(call["function"]["name"], "add");
                EXPECT_EQ(call["type"], "function");
            } else {
                ++pieces;
                EXPECT_FALSE(call["function"].contains("name"));
            }
            arguments += call["function"]["arguments"].get<std::string>();
        }
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
    EXPECT_EQ(content, "Adding.\n");
    EXPECT_EQ(opened, 1);
    EXPECT_GE(pieces, 2) << "the arguments stream as they are written";
    EXPECT_EQ(arguments, R"({"a":1})");
    EXPECT_EQ(finish, "tool_calls");
}

// --default-chat-template-kwargs: every chat request starts from them; its own win. With
// --reasoning-parser qwen3 the default enable_thinking forces reasoning too.
TEST(OpenAiProtocolTest, DefaultChatTemplateKwargs) {
    ProtocolOptions o = options();
    o.default_chat_template_kwargs = R"({"enable_thinking": true, "style": "terse"})";
    o.reasoning = reasoning_format("qwen3").value();
    const auto parse = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}",
                             o, "chatcmpl-1");
    };
    ParseOutcome plain = parse("");
    ASSERT_TRUE(plain.ok());
    Json chat = Json::parse(*plain.request.requests[0].input.chat_json);
    EXPECT_EQ(chat["enable_thinking"], true);
    EXPECT_EQ(chat["style"], "terse");
    EXPECT_TRUE(plain.request.force_reasoning);
    ParseOutcome own = parse(R"(, "chat_template_kwargs": {"enable_thinking": false})");
    ASSERT_TRUE(own.ok());
    chat = Json::parse(*own.request.requests[0].input.chat_json);
    EXPECT_EQ(chat["enable_thinking"], false);
    EXPECT_EQ(chat["style"], "terse");
    EXPECT_FALSE(own.request.force_reasoning);
}

// --stream-response-default-include-usage: streamed responses carry usage unless the request
// says no; non-streamed ones are unaffected.
TEST(OpenAiProtocolTest, StreamUsageByDefault) {
    ProtocolOptions o = options();
    o.stream_include_usage = true;
    const auto parse = [&](const std::string& extra) {
        return parse_request(ApiKind::kCompletion, R"({"prompt": "x")" + extra + "}", o, "cmpl-1");
    };
    EXPECT_TRUE(parse(R"(, "stream": true)").request.include_usage);
    EXPECT_FALSE(parse(R"(, "stream": true, "stream_options": {"include_usage": false})").request.include_usage);
    EXPECT_FALSE(parse("").request.include_usage);
    EXPECT_FALSE(completion(R"({"prompt": "x", "stream": true})").request.include_usage);  // flag off
}

// --sampling-defaults model: chat fields a request leaves out take the model's values; its
// own values win; completions keep OpenAI's defaults.
TEST(OpenAiProtocolTest, ModelSamplingDefaultsForChat) {
    ProtocolOptions o = options();
    o.chat_temperature = 0.6f;
    o.chat_top_p = 0.95f;
    o.chat_top_k = 20;
    const auto chat_params = [&](const std::string& extra) {
        return parse_request(ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}",
                             o, "chatcmpl-1")
            .request.requests[0]
            .params;
    };
    GenerationParams p = chat_params("");
    EXPECT_FLOAT_EQ(p.temperature, 0.6f);
    EXPECT_FLOAT_EQ(p.top_p, 0.95f);
    EXPECT_EQ(p.top_k, 20);
    EXPECT_FLOAT_EQ(p.min_p, 0.0f);
    p = chat_params(R"(, "temperature": 0, "top_k": 5)");
    EXPECT_FLOAT_EQ(p.temperature, 0.0f);
    EXPECT_EQ(p.top_k, 5);
    EXPECT_FLOAT_EQ(p.top_p, 0.95f);
    p = parse_request(ApiKind::kCompletion, R"({"prompt": "x"})", o, "cmpl-1").request.requests[0].params;
    EXPECT_FLOAT_EQ(p.temperature, 1.0f);
    EXPECT_EQ(p.top_k, -1);
}

// --preferred-sampling-params: /generate starts from them and a request's own keys win
// ({**preferred, **request}); the OpenAI routes take only stream_interval.
TEST(OpenAiProtocolTest, PreferredSamplingParams) {
    ProtocolOptions o = options();
    auto preferred = parse_preferred_sampling_params(
        R"({"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 7, "n": 2, "stream_interval": 4,
            "logit_bias": {"5": 1.5}, "stop": ["END"]})", o);
    ASSERT_TRUE(preferred.ok()) << preferred.status().message();
    o.preferred_sampling = *preferred;
    const auto native = [&](const std::string& sampling) {
        return parse_request(ApiKind::kGenerate, R"({"text": "x")" + sampling + "}", o, "").request;
    };
    ParsedRequest r = native("");
    ASSERT_EQ(r.requests.size(), 2u);
    GenerationParams p = r.requests[0].params;
    EXPECT_FLOAT_EQ(p.temperature, 0.6f);
    EXPECT_FLOAT_EQ(p.top_p, 0.9f);
    EXPECT_EQ(p.max_new_tokens, 7);
    EXPECT_EQ(p.stream_interval, 4);
    EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
    ASSERT_EQ(p.logit_bias.size(), 1u);

    r = native(R"(, "sampling_params": {"temperature": 0, "n": 1, "logit_bias": {"9": -2}, "stop": []})");
    ASSERT_EQ(r.requests.size(), 1u);
    p = r.requests[0].params;
    EXPECT_FLOAT_EQ(p.temperature, 0.0f);
    EXPECT_FLOAT_EQ(p.top_p, 0.9f);  // not in the request: the preferred value
    EXPECT_EQ(p.max_new_tokens, 7);
    EXPECT_TRUE(p.stop.empty());
    ASSERT_EQ(p.logit_bias.size(), 1u);  // the request's map replaces the preferred one
    EXPECT_EQ(p.logit_bias[0].first, 9);

    p = parse_request(ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}]})", o, "c")
            .request.requests[0]
            .params;
    EXPECT_FLOAT_EQ(p.temperature, 1.0f);
    EXPECT_FLOAT_EQ(p.top_p, 1.0f);
    EXPECT_EQ(p.stream_interval, 4);
    EXPECT_TRUE(p.logit_bias.empty());

    const auto refused = [&](const std::string& json) {
        auto got = parse_preferred_sampling_params(json, options());
        EXPECT_FALSE(got.ok()) << json;
        return got.ok() ? std::string() : got.status().message();
    };
    EXPECT_NE(refused(R"({"repetition_penalty": 1.1})")
                  .find("'repetition_penalty' is not a sampling parameter tessera applies; it takes max_new_tokens"),
              std::string::npos);
    EXPECT_NE(refused(R"({"top_p": 2})").find("--preferred-sampling-params: 'top_p'"), std::string::npos);
    EXPECT_NE(refused("[1]").find("give a JSON object of sampling parameters"), std::string::npos);
    EXPECT_NE(refused("{bad").find("give a JSON object"), std::string::npos);
}

TEST(ResponseBuilderTest, CompletionLogprobs) {
    auto o = completion(R"({"prompt": "x", "logprobs": 1})");
    ResponseBuilder b(o.request);
    auto e = event("ab", {7}, 1, "stop");
    e.logprobs.push_back(TokenLogprob{.token = 7, .text = "ab", .logprob = -0.5f, .top = {{"ab", -0.5f}}});
    b.add_event(0, e);
    const Json j = Json::parse(b.body());
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], "ab");
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"][0], "ab");
    EXPECT_FLOAT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][0].get<float>(), -0.5f);
    EXPECT_FLOAT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0]["ab"].get<float>(), -0.5f);
    EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"][0], 0);
}

// /generate's logprob_start_len and return_text_in_logprobs; a completion's echo with logprobs
// asks for the prompt's from position 0 (serving_completions.py).
TEST(OpenAiProtocolTest, PromptLogprobFields) {
    auto o = generate(R"({"text": "hi", "return_logprob": true, "logprob_start_len": 3,
        "return_text_in_logprobs": true})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    EXPECT_EQ(o.request.requests[0].params.logprob_start_len, 3);
    EXPECT_TRUE(o.request.return_text_in_logprobs);
    auto d = generate(R"({"text": "hi", "return_logprob": true})");
    EXPECT_EQ(d.request.requests[0].params.logprob_start_len, -1);
    EXPECT_FALSE(d.request.return_text_in_logprobs);
    expect_error(generate(R"({"text": "hi", "logprob_start_len": -2})"), "logprob_start_len");
    expect_error(generate(R"({"text": "hi", "logprob_start_len": [0]})"), "logprob_start_len");
    auto ids = generate(R"({"text": "hi", "return_logprob": true, "token_ids_logprob": [1, 2]})");
    ASSERT_TRUE(ids.ok()) << ids.error->message;
    EXPECT_EQ(ids.request.requests[0].params.token_ids_logprob, (std::vector<std::int32_t>{1, 2}));
    auto no_ids = generate(R"({"text": "hi", "token_ids_logprob": []})");
    EXPECT_TRUE(no_ids.request.requests[0].params.token_ids_logprob.empty());
    expect_error(generate(R"({"text": "hi", "token_ids_logprob": [-1]})"), "token_ids_logprob");
    std::string many = "[0";
    for (int i = 1; i <= 1024; ++i) many += ", " + std::to_string(i);
    expect_error(generate(R"({"text": "hi", "token_ids_logprob": )" + many + "]}"), "token_ids_logprob");
    auto echo = completion(R"({"prompt": "x", "echo": true, "logprobs": 2})");
    ASSERT_TRUE(echo.ok()) << echo.error->message;
    EXPECT_TRUE(echo.request.requests[0].params.echo);
    EXPECT_EQ(echo.request.requests[0].params.logprob_start_len, 0);
    auto plain_echo = completion(R"({"prompt": "x", "echo": true})");
    EXPECT_TRUE(plain_echo.request.requests[0].params.echo);
    EXPECT_EQ(plain_echo.request.requests[0].params.logprob_start_len, -1);
    EXPECT_EQ(completion(R"({"prompt": "x", "logprobs": 1})").request.requests[0].params.logprob_start_len, -1);
}

// A batch's log-probability fields: one value for all inputs, or a list of one per input
// (io_struct.py _normalize_logprob_params), which n > 1 refuses.
TEST(OpenAiProtocolTest, PerInputLogprobFieldsOfABatch) {
    auto o = generate(R"({"text": ["a", "b"], "return_logprob": [true, false], "logprob_start_len": [0, -1],
        "top_logprobs_num": [2, 0], "token_ids_logprob": [[1], [2, 3]]})");
    ASSERT_TRUE(o.ok()) << o.error->message;
    ASSERT_EQ(o.request.requests.size(), 2u);
    const GenerationParams& a = o.request.requests[0].params;
    const GenerationParams& b = o.request.requests[1].params;
    EXPECT_TRUE(a.logprobs);
    EXPECT_FALSE(b.logprobs);
    EXPECT_EQ(a.logprob_start_len, 0);
    EXPECT_EQ(b.logprob_start_len, -1);
    EXPECT_EQ(a.top_logprobs, 2);
    EXPECT_EQ(b.top_logprobs, 0);
    EXPECT_EQ(a.token_ids_logprob, (std::vector<std::int32_t>{1}));
    EXPECT_EQ(b.token_ids_logprob, (std::vector<std::int32_t>{2, 3}));
    // One value (a flat id list) for every input.
    auto all = generate(R"({"text": ["a", "b"], "return_logprob": true, "token_ids_logprob": [4, 5]})");
    ASSERT_TRUE(all.ok()) << all.error->message;
    for (const GenerationRequest& r : all.request.requests) {
        EXPECT_TRUE(r.params.logprobs);
        EXPECT_EQ(r.params.token_ids_logprob, (std::vector<std::int32_t>{4, 5}));
    }
    expect_error(generate(R"({"text": ["a", "b"], "return_logprob": [true]})"), "return_logprob");
    expect_error(generate(R"({"text": ["a", "b"], "logprob_start_len": [0, "x"]})"), "logprob_start_len[1]");
    const std::string with_n = expect_error(generate(R"({"text": ["a", "b"], "return_logprob": [true, true],
        "sampling_params": {"n": 2}})"), "return_logprob");
    EXPECT_NE(with_n.find("Cannot use list return_logprob with parallel_sample_num > 1"), std::string::npos);
    expect_error(generate(R"({"text": "a", "return_logprob": [true]})"), "return_logprob");
}

// The prompt's entries as the backend gives them: one per token from logprob_start_len, the first
// without a value.
std::vector<TokenLogprob> prompt_entries() {
    return {TokenLogprob{.token = 3, .text = "Hi", .logprob = NAN},
            TokenLogprob{.token = 4, .text = " there", .logprob = -2.5f, .top = {{" you", -0.5f}}, .top_ids = {8}}};
}

TEST(ResponseBuilderTest, CompletionEchoPutsThePromptFirst) {
    auto o = completion(R"({"prompt": "Hi there", "echo": true, "logprobs": 1})");
    ResponseBuilder b(o.request);
    auto e = event("!", {7}, 1, "length");
    e.prompt_text = "Hi there";
    e.input_logprobs = prompt_entries();
    e.logprobs.push_back(
        TokenLogprob{.token = 7, .text = "!", .logprob = -0.75f, .top = {{"!", -0.75f}}, .top_ids = {7}});
    b.add_event(0, e);
    const Json j = Json::parse(b.body());
    EXPECT_EQ(j["choices"][0]["text"], "Hi there!");
    const Json& lp = j["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"], Json::array({"Hi", " there", "!"}));
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -2.5f);
    EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -0.75f);
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(lp["top_logprobs"][1][" you"].get<float>(), -0.5f);
    EXPECT_EQ(lp["text_offset"], Json::array({0, 2, 8}));

    auto so = completion(R"({"prompt": "Hi there", "echo": true, "stream": true})");
    ResponseBuilder sb(so.request);
    auto first = event("", {}, 0);
    first.prompt_text = "Hi there";
    std::string out = sb.add_event(0, first);
    out += sb.add_event(0, event("!", {7}, 1, "stop"));
    auto payloads = sse_payloads(out);
    ASSERT_GE(payloads.size(), 2u) << out;
    EXPECT_EQ(Json::parse(payloads[0])["choices"][0]["text"], "Hi there");
    EXPECT_EQ(Json::parse(payloads[1])["choices"][0]["text"], "!");
}

// max_new_tokens 0 with top_logprobs_num and token_ids_logprob: no output token, but one row
// of the best ones and of the chosen ones at the prompt's end, as SGLang answers.
TEST(ResponseBuilderTest, PrefillOnlyAnswersOneRowOfTheNextTokenDistribution) {
    for (const bool stream : {false, true}) {
        auto o = generate(std::string(R"({"text": "Hi", "return_logprob": true, "top_logprobs_num": 2,
            "token_ids_logprob": [9], "sampling_params": {"max_new_tokens": 0}, "stream": )") +
                          (stream ? "true}" : "false}"));
        ResponseBuilder b(o.request);
        auto e = event("", {}, 0, "length");
        e.unsampled_logprobs = TokenLogprob{.token = 7, .text = "!", .logprob = -0.25f,
                                            .top = {{"!", -0.25f}, {"?", -1.5f}}, .top_ids = {7, 8},
                                            .chosen = {{"a", -3.0f}}, .chosen_ids = {9}};
        const std::string out = b.add_event(0, e);
        const Json meta = stream ? Json::parse(sse_payloads(out).at(0))["meta_info"] : Json::parse(b.body())["meta_info"];
        EXPECT_EQ(meta["output_token_logprobs"], Json::array()) << stream;
        EXPECT_EQ(meta["output_top_logprobs"], Json::parse(R"([[[-0.25, 7, null], [-1.5, 8, null]]])")) << stream;
        EXPECT_EQ(meta["output_token_ids_logprobs"], Json::parse(R"([[[-3.0, 9, null]]])")) << stream;
    }
}

TEST(ResponseBuilderTest, NativeGeneratePromptLogprobs) {
    auto o = generate(R"({"text": "Hi there", "return_logprob": true, "logprob_start_len": 0,
        "top_logprobs_num": 1})");
    ResponseBuilder b(o.request);
    auto e = event("!", {7}, 1, "length");
    e.input_logprobs = prompt_entries();
    e.logprobs.push_back(
        TokenLogprob{.token = 7, .text = "!", .logprob = -0.75f, .top = {{"!", -0.75f}}, .top_ids = {7}});
    b.add_event(0, e);
    const Json meta = Json::parse(b.body())["meta_info"];
    EXPECT_EQ(meta["input_token_logprobs"], Json::parse(R"([[null, 3, null], [-2.5, 4, null]])"));
    EXPECT_EQ(meta["input_top_logprobs"], Json::parse(R"([null, [[-0.5, 8, null]]])"));
    EXPECT_EQ(meta["output_token_logprobs"], Json::parse(R"([[-0.75, 7, null]])"));
    EXPECT_EQ(meta["output_top_logprobs"], Json::parse(R"([[[-0.75, 7, null]]])"));
    // With text, and without top_logprobs_num no top lists.
    auto t = generate(R"({"text": "x", "return_logprob": true, "return_text_in_logprobs": true})");
    ResponseBuilder tb(t.request);
    auto te = event("!", {7}, 1, "length");
    te.logprobs.push_back(TokenLogprob{.token = 7, .text = "!", .logprob = -0.75f});
    tb.add_event(0, te);
    const Json tmeta = Json::parse(tb.body())["meta_info"];
    EXPECT_EQ(tmeta["output_token_logprobs"], Json::parse(R"([[-0.75, 7, "!"]])"));
    EXPECT_EQ(tmeta["input_token_logprobs"], Json::array());
    EXPECT_FALSE(tmeta.contains("output_top_logprobs"));
    EXPECT_FALSE(tmeta.contains("input_top_logprobs"));
    EXPECT_FALSE(tmeta.contains("output_token_ids_logprobs"));

    // A batch whose second input asked for none: its item has no log-probability fields.
    auto mixed = generate(R"({"text": ["x", "y"], "return_logprob": [true, false]})");
    ResponseBuilder mb(mixed.request);
    for (std::size_t i = 0; i < 2; ++i) {
        auto me = event("!", {7}, 1, "length");
        me.logprobs.push_back(TokenLogprob{.token = 7, .text = "!", .logprob = -0.75f});
        mb.add_event(i, me);
    }
    const Json items = Json::parse(mb.body());
    EXPECT_EQ(items[0]["meta_info"]["output_token_logprobs"], Json::parse(R"([[-0.75, 7, null]])"));
    EXPECT_FALSE(items[1]["meta_info"].contains("output_token_logprobs"));

    // token_ids_logprob: each entry's values of the asked ids, the prompt's first null.
    auto c = generate(R"({"text": "x", "return_logprob": true, "logprob_start_len": 0, "token_ids_logprob": [8]})");
    ResponseBuilder cb(c.request);
    auto ce = event("!", {7}, 1, "length");
    ce.input_logprobs = prompt_entries();
    (*ce.input_logprobs)[1].chosen = {{" you", -0.5f}};
    (*ce.input_logprobs)[1].chosen_ids = {8};
    ce.logprobs.push_back(TokenLogprob{.token = 7, .text = "!", .logprob = -0.75f, .chosen = {{" you", -3.0f}},
                                       .chosen_ids = {8}});
    cb.add_event(0, ce);
    const Json cmeta = Json::parse(cb.body())["meta_info"];
    EXPECT_EQ(cmeta["input_token_ids_logprobs"], Json::parse(R"([null, [[-0.5, 8, null]]])"));
    EXPECT_EQ(cmeta["output_token_ids_logprobs"], Json::parse(R"([[[-3.0, 8, null]]])"));
}

TEST(ResponseBuilderTest, ChatLogprobs) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 1})");
    ResponseBuilder b(o.request);
    auto e = event("A", {65}, 1, "stop");
    e.logprobs.push_back(TokenLogprob{.token = 65, .text = "A", .logprob = -1.0f, .top = {{"A", -1.0f}}});
    b.add_event(0, e);
    const Json j = Json::parse(b.body());
    const Json& lp = j["choices"][0]["logprobs"]["content"][0];
    EXPECT_EQ(lp["token"], "A");
    EXPECT_EQ(lp["bytes"], Json::array({65}));
    EXPECT_EQ(lp["top_logprobs"][0]["token"], "A");
}

TEST(ResponseBuilderTest, NativeGenerateBodyAndStream) {
    auto o = generate(R"({"text": "x", "rid": "r9"})");
    ResponseBuilder b(o.request);
    b.add_event(0, event("a", {1}, 1));
    b.add_event(0, event("b", {2}, 2, "length"));
    const Json j = Json::parse(b.body());
    EXPECT_EQ(j["text"], "ab");
    EXPECT_EQ(j["output_ids"], Json::array({1, 2}));
    EXPECT_EQ(j["meta_info"]["id"], "r9");
    EXPECT_EQ(j["meta_info"]["finish_reason"]["type"], "length");
    EXPECT_EQ(j["meta_info"]["prompt_tokens"], 5);
    EXPECT_EQ(j["meta_info"]["completion_tokens"], 2);
    EXPECT_EQ(j["meta_info"]["cached_tokens"], 2);
    EXPECT_GE(j["meta_info"]["e2e_latency"].get<double>(), 0.0);

    auto s = generate(R"({"text": "x", "rid": "r9", "stream": true})");
    ResponseBuilder sb(s.request);
    std::string out = sb.add_event(0, event("a", {1}, 1));
    auto fin = event("b", {2}, 2, "stop");
    fin.matched_stop = "b";
    out += sb.add_event(0, fin);
    auto payloads = sse_payloads(out);
    ASSERT_EQ(payloads.size(), 3u);
    EXPECT_EQ(Json::parse(payloads[0])["text"], "a");
    const Json last = Json::parse(payloads[1]);
    EXPECT_EQ(last["text"], "ab");  // cumulative
    EXPECT_EQ(last["output_ids"], Json::array({1, 2}));
    EXPECT_EQ(last["meta_info"]["finish_reason"]["matched"], "b");
    EXPECT_EQ(payloads[2], "[DONE]");
}

// --completion-template: a completion's suffix makes SGLang's fill-in-the-middle prompt; without
// a template a suffix is refused, naming the flag.
TEST(OpenAiProtocolTest, CompletionTemplateFillInTheMiddle) {
    ProtocolOptions o = options();
    const auto prompt = [&](const std::string& body) {
        ParseOutcome p = parse_request(ApiKind::kCompletion, body, o, "cmpl-1");
        return p.ok() ? p.request.requests[0].input.text.value_or("?") : "error: " + p.error->message;
    };
    EXPECT_NE(prompt(R"({"prompt": "def f(", "suffix": "return x"})").find("--completion-template"), std::string::npos);
    o.completion_template = completion_template("qwen_coder").value();
    EXPECT_EQ(prompt(R"({"prompt": "def f(", "suffix": "return x"})"),
              "<|fim_prefix|>def f(<|fim_suffix|>return x<|fim_middle|>");
    EXPECT_EQ(prompt(R"({"prompt": "def f("})"), "def f(");
    EXPECT_EQ(prompt(R"({"prompt": "def f(", "suffix": ""})"), "def f(");
    EXPECT_NE(prompt(R"({"prompt": [1, 2], "suffix": "x"})").find("needs a text prompt"), std::string::npos);
    o.completion_template = completion_template("deepseek_coder").value();
    const auto fim = [](const std::string& what) { return "<\xEF\xBD\x9C" "fim\xE2\x96\x81" + what + "\xEF\xBD\x9C>"; };
    EXPECT_EQ(prompt(R"({"prompt": "a", "suffix": "b"})"), fim("begin") + "a" + fim("hole") + "b" + fim("end"));
    EXPECT_EQ(completion_template("star_coder").value().fim_begin, "<fim_prefix>");
    EXPECT_NE(completion_template("codellama").status().message().find("is not a built-in template name"),
              std::string::npos);
    // A template file (SGLang's JSON: name, the three tokens, fim_position MIDDLE or END).
    auto file = completion_template_from_json(R"({"name": "mine", "fim_begin_token": "<B>", "fim_middle_token": "<M>",
        "fim_end_token": "<E>", "fim_position": "MIDDLE"})", "mine.json");
    ASSERT_TRUE(file.ok()) << file.status().message();
    o.completion_template = file.value();
    EXPECT_EQ(prompt(R"({"prompt": "a", "suffix": "b"})"), "<B>a<M>b<E>");
    const auto start = completion_template_from_json(R"({"name": "x", "fim_begin_token": "a", "fim_middle_token": "b",
        "fim_end_token": "c", "fim_position": "START"})", "x.json");
    EXPECT_NE(start.status().message().find("Unknown fim position: START"), std::string::npos);
    EXPECT_FALSE(completion_template_from_json(R"({"name": "x"})", "x.json").ok());
}

// --incremental-streaming-output: each /generate chunk carries what is new; the non-streamed
// body and the default stream stay cumulative.
TEST(ResponseBuilderTest, IncrementalStreamingOutput) {
    ProtocolOptions o = options();
    o.incremental_streaming_output = true;
    ParseOutcome streamed = parse_request(ApiKind::kGenerate, R"({"text": "x", "stream": true})", o, "");
    ResponseBuilder b(streamed.request);
    std::string out = b.add_event(0, event("ab", {1, 2}, 2));
    out += b.add_event(0, event("c", {3}, 3, "length"));
    const auto payloads = sse_payloads(out);
    ASSERT_EQ(payloads.size(), 3u);
    EXPECT_EQ(Json::parse(payloads[0])["text"], "ab");
    EXPECT_EQ(Json::parse(payloads[1])["text"], "c");
    EXPECT_EQ(Json::parse(payloads[1])["output_ids"], Json::array({3}));
    EXPECT_EQ(Json::parse(payloads[1])["meta_info"]["completion_tokens"], 3);

    ParseOutcome whole = parse_request(ApiKind::kGenerate, R"({"text": "x"})", o, "");
    ResponseBuilder w(whole.request);
    w.add_event(0, event("ab", {1, 2}, 2));
    w.add_event(0, event("c", {3}, 3, "length"));
    EXPECT_EQ(Json::parse(w.body())["text"], "abc");
}

// A streamed /generate's log-probabilities (tokenizer_manager.py add_logprob_to_meta_info): the
// prompt's in every chunk, the output's so far, or only the new ones with
// --incremental-streaming-output; output_token_logprobs_length counts them all.
TEST(ResponseBuilderTest, StreamedLogprobsAreCumulativeUnlessIncremental) {
    for (const bool incremental : {false, true}) {
        ProtocolOptions o = options();
        o.incremental_streaming_output = incremental;
        ParseOutcome p = parse_request(ApiKind::kGenerate, R"({"text": "x", "stream": true, "return_logprob": true,
            "logprob_start_len": 0})", o, "");
        ResponseBuilder b(p.request);
        auto first = event("a", {1}, 1);
        first.input_logprobs = prompt_entries();
        first.logprobs.push_back(TokenLogprob{.token = 1, .text = "a", .logprob = -1.0f});
        auto second = event("b", {2}, 2, "length");
        second.logprobs.push_back(TokenLogprob{.token = 2, .text = "b", .logprob = -2.0f});
        std::string out = b.add_event(0, first);
        out += b.add_event(0, second);
        const auto payloads = sse_payloads(out);
        ASSERT_EQ(payloads.size(), 3u);
        const Json last = Json::parse(payloads[1])["meta_info"];
        EXPECT_EQ(last["input_token_logprobs"], Json::parse(R"([[null, 3, null], [-2.5, 4, null]])")) << incremental;
        const Json both = Json::parse(R"([[-1.0, 1, null], [-2.0, 2, null]])");
        EXPECT_EQ(last["output_token_logprobs"], incremental ? Json::parse(R"([[-2.0, 2, null]])") : both)
            << incremental;
        EXPECT_EQ(last["output_token_logprobs_length"], 2);
    }
}

// --skip-tokenizer-init: only /generate with input_ids and no stop strings; the answer has
// output_ids and no text, whole and streamed.
TEST(OpenAiProtocolTest, SkipTokenizerInit) {
    ProtocolOptions o = options();
    o.skip_tokenizer_init = true;
    const auto parse = [&](ApiKind kind, const std::string& body) { return parse_request(kind, body, o, "id-1"); };
    EXPECT_NE(expect_error(parse(ApiKind::kGenerate, R"({"text": "x"})"), "text").find("--skip-tokenizer-init"),
              std::string::npos);
    EXPECT_NE(expect_error(parse(ApiKind::kGenerate, R"({"input_ids": [1], "sampling_params": {"stop": ["a"]}})"),
                           "sampling_params.stop")
                  .find("use stop_token_ids"),
              std::string::npos);
    EXPECT_NE(expect_error(parse(ApiKind::kChatCompletion, R"({"messages": [{"role": "user", "content": "x"}]})"), "")
                  .find("send input_ids to POST /generate"),
              std::string::npos);
    expect_error(parse(ApiKind::kCompletion, R"({"prompt": [1, 2]})"), "");

    ParseOutcome ok = parse(ApiKind::kGenerate, R"({"input_ids": [1, 2], "sampling_params": {"stop_token_ids": [3]}})");
    ASSERT_TRUE(ok.ok());
    ResponseBuilder b(ok.request);
    b.add_event(0, event("", {7}, 1));
    b.add_event(0, event("", {8}, 2, "length"));
    const Json j = Json::parse(b.body());
    EXPECT_FALSE(j.contains("text"));
    EXPECT_EQ(j["output_ids"], Json::array({7, 8}));

    ok = parse(ApiKind::kGenerate, R"({"input_ids": [1, 2], "stream": true})");
    ResponseBuilder sb(ok.request);
    const Json chunk = Json::parse(sse_payloads(sb.add_event(0, event("", {7}, 1))).at(0));
    EXPECT_FALSE(chunk.contains("text"));
    EXPECT_EQ(chunk["output_ids"], Json::array({7}));

    auto preferred = parse_preferred_sampling_params(R"({"stop": ["x"]})", o);
    ASSERT_FALSE(preferred.ok());
    EXPECT_NE(preferred.status().message().find("--skip-tokenizer-init"), std::string::npos);
}

TEST(ResponseBuilderTest, ErrorEvent) {
    auto o = chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 2})");
    ResponseBuilder b(o.request);
    GenerationEvent e;
    e.error = Status::InvalidArgument("prompt too long");
    b.add_event(0, e);
    b.add_event(1, event("x", {1}, 1, "stop"));
    ASSERT_TRUE(b.finished());
    ASSERT_TRUE(b.error().has_value());
    EXPECT_EQ(b.error()->http_status, 400);
    EXPECT_EQ(b.error()->message, "prompt too long");
}

}  // namespace
}  // namespace tessera::server

namespace tessera::server {
namespace {

// http_server.py update_weight_version: new_version required, abort_all_requests true unless
// told otherwise.
TEST(OpenAiProtocolTest, UpdateWeightVersionBody) {
    auto in = parse_update_weight_version(R"({"new_version": "step-7"})");
    ASSERT_TRUE(std::holds_alternative<WeightVersionInput>(in));
    EXPECT_EQ(std::get<WeightVersionInput>(in).new_version, "step-7");
    EXPECT_TRUE(std::get<WeightVersionInput>(in).abort_all_requests);
    in = parse_update_weight_version(R"({"new_version": "v", "abort_all_requests": false})");
    EXPECT_FALSE(std::get<WeightVersionInput>(in).abort_all_requests);
    for (const char* bad : {"{}", R"({"new_version": 3})", R"({"new_version": "v", "abort_all_requests": 1})"}) {
        auto refused = parse_update_weight_version(bad);
        ASSERT_TRUE(std::holds_alternative<ApiError>(refused)) << bad;
        EXPECT_EQ(std::get<ApiError>(refused).http_status, 400);
    }
}

// http_server.py separate_reasoning_request: the named parser's split of a text, with its
// own force_reasoning (DeepSeek-R1's output starts inside the reasoning, Qwen3's does not).
TEST(OpenAiProtocolTest, SeparateReasoning) {
    const auto answer = [](const std::string& body) {
        auto a = separate_reasoning_answer(body);
        EXPECT_TRUE(std::holds_alternative<std::string>(a)) << body;
        return std::holds_alternative<std::string>(a) ? nlohmann::json::parse(std::get<std::string>(a))
                                                       : nlohmann::json();
    };
    nlohmann::json r1 = answer(R"({"text": "weigh it</think>42", "reasoning_parser": "deepseek-r1"})");
    EXPECT_EQ(r1["reasoning_text"], "weigh it");
    EXPECT_EQ(r1["text"], "42");
    EXPECT_FALSE(r1.contains("blocks"));
    nlohmann::json qwen = answer(R"({"text": "no thinking here", "reasoning_parser": "qwen3"})");
    EXPECT_EQ(qwen["reasoning_text"], "");
    EXPECT_EQ(qwen["text"], "no thinking here");
    nlohmann::json blocks =
        answer(R"({"text": "<think>a</think>b", "reasoning_parser": "qwen3", "return_blocks": true})");
    EXPECT_EQ(blocks["reasoning_blocks"], nlohmann::json::array({"a"}));
    EXPECT_EQ(blocks["text_blocks"], nlohmann::json::array({"b"}));
    EXPECT_EQ(blocks["blocks"][0]["type"], "reasoning");
    EXPECT_EQ(blocks["blocks"][1]["text"], "b");
    for (const char* bad : {R"({"text": "x"})", R"({"reasoning_parser": "qwen3"})",
                            R"({"text": "x", "reasoning_parser": "nope"})"}) {
        auto refused = separate_reasoning_answer(bad);
        ASSERT_TRUE(std::holds_alternative<ApiError>(refused)) << bad;
        EXPECT_EQ(std::get<ApiError>(refused).http_status, 400);
    }
    EXPECT_NE(std::get<ApiError>(separate_reasoning_answer(R"({"text": "x", "reasoning_parser": "nope"})"))
                  .message.find("deepseek-r1"),
              std::string::npos)
        << "lists the parsers";
}

// http_server.py parse_function_call_request: the calls of the offered tools, each with its
// tool's place in the list; the launch's --tool-call-parser when the body names none.
TEST(OpenAiProtocolTest, ParseFunctionCall) {
    const std::string tools = R"([{"type": "function", "function": {"name": "add"}},
                                  {"type": "function", "function": {"name": "get_weather"}}])";
    const std::string text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                             "\"Paris\"}}\n</tool_call>";
    const nlohmann::json body = {{"text", text}, {"tools", nlohmann::json::parse(tools)},
                                 {"tool_call_parser", "qwen25"}};
    auto a = parse_function_call_answer(body.dump(), std::nullopt);
    ASSERT_TRUE(std::holds_alternative<std::string>(a)) << std::get<ApiError>(a).message;
    const nlohmann::json parsed = nlohmann::json::parse(std::get<std::string>(a));
    EXPECT_EQ(parsed["normal_text"], "Let me check.");
    ASSERT_EQ(parsed["calls"].size(), 1u);
    EXPECT_EQ(parsed["calls"][0]["tool_index"], 1);
    EXPECT_EQ(parsed["calls"][0]["name"], "get_weather");
    EXPECT_EQ(nlohmann::json::parse(parsed["calls"][0]["parameters"].get<std::string>()),
              nlohmann::json({{"city", "Paris"}}));

    nlohmann::json no_tools = body;
    no_tools.erase("tools");
    EXPECT_EQ(nlohmann::json::parse(std::get<std::string>(parse_function_call_answer(no_tools.dump(), std::nullopt))),
              nlohmann::json({{"normal_text", text}, {"calls", nlohmann::json::array()}}))
        << "no tools: the text is all normal_text";

    nlohmann::json launch = body;
    launch.erase("tool_call_parser");
    EXPECT_TRUE(std::holds_alternative<std::string>(parse_function_call_answer(launch.dump(),
                                                                               tool_call_format("qwen25").value())));
    auto unnamed = parse_function_call_answer(launch.dump(), std::nullopt);
    ASSERT_TRUE(std::holds_alternative<ApiError>(unnamed));
    EXPECT_NE(std::get<ApiError>(unnamed).message.find("--tool-call-parser"), std::string::npos);
    nlohmann::json unknown = body;
    unknown["tool_call_parser"] = "nope";
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_function_call_answer(unknown.dump(), std::nullopt)));
    nlohmann::json bad_tools = body;
    bad_tools["tools"] = nlohmann::json::array({1});
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_function_call_answer(bad_tools.dump(), std::nullopt)));
}

}  // namespace
}  // namespace tessera::server

namespace tessera::server {
namespace {

ParseOutcome score(const std::string& body) { return parse_request(ApiKind::kScore, body, options(), "score-1"); }

// serving_score.py / score_request: one request per item (query + item, or item + query),
// each reading the labels' log-probabilities at its prompt's end with no token generated.
TEST(OpenAiProtocolTest, ScoreRequestIsOnePrefillPerItem) {
    ParseOutcome text = score(R"({"query": "Is it ", "items": ["red?", "blue?"], "label_token_ids": [9, 4],
                                 "item_first": false})");
    ASSERT_TRUE(text.ok()) << text.error->message;
    ASSERT_EQ(text.request.requests.size(), 2u);
    EXPECT_EQ(text.request.requests[1].input.text, "Is it blue?");
    const GenerationParams& p = text.request.requests[0].params;
    EXPECT_EQ(p.max_new_tokens, 0);
    EXPECT_TRUE(p.logprobs);
    EXPECT_EQ(p.logprob_start_len, -1);
    EXPECT_EQ(p.token_ids_logprob, (std::vector<std::int32_t>{9, 4}));
    EXPECT_EQ(score(R"({"query": "q", "items": "i", "label_token_ids": [1], "item_first": true})")
                  .request.requests[0].input.text,
              "iq");
    ParseOutcome ids =
        score(R"({"query": [1, 2], "items": [[3], [4, 5]], "label_token_ids": [7], "item_first": true})");
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(ids.request.requests[1].input.input_ids, (std::vector<std::int32_t>{4, 5, 1, 2}));
    EXPECT_TRUE(score(R"({"query": "q", "items": [], "label_token_ids": [1]})").request.requests.empty());

    for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
             {R"({"query": "q", "items": ["i"]})", "label_token_ids is required for generation (CausalLM) models."},
             {R"({"query": "q", "label_token_ids": [1]})", "items must be provided"},
             {R"({"query": "q", "items": [[1]], "label_token_ids": [1]})",
              "Invalid combination of query/items types for score_request."},
             {R"({"query": [1], "items": ["x"], "label_token_ids": [1]})",
              "Invalid combination of query/items types for score_request."},
             {R"({"query": "q", "items": ["i"], "label_token_ids": [1], "return_pooled_hidden_states": true})",
              "return_pooled_hidden_states is not supported for CausalLM models"},
             {R"({"query": "q", "items": ["i"], "label_token_ids": [1], "query_embed_overrides": [[0.5]]})",
              "not supported"},
             {R"({"query": "q", "items": ["i"], "label_token_ids": [-1]})", "non-empty list of token ids"}}) {
        ParseOutcome refused = score(body);
        ASSERT_FALSE(refused.ok()) << body;
        EXPECT_EQ(refused.error->http_status, 400);
        EXPECT_NE(refused.error->message.find(message), std::string::npos) << refused.error->message;
    }
}

// _convert_logprobs_to_scores: each label's probability, or a softmax over the labels.
TEST(ResponseBuilderTest, ScoresAreLabelProbabilities) {
    for (const bool softmax : {false, true}) {
        ParseOutcome o = score(std::string(R"({"query": "q", "items": ["a", "b"], "label_token_ids": [9, 4],
                                               "apply_softmax": )") + (softmax ? "true}" : "false}"));
        ASSERT_TRUE(o.ok());
        ResponseBuilder b(o.request);
        for (std::size_t i = 0; i < 2; ++i) {
            GenerationEvent e;
            e.finish_reason = "length";
            e.usage.prompt_tokens = 3;
            e.unsampled_logprobs = TokenLogprob{.chosen = {{"x", std::log(0.5f)}, {"y", i == 0 ? std::log(0.25f)
                                                                                              : -INFINITY}},
                                                .chosen_ids = {9, 4}};
            b.add_event(i, e);
        }
        const Json j = Json::parse(b.body());
        EXPECT_EQ(j["object"], "scoring");
        EXPECT_EQ(j["model"], "tiny");
        EXPECT_EQ(j["usage"]["prompt_tokens"], 6);
        EXPECT_EQ(j["usage"]["completion_tokens"], 0);
        const std::vector<double> first = j["scores"][0], second = j["scores"][1];
        EXPECT_NEAR(first[0], softmax ? 2.0 / 3 : 0.5, 1e-6);
        EXPECT_NEAR(first[1], softmax ? 1.0 / 3 : 0.25, 1e-6);
        EXPECT_NEAR(second[0], softmax ? 1.0 : 0.5, 1e-6);
        EXPECT_EQ(second[1], 0.0) << "a label outside the distribution scores 0";
    }
}

}  // namespace
}  // namespace tessera::server
