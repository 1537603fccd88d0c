#include "gateway/http_wire.h"

#include <gtest/gtest.h>

#include "gateway/request_text.h"

namespace tessera::gateway {
namespace {

TEST(HttpWireTest, ParsesARequestHead) {
    auto h = parse_request_head("POST /add_worker?url=http%3A%2F%2F127.0.0.1%3A8000&x=1 HTTP/1.1\r\n"
                                "Host: localhost\r\nContent-Length: 12\r\nAuthorization:  Bearer k \r\n");
    ASSERT_TRUE(h.ok()) << h.status().message();
    EXPECT_EQ(h->method, "POST");
    EXPECT_EQ(h->path, "/add_worker");
    EXPECT_EQ(query_param(h->query, "url"), "http://127.0.0.1:8000");
    EXPECT_EQ(query_param(h->query, "x"), "1");
    EXPECT_EQ(query_param(h->query, "y"), "");
    EXPECT_EQ(h->content_length, 12);
    EXPECT_EQ(h->header("authorization"), "Bearer k");
    EXPECT_TRUE(h->keep_alive);
    EXPECT_FALSE(parse_request_head("GET /x HTTP/1.0\r\n")->keep_alive);
    EXPECT_FALSE(parse_request_head("GET /x HTTP/1.1\r\nConnection: close\r\n")->keep_alive);
}

TEST(HttpWireTest, RefusesWhatItCannotServe) {
    EXPECT_FALSE(parse_request_head("GARBAGE").ok());
    EXPECT_FALSE(parse_request_head("GET x HTTP/1.1").ok());
    EXPECT_FALSE(parse_request_head("GET /x HTTP/2\r\n").ok());
    EXPECT_FALSE(parse_request_head("POST /x HTTP/1.1\r\nContent-Length: -1\r\n").ok());
    EXPECT_FALSE(parse_request_head("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n").ok());
    EXPECT_FALSE(parse_request_head("GET /x HTTP/1.1\r\nno colon here\r\n").ok());
}

TEST(HttpWireTest, FormatsResponsesAndChunks) {
    const std::string r = response_bytes(404, "application/json", "{}", {{"Retry-After", "1"}}, false);
    EXPECT_EQ(r, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                 "Retry-After: 1\r\nConnection: close\r\n\r\n{}");
    EXPECT_EQ(chunk_bytes("hello"), "5\r\nhello\r\n");
    EXPECT_EQ(chunk_bytes(std::string(26, 'a')).substr(0, 4), "1a\r\n");
    EXPECT_EQ(chunk_bytes(""), "") << "an empty chunk would end the stream";
}

TEST(RequestTextTest, RoutesByTheTextEachApiCarries) {
    EXPECT_EQ(read_request("/generate", R"({"text": "abc", "stream": true})").text, "abc");
    EXPECT_TRUE(read_request("/generate", R"({"text": "abc", "stream": true})").stream);
    EXPECT_EQ(read_request("/generate", R"({"input_ids": [1, 22, 3]})").text, "1,22,3,");
    EXPECT_EQ(read_request("/v1/completions", R"({"prompt": ["first", "second"]})").text, "first");
    EXPECT_EQ(read_request("/v1/chat/completions",
                           R"({"messages": [{"role": "system", "content": "sys. "},
                                            {"role": "user", "content": [{"type": "text", "text": "hi"}]}]})")
                  .text,
              "sys. hi");
    EXPECT_EQ(read_request("/generate", R"({"text": "x", "data_parallel_rank": 1})").data_parallel_rank.value_or(-1), 1);
    EXPECT_EQ(read_request("/generate", "not json").text, "");
    EXPECT_FALSE(read_request("/generate", "not json").stream);
}

}  // namespace
}  // namespace tessera::gateway
