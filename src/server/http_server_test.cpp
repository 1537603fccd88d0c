#include "server/http_server.h"

#include <gtest/gtest.h>

#include "server/http_access.h"
#include "server/http_test_support.h"

namespace tessera::server {
namespace {

using testing::FakeBackend;
using testing::HttpResponse;
using testing::TestClient;
using Json = nlohmann::ordered_json;

const std::string kChat = R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4)";

class HttpServerTest : public ::testing::Test {
 protected:
    void start(HttpServerOptions options = {}) {
        options.host = "127.0.0.1";
        options.port = 0;
        options.health_generate_timeout = std::chrono::milliseconds(300);
        backend_.set_ready(true);  // a previous server's stop() drained the fake
        server_ = std::make_unique<HttpServer>(backend_, options);
        ASSERT_TRUE(server_->start().ok());
        ASSERT_GT(server_->port(), 0);
    }
    void SetUp() override { start(); }
    void TearDown() override {
        if (server_) server_->stop();
    }
    HttpResponse call(const std::string& method, const std::string& path, const std::string& body = "") {
        TestClient c(server_->port());
        return c.request(method, path, body);
    }
    // Waits up to 3 s for `pred`.
    template <typename Pred>
    static bool eventually(Pred pred) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        while (!pred()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return true;
    }

    FakeBackend backend_;
    std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ChatNonStreaming) {
    HttpResponse r = call("POST", "/v1/chat/completions", kChat + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
    const Json j = r.json();
    EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["model"], "tiny");
    EXPECT_TRUE(j["created"].is_number_integer());
    ASSERT_EQ(j["choices"].size(), 1u);
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "t1 t2 t3 t4 ");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
    EXPECT_EQ(j["usage"]["completion_tokens"], 4);
    EXPECT_EQ(j["usage"]["total_tokens"], 14);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
    // The fake saw the chat JSON and the parameters.
    auto reqs = backend_.requests();
    ASSERT_EQ(reqs.size(), 1u);
    EXPECT_EQ(Json::parse(*reqs[0].input.chat_json)["messages"][0]["content"], "hi");
    EXPECT_EQ(reqs[0].params.max_new_tokens, 4);
    EXPECT_EQ(reqs[0].request_id, j["id"]);
}

// --reasoning-parser reaches the chat route: with thinking switched on, the whole output of
// the fake (no end tag) is reasoning.
TEST_F(HttpServerTest, ReasoningParserSplitsChatOutput) {
    server_->stop();
    HttpServerOptions o;
    o.protocol.reasoning = reasoning_format("qwen3").value();
    o.protocol.tool_calls = tool_call_format("qwen25").value();
    start(o);
    HttpResponse r = call("POST", "/v1/chat/completions",
                          kChat + R"(, "chat_template_kwargs": {"enable_thinking": true},
                          "tools": [{"type": "function", "function": {"name": "add"}}]})");
    ASSERT_EQ(r.status, 200) << r.body;
    const Json message = r.json()["choices"][0]["message"];
    EXPECT_EQ(message["reasoning_content"], "t1 t2 t3 t4");
    EXPECT_EQ(message["content"], "");
    EXPECT_TRUE(message["tool_calls"].is_null());  // no call in the text
}

TEST_F(HttpServerTest, ChatStreamingAndKeepAlive) {
    TestClient c(server_->port());
    for (int round = 0; round < 2; ++round) {  // the same connection twice
        HttpResponse r = c.request("POST", "/v1/chat/completions",
                                   kChat + R"(, "stream": true, "stream_options": {"include_usage": true}})");
        ASSERT_EQ(r.status, 200);
        EXPECT_EQ(r.header("content-type"), "text/event-stream; charset=utf-8");
        EXPECT_EQ(r.header("transfer-encoding"), "chunked");
        auto events = r.events();
        // role, 4 tokens (the last carries finish_reason), usage, [DONE]
        ASSERT_EQ(events.size(), 7u) << r.body;
        const Json role = Json::parse(events[0]);
        EXPECT_EQ(role["object"], "chat.completion.chunk");
        EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
        std::string text;
        for (int i = 1; i <= 4; ++i) {
            const Json e = Json::parse(events[i]);
            EXPECT_EQ(e["id"], role["id"]);
            text += e["choices"][0]["delta"]["content"].get<std::string>();
            EXPECT_EQ(e["choices"][0]["finish_reason"].is_null(), i < 4);
        }
        EXPECT_EQ(text, "t1 t2 t3 t4 ");
        EXPECT_EQ(Json::parse(events[4])["choices"][0]["finish_reason"], "length");
        const Json usage = Json::parse(events[5]);
        EXPECT_TRUE(usage["choices"].empty());
        EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
        EXPECT_EQ(events[6], "[DONE]");
    }
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
    TestClient c(server_->port());
    const std::string body = R"({"prompt": "abc", "max_tokens": 2})";
    const std::string one = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_TRUE(c.send_raw(one + one + "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    for (int i = 0; i < 2; ++i) {
        HttpResponse r = c.read_response();
        ASSERT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(r.json().value("/choices/0/text"_json_pointer, ""), "t1 t2 ") << r.body;
    }
    EXPECT_EQ(c.read_response().status, 200);
}

TEST_F(HttpServerTest, CompletionsBothWays) {
    HttpResponse r = call("POST", "/v1/completions", R"({"prompt": "abc STOP", "max_tokens": 9, "logprobs": 1})");
    ASSERT_EQ(r.status, 200) << r.body;
    Json j = r.json();
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_EQ(j["choices"][0]["text"], "t1 t2 ");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["choices"][0]["matched_stop"], "STOP");
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json::array({"t1 ", "t2 "}));
    EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], Json::array({0, 3}));
    EXPECT_EQ(j["usage"]["prompt_tokens"], 8);

    r = call("POST", "/v1/completions", R"({"prompt": "abc", "max_tokens": 3, "stream": true, "n": 2})");
    ASSERT_EQ(r.status, 200);
    auto events = r.events();
    ASSERT_EQ(events.size(), 7u) << r.body;  // 2 choices x 3 tokens + [DONE]
    std::string text[2];
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        const Json e = Json::parse(events[i]);
        text[e["choices"][0]["index"].get<int>()] += e["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text[0], "t1 t2 t3 ");
    EXPECT_EQ(text[1], "t1 t2 t3 ");
    EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(HttpServerTest, NativeGenerate) {
    HttpResponse r = call("POST", "/generate", R"({"text": "hello", "rid": "abc", "sampling_params": {"max_new_tokens": 3}})");
    ASSERT_EQ(r.status, 200) << r.body;
    Json j = r.json();
    EXPECT_EQ(j["text"], "t1 t2 t3 ");
    EXPECT_EQ(j["output_ids"], Json::array({101, 102, 103}));
    EXPECT_EQ(j["meta_info"]["id"], "abc");
    EXPECT_EQ(j["meta_info"]["finish_reason"]["type"], "length");
    EXPECT_EQ(j["meta_info"]["prompt_tokens"], 5);
    EXPECT_EQ(j["meta_info"]["completion_tokens"], 3);
    EXPECT_EQ(j["meta_info"]["cached_tokens"], 1);
    EXPECT_GT(j["meta_info"]["e2e_latency"].get<double>(), 0.0);

    r = call("POST", "/generate", R"({"input_ids": [1, 2], "stream": true, "sampling_params": {"max_new_tokens": 2}})");
    ASSERT_EQ(r.status, 200);
    auto events = r.events();
    ASSERT_EQ(events.size(), 3u) << r.body;
    EXPECT_EQ(Json::parse(events[0])["text"], "t1 ");
    EXPECT_EQ(Json::parse(events[1])["text"], "t1 t2 ");
    EXPECT_EQ(Json::parse(events[1])["meta_info"]["finish_reason"]["type"], "length");
    EXPECT_EQ(events[2], "[DONE]");
}

TEST_F(HttpServerTest, ThirtyTwoConcurrentStreams) {
  for (int n_io_threads : {1, 2}) {
    server_->stop();
    HttpServerOptions o;
    o.n_io_threads = n_io_threads;
    start(o);
    constexpr int kClients = 32;
    std::atomic<int> n_ok{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i) {
        threads.emplace_back([&] {
            TestClient c(server_->port());
            HttpResponse r = c.request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 20, "stream": true})");
            auto events = r.events();
            std::string text;
            for (std::size_t k = 0; k + 1 < events.size(); ++k)
                text += Json::parse(events[k])["choices"][0]["text"].get<std::string>();
            std::string want;
            for (int k = 1; k <= 20; ++k) want += "t" + std::to_string(k) + " ";
            if (r.status == 200 && events.size() == 21 && events.back() == "[DONE]" && text == want) ++n_ok;
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(n_ok.load(), kClients) << n_io_threads << " io threads";
  }
}

// SGLang's /abort_request: the requests whose ids start with rid end with finish_reason
// "abort" (their clients get their answers at once); abort_all ends the rest; a bad body is a
// 400 naming the field.
TEST_F(HttpServerTest, AbortRequestEndsTheMatchingRequests) {
    HttpResponse first, second, other;
    const auto generate = [&](const std::string& rid, HttpResponse& out) {
        return std::thread([&, rid] {
            out = call("POST", "/generate",
                       R"({"text": "x", "rid": ")" + rid + R"(", "sampling_params": {"max_new_tokens": 3000}})");
        });
    };
    std::thread a = generate("job-1", first), b = generate("job-2", second), c = generate("other", other);
    ASSERT_TRUE(eventually([&] { return backend_.n_active() == 3; }));
    EXPECT_EQ(call("POST", "/abort_request", R"({"rid": "job-"})").status, 200);
    a.join();
    b.join();
    EXPECT_EQ(first.json()["meta_info"]["finish_reason"]["type"], "abort") << first.body;
    EXPECT_EQ(second.json()["meta_info"]["finish_reason"]["type"], "abort") << second.body;
    EXPECT_FALSE(backend_.was_aborted("other"));
    EXPECT_EQ(call("POST", "/abort_request", R"({"rid": ""})").status, 200);
    EXPECT_FALSE(backend_.was_aborted("other")) << "an empty rid stops nothing";
    EXPECT_EQ(call("POST", "/abort_request", R"({"abort_all": true})").status, 200);
    c.join();
    EXPECT_EQ(other.json()["meta_info"]["finish_reason"]["type"], "abort") << other.body;
    HttpResponse bad = call("POST", "/abort_request", R"({"rid": 5})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("rid"), std::string::npos) << bad.body;
    EXPECT_EQ(call("GET", "/abort_request").status, 405);
}

// /pause_generation (mode abort by default, retract, in_place) and /continue_generation answer
// SGLang's JSON; a bad mode is a 400 naming the field.
TEST_F(HttpServerTest, PauseAndContinueGeneration) {
    HttpResponse paused = call("POST", "/pause_generation", "{}");
    ASSERT_EQ(paused.status, 200) << paused.body;
    EXPECT_EQ(paused.json()["message"], "Generation paused successfully.");
    EXPECT_EQ(paused.json()["status"], "ok");
    EXPECT_EQ(call("POST", "/pause_generation", R"({"mode": "retract"})").status, 200);
    EXPECT_EQ(call("POST", "/pause_generation", R"({"mode": "in_place"})").status, 200);
    HttpResponse resumed = call("POST", "/continue_generation", R"({"torch_empty_cache": true})");
    ASSERT_EQ(resumed.status, 200) << resumed.body;
    EXPECT_EQ(resumed.json()["message"], "Generation continued successfully.");
    EXPECT_EQ(backend_.pauses(), (std::vector<std::string>{"abort", "retract", "in_place", "continue"}));
    HttpResponse bad = call("POST", "/pause_generation", R"({"mode": "sleep"})");
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("'mode'"), std::string::npos) << bad.body;
    EXPECT_EQ(call("GET", "/continue_generation").status, 405);
}

// /update_weights_from_disk answers SGLang's {success, message, num_paused_requests} once the
// backend does, without holding an HTTP thread meanwhile; a success sets the weight version
// the request gives, a failure (400) keeps it.
TEST_F(HttpServerTest, UpdateWeightsFromDisk) {
    const auto update = [&](const std::string& body, Status answer) {
        const std::size_t before = backend_.updates().size();
        HttpResponse r;
        std::thread client([&] { r = call("POST", "/update_weights_from_disk", body); });
        for (int i = 0; i < 2000 && backend_.updates().size() == before; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(call("GET", "/health").status, 200) << "an HTTP thread waits for the update";
        backend_.finish_update(std::move(answer));
        client.join();
        return r;
    };
    HttpResponse ok = update(R"({"model_path": "/ckpt/step-200", "weight_version": "step-200",
                                 "abort_all_requests": true, "flush_cache": false, "is_async": false,
                                 "token_step": 3, "manifest": {}})",
                             Status::Ok());
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.json()["success"], true);
    EXPECT_EQ(ok.json()["message"], "Succeeded to update model weights. Weight version updated to step-200.");
    EXPECT_EQ(ok.json()["num_paused_requests"], 0);
    const Backend::WeightUpdate asked = backend_.updates().back();
    EXPECT_EQ(asked.model_path, "/ckpt/step-200");
    EXPECT_EQ(asked.load_format, "");
    EXPECT_TRUE(asked.abort_all_requests);
    EXPECT_FALSE(asked.flush_cache);
    EXPECT_EQ(call("GET", "/model_info").json()["weight_version"], "step-200");

    HttpResponse failed = update(R"({"model_path": "/nowhere", "load_format": "safetensors", "weight_version": "x"})",
                                 Status::InvalidArgument("Failed to update weights: no config.json.\nRolling back to "
                                                         "original weights."));
    EXPECT_EQ(failed.status, 400) << failed.body;
    EXPECT_EQ(failed.json()["success"], false);
    EXPECT_EQ(failed.json()["message"], "Failed to update weights: no config.json.\nRolling back to original weights.");
    EXPECT_EQ(backend_.updates().back().load_format, "safetensors");
    EXPECT_EQ(backend_.updates().back().flush_cache, true);
    EXPECT_EQ(call("GET", "/model_info").json()["weight_version"], "step-200");

    for (const char* body : {R"({})", R"({"model_path": ""})", R"({"model_path": 5})",
                             R"({"model_path": "m", "flush_cache": "yes"})", R"({"model_path": "m", "manifest": 1})"}) {
        HttpResponse bad = call("POST", "/update_weights_from_disk", body);
        EXPECT_EQ(bad.status, 400) << body;
        EXPECT_EQ(bad.json()["error"]["type"], "invalid_request_error") << bad.body;
    }
    EXPECT_NE(call("POST", "/update_weights_from_disk", "{}").body.find("model_path"), std::string::npos);
    EXPECT_EQ(call("GET", "/update_weights_from_disk").status, 405);
    EXPECT_EQ(backend_.updates().size(), 2u);
}

// http_server.py release_memory_occupation / resume_memory_occupation: the tags name the
// regions (none: all), the answer is a null body, an error is 400 with its message.
TEST_F(HttpServerTest, MemoryOccupation) {
    for (const auto& [body, regions] : std::vector<std::pair<std::string, std::string>>{
             {"", " weights kv_cache cuda_graph"},
             {"{}", " weights kv_cache cuda_graph"},
             {R"({"tags": null})", " weights kv_cache cuda_graph"},
             {R"({"tags": []})", " weights kv_cache cuda_graph"},
             {R"({"tags": ["kv_cache"]})", " kv_cache"},
             {R"({"tags": ["weights", "cuda_graph"]})", " weights cuda_graph"}}) {
        for (const std::string what : {"release", "resume"}) {
            HttpResponse r = call("POST", "/" + what + "_memory_occupation", body);
            EXPECT_EQ(r.status, 200) << body << r.body;
            EXPECT_EQ(r.body, "null");
            EXPECT_EQ(backend_.memory_calls().back(), what + regions) << body;
        }
    }
    const std::size_t calls = backend_.memory_calls().size();
    for (const char* body : {R"({"tags": ["weights", "gpu"]})", R"({"tags": 3})", "[1]"}) {
        HttpResponse bad = call("POST", "/release_memory_occupation", body);
        EXPECT_EQ(bad.status, 400) << body;
        EXPECT_EQ(bad.json()["error"]["type"], "invalid_request_error") << bad.body;
    }
    EXPECT_NE(call("POST", "/resume_memory_occupation", R"({"tags": ["gpu"]})").body.find("'weights', 'kv_cache'"),
              std::string::npos);
    EXPECT_EQ(call("GET", "/release_memory_occupation").status, 405);
    EXPECT_EQ(backend_.memory_calls().size(), calls);
    backend_.memory_answer =
        Status::InvalidArgument("release_memory_occupation should be called only when server is idle");
    HttpResponse busy = call("POST", "/release_memory_occupation", "{}");
    EXPECT_EQ(busy.status, 400);
    EXPECT_EQ(busy.json()["error"]["message"], "release_memory_occupation should be called only when server is idle");
}

// http_server.py update_weight_version: what /model_info reports changes, every request ends
// first unless told otherwise; SageMaker's /invocations is chat completions; the text-parsing
// routes answer without the model.
TEST_F(HttpServerTest, WeightVersionSageMakerAndParsingRoutes) {
    HttpResponse r =
        call("POST", "/update_weight_version", R"({"new_version": "step-9", "abort_all_requests": false})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, R"({"success":true,"message":"Weight version updated to step-9","new_version":"step-9"})");
    EXPECT_EQ(call("GET", "/model_info").json()["weight_version"], "step-9");
    EXPECT_EQ(call("POST", "/update_weight_version", "{}").status, 400);
    EXPECT_EQ(call("GET", "/update_weight_version").status, 405);

    HttpResponse chat = call("POST", "/invocations", kChat + "}");
    ASSERT_EQ(chat.status, 200) << chat.body;
    EXPECT_EQ(chat.json()["object"], "chat.completion");

    HttpResponse split =
        call("POST", "/separate_reasoning", R"({"text": "a</think>b", "reasoning_parser": "deepseek-r1"})");
    ASSERT_EQ(split.status, 200) << split.body;
    EXPECT_EQ(split.json()["reasoning_text"], "a");
    HttpResponse calls = call("POST", "/parse_function_call", R"({"text": "hi", "tool_call_parser": "qwen25"})");
    ASSERT_EQ(calls.status, 200) << calls.body;
    EXPECT_EQ(calls.json()["normal_text"], "hi");
    EXPECT_EQ(call("POST", "/parse_function_call", R"({"text": "hi"})").status, 400) << "no parser at launch";

    // http_server.py configure_logging: 200 with no body; unset fields stay unset.
    HttpResponse configured = call("POST", "/configure_logging",
                                   R"({"log_requests": true, "log_requests_level": 3, "log_requests_format": "json",
                                       "log_level": "WARNING"})");
    ASSERT_EQ(configured.status, 200) << configured.body;
    EXPECT_EQ(configured.body, "");
    const Backend::LoggingChange change = backend_.logging_changes().back();
    EXPECT_EQ(change.log_requests, true);
    EXPECT_EQ(change.log_requests_level, 3);
    EXPECT_EQ(change.log_requests_json, true);
    EXPECT_EQ(change.log_level, logging::Level::kWarn);
    ASSERT_EQ(call("POST", "/configure_logging", R"({"log_requests": false})").status, 200);
    EXPECT_FALSE(backend_.logging_changes().back().log_requests_level.has_value());
    for (const char* bad : {R"({"log_requests_level": 4})", R"({"log_requests_format": "xml"})",
                            R"({"log_level": "loud"})", R"({"crash_dump_folder": "/tmp/x"})",
                            R"({"dump_requests_folder": "/tmp/x"})"}) {
        EXPECT_EQ(call("POST", "/configure_logging", bad).status, 400) << bad;
    }
    EXPECT_EQ(backend_.logging_changes().size(), 2u);
}

// GET /v1/models/NAME: the served model's card, another name OpenAI's 404.
TEST_F(HttpServerTest, RetrieveModel) {
    HttpResponse r = call("GET", "/v1/models/tiny");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["id"], "tiny");
    EXPECT_EQ(r.json()["object"], "model");
    r = call("GET", "/v1/models/org/other");
    EXPECT_EQ(r.status, 404);
    EXPECT_EQ(r.json()["error"]["code"], "model_not_found") << r.body;
    EXPECT_NE(r.body.find("The model 'org/other' does not exist"), std::string::npos) << r.body;
}

// serving_tokenize.py: /v1/tokenize and /v1/detokenize (and their /tokenize, /detokenize
// names), one prompt or a list.
TEST_F(HttpServerTest, TokenizeAndDetokenize) {
    HttpResponse r = call("POST", "/v1/tokenize", R"({"model": "tiny", "prompt": "ab"})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json(), Json::parse(R"({"tokens": [1, 97, 98], "count": 3, "max_model_len": 4096})"));
    r = call("POST", "/tokenize", R"({"prompt": ["a", "bc"], "add_special_tokens": false})");
    EXPECT_EQ(r.json(), Json::parse(R"({"tokens": [[97], [98, 99]], "count": [1, 2], "max_model_len": 4096})"));
    r = call("POST", "/v1/detokenize", R"({"tokens": [1, 104, 105]})");
    EXPECT_EQ(r.json(), Json::parse(R"({"text": "hi"})"));
    r = call("POST", "/detokenize", R"({"tokens": [[1, 104], [105]], "skip_special_tokens": false})");
    EXPECT_EQ(r.json(), Json::parse(R"({"text": ["\u0001h", "i"]})"));
    EXPECT_EQ(call("POST", "/v1/detokenize", R"({"tokens": []})").json(), Json::parse(R"({"text": ""})"));
    for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
             {"/v1/tokenize", "{}"}, {"/v1/tokenize", R"({"prompt": 5})"}, {"/v1/detokenize", R"({"tokens": "x"})"},
             {"/v1/detokenize", R"({"tokens": [1.5]})"}, {"/v1/detokenize", R"({"tokens": [[1], 2]})"},
             {"/v1/detokenize", R"({"tokens": [300]})"}}) {
        r = call("POST", path, body);
        EXPECT_EQ(r.status, 400) << path << " " << body << ": " << r.body;
    }
    EXPECT_EQ(call("GET", "/v1/tokenize").status, 405);
}

TEST_F(HttpServerTest, DisconnectDuringNonStreamingRequestAborts) {
    auto c = std::make_unique<TestClient>(server_->port());
    ASSERT_TRUE(c->send_request("POST", "/generate", R"({"text": "x", "sampling_params": {"max_new_tokens": 4000}})"));
    ASSERT_TRUE(eventually([&] { return backend_.submitted().size() == 1; }));
    c.reset();
    EXPECT_TRUE(eventually([&] { return backend_.was_aborted(backend_.submitted()[0]); }));
}

TEST_F(HttpServerTest, DisconnectMidStreamAborts) {
    auto c = std::make_unique<TestClient>(server_->port());
    ASSERT_TRUE(c->send_request("POST", "/v1/chat/completions",
                                R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4000, "stream": true})"));
    ASSERT_TRUE(c->read_until("data: ", 3));
    auto ids = backend_.submitted();
    ASSERT_EQ(ids.size(), 1u);
    c.reset();  // the client goes away
    EXPECT_TRUE(eventually([&] { return backend_.was_aborted(ids[0]); }));
    EXPECT_TRUE(eventually([&] { return backend_.n_active() == 0; }));
    EXPECT_EQ(call("POST", "/v1/chat/completions", kChat + "}").status, 200);  // still serving
}

struct BadInput {
    std::string path;
    std::string body;
    int status;
    std::string param;  // "" → null
};

TEST_F(HttpServerTest, BadInputsAreRejectedAndServerKeepsServing) {
    const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
    const std::vector<BadInput> cases = {
        {"/v1/chat/completions", "{\"messages\": [", 400, ""},
        {"/v1/chat/completions", "", 400, ""},
        {"/v1/chat/completions", "{" + m + R"(, "max_tokens": "many"})", 400, "max_tokens"},
        {"/v1/chat/completions", "{" + m + R"(, "max_tokens": -3})", 400, "max_tokens"},
        {"/v1/chat/completions", "{" + m + R"(, "max_tokens": 1000000000000})", 400, "max_tokens"},
        {"/v1/chat/completions", "{" + m + R"(, "temperature": [1]})", 400, "temperature"},
        {"/v1/chat/completions", "{" + m + R"(, "model": "gpt-4o"})", 404, "model"},
        {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}", 400, ""},
        {"/v1/completions", R"({"prompt": ["a", 5]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": "__reject__"})", 400, ""},
        {"/generate", R"({"text": "x", "sampling_params": {"top_p": 2}})", 400, "sampling_params.top_p"},
    };
    TestClient c(server_->port());  // one keep-alive connection for all of them
    for (const BadInput& b : cases) {
        HttpResponse r = c.request("POST", b.path, b.body);
        EXPECT_EQ(r.status, b.status) << b.body << " → " << r.body;
        const Json j = r.json();
        ASSERT_TRUE(j.contains("error")) << r.body;
        EXPECT_TRUE(j["error"]["message"].is_string());
        EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r.body;
        if (b.param.empty()) {
            EXPECT_TRUE(j["error"]["param"].is_null()) << r.body;
        } else {
            EXPECT_EQ(j["error"]["param"], b.param) << r.body;
        }
        if (b.status == 404) {
            EXPECT_EQ(j["error"]["code"], "model_not_found");
        }
    }
    EXPECT_EQ(c.request("POST", "/v1/chat/completions", kChat + "}").status, 200);
    EXPECT_TRUE(backend_.n_active() == 0);

    // Routing errors.
    EXPECT_EQ(c.request("GET", "/nope").status, 404);
    HttpResponse r = c.request("GET", "/v1/chat/completions");
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.header("allow"), "POST");
}

// --api-key on every route but /health, --admin-api-key on /flush_cache, the Host header
// against DNS rebinding, and JSON routes refusing bodies a web page can post cross-origin.
TEST_F(HttpServerTest, AccessControl) {
    server_->stop();
    HttpServerOptions o;
    o.api_key = "sk-user";
    o.admin_api_key = "sk-admin";
    o.allowed_hosts = {"tessera.internal"};
    start(o);
    const std::string body = R"({"prompt": "abc", "max_tokens": 2})";
    const auto as = [&](const std::string& method, const std::string& path, const std::string& headers,
                        const std::string& b = "") {
        TestClient c(server_->port());
        std::string req = method + " " + path + " HTTP/1.1\r\n" + headers;
        if (!b.empty()) req += "Content-Length: " + std::to_string(b.size()) + "\r\n";
        if (!c.send_raw(req + "\r\n" + b)) return HttpResponse{};
        return c.read_response();
    };
    const std::string json = "Content-Type: application/json\r\n";
    const std::string local = "Host: tessera.internal:8000\r\n";
    const std::string user = "Authorization: Bearer sk-user\r\n";
    // /health (and SageMaker's /ping) need no key; everything else does.
    EXPECT_EQ(as("GET", "/health", local).status, 200);
    EXPECT_EQ(as("GET", "/ping", local).status, 200);
    for (const char* path : {"/v1/models", "/get_server_info", "/metrics"}) {
        HttpResponse r = as("GET", path, local);
        EXPECT_EQ(r.status, 401) << path;
        EXPECT_EQ(r.json()["error"]["code"], "invalid_api_key") << r.body;
        EXPECT_EQ(as("GET", path, local + "Authorization: Bearer sk-wrong\r\n").status, 401) << path;
        EXPECT_EQ(as("GET", path, local + user).status, 200) << path;
    }
    EXPECT_EQ(as("POST", "/v1/completions", local + json, body).status, 401);
    EXPECT_EQ(as("POST", "/v1/completions", local + json + user, body).status, 200);
    // State changes need the admin key, by POST.
    EXPECT_EQ(as("POST", "/flush_cache", local + user).status, 401);
    EXPECT_EQ(as("POST", "/flush_cache", local + "Authorization: Bearer sk-admin\r\n").status, 200);
    EXPECT_EQ(as("GET", "/flush_cache", local + "Authorization: Bearer sk-admin\r\n").status, 405);
    EXPECT_EQ(as("POST", "/abort_request", local + json + user, R"({"abort_all": true})").status, 401);
    EXPECT_EQ(as("POST", "/abort_request", local + json + "Authorization: Bearer sk-admin\r\n", "{}").status, 200);
    EXPECT_EQ(as("POST", "/update_weights_from_disk", local + json + user, R"({"model_path": "m"})").status, 401);
    EXPECT_EQ(as("POST", "/update_weight_version", local + json + user, R"({"new_version": "v"})").status, 401);
    EXPECT_EQ(as("POST", "/configure_logging", local + json + user, "{}").status, 401);
    for (const char* path :
         {"/pause_generation", "/continue_generation", "/release_memory_occupation", "/resume_memory_occupation"}) {
        EXPECT_EQ(as("POST", path, local + json + user, "{}").status, 401) << path;
        EXPECT_EQ(as("POST", path, local + json + "Authorization: Bearer sk-admin\r\n", "{}").status, 200) << path;
    }
    // A Host the server does not answer to (a rebinding page's name), even with the key.
    HttpResponse foreign = as("GET", "/v1/models", "Host: attacker.example\r\n" + user);
    EXPECT_EQ(foreign.status, 403);
    EXPECT_NE(foreign.body.find("--allowed-hosts"), std::string::npos) << foreign.body;
    // text/plain and form bodies are refused on JSON routes.
    for (const char* type : {"text/plain", "application/x-www-form-urlencoded"}) {
        HttpResponse r = as("POST", "/v1/completions", local + user + "Content-Type: " + type + "\r\n", body);
        EXPECT_EQ(r.status, 415) << type;
    }
    EXPECT_EQ(as("POST", "/generate", local + user + "Content-Type: application/json; charset=utf-8\r\n",
                 R"({"text": "abc", "sampling_params": {"max_new_tokens": 2}})").status,
              200);
}

TEST(HttpAccessTest, LoopbackBindAcceptsOnlyLoopbackNames) {
    const AccessPolicy loopback{"", "", "127.0.0.1", {}};
    for (const char* host : {"127.0.0.1:30000", "localhost:30000", "[::1]:30000", "LOCALHOST"})
        EXPECT_FALSE(check_access(loopback, RouteKind::kApi, host, "").has_value()) << host;
    for (const char* host : {"evil.example:30000", "192.168.1.5", "127.0.0.1.evil.example"})
        EXPECT_TRUE(check_access(loopback, RouteKind::kApi, host, "").has_value()) << host;
    const AccessPolicy any{"", "", "0.0.0.0", {}};
    EXPECT_FALSE(check_access(any, RouteKind::kApi, "whatever.example", "").has_value());
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

TEST_F(HttpServerTest, OversizeBodyAndMalformedHttp) {
    server_->stop();
    HttpServerOptions o;
    o.max_body_bytes = 64 * 1024;
    start(o);
    {
        TestClient c(server_->port());
        ASSERT_TRUE(c.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{\"prompt\": \""));
        HttpResponse r = c.read_response();
        EXPECT_EQ(r.status, 413);
        EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("65536"), std::string::npos) << r.body;
        EXPECT_EQ(r.header("connection"), "close");
    }
    {
        TestClient c(server_->port());
        ASSERT_TRUE(c.send_raw("THIS IS NOT HTTP\r\n\r\n"));
        EXPECT_EQ(c.read_response().status, 400);
    }
    {
        // A body just under the limit is fine (and expect: 100-continue is honoured).
        TestClient c(server_->port());
        const std::string prompt(60 * 1024, 'a');
        HttpResponse r = c.request("POST", "/v1/completions", R"({"prompt": ")" + prompt + R"(", "max_tokens": 1})",
                                   "Expect: 100-continue\r\n");
        EXPECT_EQ(r.status, 200) << r.body.substr(0, 200);
    }
    EXPECT_EQ(call("GET", "/health").status, 200);
}

TEST_F(HttpServerTest, PendingLimitAnswers503WithRetryAfter) {
    server_->stop();
    HttpServerOptions o;
    o.max_pending_requests = 2;
    start(o);
    const std::string slow = R"({"prompt": "x", "max_tokens": 4000, "stream": true})";
    auto a = std::make_unique<TestClient>(server_->port());
    auto b = std::make_unique<TestClient>(server_->port());
    ASSERT_TRUE(a->send_request("POST", "/v1/completions", slow));
    ASSERT_TRUE(b->send_request("POST", "/v1/completions", slow));
    ASSERT_TRUE(a->read_until("data: ", 1));
    ASSERT_TRUE(b->read_until("data: ", 1));

    HttpResponse r = call("POST", "/v1/completions", R"({"prompt": "x"})");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.header("retry-after"), "1");
    EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("pending"), std::string::npos);
    EXPECT_EQ(call("GET", "/health").status, 200);  // other routes still answer

    a.reset();
    b.reset();
    EXPECT_TRUE(eventually([&] { return backend_.n_active() == 0; }));
    EXPECT_TRUE(eventually([&] { return call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status == 200; }));
}

TEST_F(HttpServerTest, BackendQueueFullIs503) {
    HttpResponse r = call("POST", "/v1/completions", R"({"prompt": "__full__"})");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.header("retry-after"), "1");
}

// SGLang's /model_info (and /get_model_info): the backend's model fields, the server's
// --preferred-sampling-params (null when unset) and --weight-version; /weight_version.
TEST_F(HttpServerTest, ModelInfoAndWeightVersion) {
    Json info = call("GET", "/model_info").json();
    EXPECT_EQ(info["model_path"], "tiny");
    EXPECT_EQ(info["architectures"][0], "FakeForCausalLM");
    EXPECT_TRUE(info["preferred_sampling_params"].is_null());
    EXPECT_EQ(info["weight_version"], "default");
    EXPECT_EQ(call("POST", "/model_info").status, 405);

    server_->stop();
    HttpServerOptions o;
    auto preferred = parse_preferred_sampling_params(R"({"temperature": 0.5, "max_new_tokens": 3})", {});
    ASSERT_TRUE(preferred.ok());
    o.protocol.preferred_sampling = *preferred;
    o.weight_version = "v2";
    start(o);
    info = call("GET", "/get_model_info").json();
    EXPECT_EQ(info["preferred_sampling_params"]["temperature"], 0.5);
    EXPECT_EQ(info["preferred_sampling_params"]["max_new_tokens"], 3);
    EXPECT_EQ(info["weight_version"], "v2");
    EXPECT_EQ(call("GET", "/weight_version").json()["weight_version"], "v2");
    EXPECT_EQ(call("GET", "/get_weight_version").json()["weight_version"], "v2");
    ASSERT_EQ(call("POST", "/generate", R"({"text": "abc"})").status, 200);
    EXPECT_EQ(backend_.requests().back().params.max_new_tokens, 3);
}

TEST_F(HttpServerTest, HealthModelsInfoFlush) {
    EXPECT_EQ(call("GET", "/health").status, 200);
    EXPECT_EQ(call("GET", "/health_generate").status, 200);
    auto submitted = backend_.submitted();
    ASSERT_EQ(submitted.size(), 1u);
    auto reqs = backend_.requests();
    EXPECT_EQ(*reqs[0].input.input_ids, std::vector<std::int32_t>{0});
    EXPECT_EQ(reqs[0].params.max_new_tokens, 1);
    EXPECT_EQ(reqs[0].params.temperature, 0.0f);

    backend_.set_stall_health(true);
    EXPECT_EQ(call("GET", "/health_generate").status, 503);  // times out (300 ms)
    EXPECT_TRUE(eventually([&] { return backend_.was_aborted(backend_.submitted().back()); }));
    backend_.set_stall_health(false);

    backend_.set_ready(false);
    EXPECT_EQ(call("GET", "/health").status, 503);
    EXPECT_EQ(call("GET", "/health_generate").status, 503);
    backend_.set_ready(true);

    HttpResponse r = call("GET", "/v1/models");
    ASSERT_EQ(r.status, 200);
    Json j = r.json();
    EXPECT_EQ(j["object"], "list");
    EXPECT_EQ(j["data"][0]["id"], "tiny");
    EXPECT_EQ(j["data"][0]["object"], "model");
    EXPECT_EQ(j["data"][0]["max_model_len"], 4096);

    EXPECT_EQ(call("GET", "/get_server_info").json()["version"], "fake");
    EXPECT_EQ(call("GET", "/server_info").json()["model_path"], "tiny");
    EXPECT_EQ(call("POST", "/flush_cache").status, 200);
    EXPECT_EQ(call("GET", "/flush_cache").status, 405) << "it changes state: POST only";

    // SGLang's expert distribution recorder endpoints, plain-text answers.
    HttpResponse start = call("POST", "/start_expert_distribution_record");
    EXPECT_EQ(start.status, 200);
    EXPECT_EQ(start.body, "Start recording the expert distribution.\n");
    EXPECT_EQ(call("POST", "/stop_expert_distribution_record").body, "Stop recording the expert distribution.\n");
    EXPECT_EQ(call("POST", "/dump_expert_distribution_record").body, "Dump expert distribution record.\n");
    EXPECT_EQ(call("GET", "/dump_expert_distribution_record").status, 405) << "it changes state: POST only";
    using Action = Backend::ExpertRecordAction;
    EXPECT_EQ(backend_.expert_record_actions, (std::vector<Action>{Action::kStart, Action::kStop, Action::kDump}));
    backend_.expert_record_status = Status::InvalidArgument("needs --expert-distribution-recorder-mode");
    HttpResponse refused = call("POST", "/start_expert_distribution_record");
    EXPECT_EQ(refused.status, 400);
    EXPECT_NE(refused.body.find("--expert-distribution-recorder-mode"), std::string::npos) << refused.body;
}

TEST_F(HttpServerTest, MetricsHaveSglangNames) {
    ASSERT_EQ(call("POST", "/v1/completions", R"({"prompt": "abcd", "max_tokens": 3})").status, 200);
    HttpResponse r = call("GET", "/metrics");
    ASSERT_EQ(r.status, 200);
    const std::string& t = r.body;
    EXPECT_NE(t.find("sglang:num_running_reqs{model_name=\"tiny\"}"), std::string::npos);  // backend's
    EXPECT_NE(t.find("sglang:prompt_tokens_total{model_name=\"tiny\"} 4.0"), std::string::npos) << t;
    EXPECT_NE(t.find("sglang:generation_tokens_total{model_name=\"tiny\"} 3.0"), std::string::npos) << t;
    EXPECT_NE(t.find("# TYPE sglang:time_to_first_token_seconds histogram"), std::string::npos);
    EXPECT_NE(t.find("sglang:time_to_first_token_seconds_count{model_name=\"tiny\"} 1.0"), std::string::npos) << t;
    EXPECT_NE(t.find("sglang:inter_token_latency_seconds_count{model_name=\"tiny\"} 2.0"), std::string::npos) << t;
    EXPECT_NE(t.find("sglang:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1.0"),
              std::string::npos) << t;
}

// --bucket-* and --prompt-tokens-buckets / --generation-tokens-buckets set the histograms'
// bounds; the token histograms count each finished request's prompt, uncached prompt and
// generated tokens.
TEST_F(HttpServerTest, MetricsBucketsAndTokenHistograms) {
    server_->stop();
    HttpServerOptions o;
    o.metric_buckets.time_to_first_token = {0.5, 30};
    o.metric_buckets.prompt_tokens = token_histogram_buckets("--prompt-tokens-buckets", {"custom", "2", "8"}).value();
    o.metric_buckets.generation_tokens = {1, 5};
    start(o);
    ASSERT_EQ(call("POST", "/v1/completions", R"({"prompt": "abcd", "max_tokens": 3})").status, 200);
    const std::string t = call("GET", "/metrics").body;
    for (const char* line : {"sglang:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"30.0\"} 1.0",
                             "sglang:prompt_tokens_histogram_bucket{model_name=\"tiny\",le=\"2.0\"} 0.0",
                             "sglang:prompt_tokens_histogram_bucket{model_name=\"tiny\",le=\"8.0\"} 1.0",
                             "sglang:uncached_prompt_tokens_histogram_count{model_name=\"tiny\"} 1.0",
                             "sglang:generation_tokens_histogram_bucket{model_name=\"tiny\",le=\"1.0\"} 0.0",
                             "sglang:generation_tokens_histogram_bucket{model_name=\"tiny\",le=\"5.0\"} 1.0",
                             "sglang:generation_tokens_histogram_sum{model_name=\"tiny\"} 3.0"})
        EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
    EXPECT_EQ(t.find("time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"1200.0\"}"), std::string::npos)
        << "the default bounds are replaced";
}

// --extra-metric-labels: every sample carries them after model_name; a name SGLang's
// labels.update would replace is replaced; names Prometheus refuses are refused.
TEST_F(HttpServerTest, ExtraMetricLabels) {
    server_->stop();
    HttpServerOptions o;
    o.metric_labels = metric_labels("tiny", R"({"cluster": "a\"b", "zone": 3})").value();
    start(o);
    ASSERT_EQ(call("POST", "/v1/completions", R"({"prompt": "abcd", "max_tokens": 3})").status, 200);
    const std::string t = call("GET", "/metrics").body;
    EXPECT_NE(t.find("sglang:prompt_tokens_total{model_name=\"tiny\",cluster=\"a\\\"b\",zone=\"3\"} 4.0"),
              std::string::npos) << t;
    EXPECT_NE(t.find("sglang:e2e_request_latency_seconds_bucket{model_name=\"tiny\",cluster=\"a\\\"b\",zone=\"3\","
                     "le=\"+Inf\"} 1.0"),
              std::string::npos) << t;
    EXPECT_EQ(metric_labels("m", R"({"model_name": "n"})").value(), "model_name=\"n\"");
    EXPECT_FALSE(metric_labels("m", R"({"1x": "a"})").ok());
    EXPECT_FALSE(metric_labels("m", R"({"__x": "a"})").ok());
    EXPECT_FALSE(metric_labels("m", "[1]").ok());
}

// --tokenizer-metrics-allowed-custom-labels: a chat or completion request's header sets them
// (other names dropped); every sample carries each allowed label, "" when not given; a header
// that is not a JSON object counts without labels.
TEST_F(HttpServerTest, CustomMetricLabelsFromTheRequestHeader) {
    server_->stop();
    HttpServerOptions o;
    o.custom_metric_labels = {.header = "x-custom-labels", .allowed = {"team", "tier"}};
    start(o);
    const std::string body = R"({"prompt": "abcd", "max_tokens": 3})";
    TestClient c(server_->port());
    ASSERT_EQ(c.request("POST", "/v1/completions", body, "x-custom-labels: {\"team\": \"a\", \"user\": \"x\"}\r\n")
                  .status,
              200);
    ASSERT_EQ(call("POST", "/v1/completions", body).status, 200);
    TestClient bad(server_->port());
    ASSERT_EQ(bad.request("POST", "/v1/completions", body, "x-custom-labels: not json\r\n").status, 200);
    const std::string t = call("GET", "/metrics").body;
    EXPECT_NE(t.find("sglang:prompt_tokens_total{model_name=\"tiny\",team=\"a\",tier=\"\"} 4.0"), std::string::npos)
        << t;
    EXPECT_NE(t.find("sglang:prompt_tokens_total{model_name=\"tiny\",team=\"\",tier=\"\"} 8.0"), std::string::npos)
        << t;
    EXPECT_NE(t.find("sglang:e2e_request_latency_seconds_count{model_name=\"tiny\",team=\"a\",tier=\"\"} 1.0"),
              std::string::npos)
        << t;
    EXPECT_EQ(t.find("user="), std::string::npos) << "a name not allowed is dropped";
}

// SGLang's generate_buckets and validate_buckets_rule.
TEST(MetricBucketsTest, TokenBucketRules) {
    EXPECT_EQ(token_histogram_buckets("--prompt-tokens-buckets", {}).value().size(), 35u);
    EXPECT_EQ(token_histogram_buckets("--prompt-tokens-buckets", {"tse", "1000", "2", "8"}).value(),
              (std::vector<double>{984, 992, 996, 998, 1000, 1002, 1004, 1008, 1016}));
    EXPECT_EQ(token_histogram_buckets("--prompt-tokens-buckets", {"custom", "500", "10", "50"}).value(),
              (std::vector<double>{10, 50, 500}));
    const auto message = [](std::vector<std::string> rule) {
        auto got = token_histogram_buckets("--generation-tokens-buckets", rule);
        return got.ok() ? std::string("ok") : got.status().message();
    };
    EXPECT_EQ(message({"linear"}), "Unsupported --generation-tokens-buckets rule type: 'linear'. Must be one of: "
                                   "'tse', 'default', 'custom'");
    EXPECT_EQ(message({"tse", "1000", "2"}), "--generation-tokens-buckets TSE rule requires exactly 4 parameters: "
                                             "['tse', middle, base, count], got 3");
    EXPECT_EQ(message({"tse", "1000", "1", "4"}), "--generation-tokens-buckets TSE base must be larger than 1, got: 1");
    EXPECT_EQ(message({"custom", "5", "5"}),
              "--generation-tokens-buckets custom rule bucket values should not contain duplicates");
    EXPECT_EQ(message({"custom", "x"}), "--generation-tokens-buckets custom rule bucket values must be numeric");
    EXPECT_EQ(message({"default", "3"}),
              "--generation-tokens-buckets default rule should only have one parameter: ['default'], got 2");
    EXPECT_FALSE(check_latency_buckets("--bucket-inter-token-latency", {0.1, 0.05}).ok());
    EXPECT_TRUE(check_latency_buckets("--bucket-inter-token-latency", {0.05, 0.1}).ok());
}

TEST_F(HttpServerTest, GracefulStopFinishesStreams) {
    TestClient c(server_->port());
    ASSERT_TRUE(c.send_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 50, "stream": true})"));
    ASSERT_TRUE(c.read_until("data: ", 2));
    std::thread stopper([&] { server_->stop(); });
    HttpResponse r = c.read_response();
    stopper.join();
    ASSERT_EQ(r.status, 200);
    auto events = r.events();
    ASSERT_EQ(events.size(), 51u);
    EXPECT_EQ(events.back(), "[DONE]");
    TestClient late(server_->port());
    EXPECT_EQ(late.request("GET", "/health").status, 0);  // no longer listening
    server_.reset();
}

}  // namespace
}  // namespace tessera::server
