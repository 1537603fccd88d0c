#include "server/embedding_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

ProtocolOptions embedding_server(bool matryoshka = false, std::vector<std::int64_t> dims = {}) {
    ProtocolOptions o{.served_model_name = "tiny", .max_model_len = 4096};
    o.embedding = EmbeddingOptions{.model_path = "/models/tiny", .hidden_size = 4, .is_matryoshka = matryoshka,
                                   .matryoshka_dimensions = std::move(dims)};
    return o;
}

ParseOutcome embeddings(const std::string& body, const ProtocolOptions& o = embedding_server()) {
    return parse_request(ApiKind::kEmbedding, body, o, "embd-1");
}
ParseOutcome encode(const std::string& body, const ProtocolOptions& o = embedding_server()) {
    return parse_request(ApiKind::kEncode, body, o, "enc-1");
}

std::string error_of(const ParseOutcome& o) {
    EXPECT_FALSE(o.ok());
    return o.ok() ? "" : o.error->message;
}

GenerationEvent embedding_event(std::vector<float> v, std::int64_t prompt_tokens) {
    GenerationEvent e;
    e.embedding = std::move(v);
    e.finish_reason = "length";
    e.usage.prompt_tokens = prompt_tokens;
    return e;
}

TEST(EmbeddingProtocolTest, EveryInputShapeBecomesOneRequestPerInput) {
    auto one = embeddings(R"({"model": "tiny", "input": "hello"})");
    ASSERT_TRUE(one.ok()) << one.error->message;
    ASSERT_EQ(one.request.requests.size(), 1u);
    EXPECT_EQ(one.request.requests[0].request_id, "embd-1");
    EXPECT_EQ(one.request.requests[0].input.text, "hello");
    EXPECT_EQ(one.request.requests[0].params.max_new_tokens, 0);

    auto texts = embeddings(R"({"input": ["a", "b", "c"]})");
    ASSERT_TRUE(texts.ok());
    ASSERT_EQ(texts.request.requests.size(), 3u);
    EXPECT_EQ(texts.request.requests[2].request_id, "embd-1-2");
    EXPECT_EQ(texts.request.requests[2].input.text, "c");

    auto ids = embeddings(R"({"input": [5, 6, 7]})");
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(ids.request.requests.size(), 1u);
    EXPECT_EQ(ids.request.requests[0].input.input_ids, (std::vector<std::int32_t>{5, 6, 7}));

    auto lists = embeddings(R"({"input": [[1], [2, 3]]})");
    ASSERT_TRUE(lists.ok());
    ASSERT_EQ(lists.request.requests.size(), 2u);
    EXPECT_EQ(lists.request.requests[1].input.input_ids, (std::vector<std::int32_t>{2, 3}));
}

// serving_embedding.py _validate_request's messages.
TEST(EmbeddingProtocolTest, BadInputsAreRefusedWithSglangsMessages) {
    EXPECT_EQ(error_of(embeddings(R"({"input": ""})")), "Input cannot be empty");
    EXPECT_EQ(error_of(embeddings(R"({"input": []})")), "Input cannot be empty");
    EXPECT_EQ(error_of(embeddings(R"({})")), "Input cannot be empty");
    EXPECT_EQ(error_of(embeddings(R"({"input": "  \n"})")), "Input cannot be empty or whitespace only");
    EXPECT_EQ(error_of(embeddings(R"({"input": ["a", 1]})")), "All items in input list must be strings");
    EXPECT_EQ(error_of(embeddings(R"({"input": ["a", " "]})")), "Input at index 1 cannot be empty or whitespace only");
    EXPECT_EQ(error_of(embeddings(R"({"input": [1, "a"]})")), "All items in input list must be integers");
    EXPECT_NE(error_of(embeddings(R"({"input": [1, -2]})")).find("Token ID at index 1 must be non-negative"),
              std::string::npos);
    EXPECT_NE(error_of(embeddings(R"({"input": [{"text": "a"}]})")).find("multimodal"), std::string::npos);
    EXPECT_NE(error_of(embeddings(R"({"input": "a", "encoding_format": "int8"})")).find("\"float\" or \"base64\""),
              std::string::npos);
    auto wrong_model = embeddings(R"({"model": "other", "input": "a"})");
    ASSERT_FALSE(wrong_model.ok());
    EXPECT_EQ(wrong_model.error->http_status, 404);
}

// A generation server refuses the embedding routes, and an embedding server the generation ones.
TEST(EmbeddingProtocolTest, EachKindOfServerRefusesTheOthersRoutes) {
    const ProtocolOptions generation{.served_model_name = "tiny", .max_model_len = 4096};
    EXPECT_NE(error_of(embeddings(R"({"input": "a"})", generation)).find("Please add `--is-embedding`"),
              std::string::npos);
    EXPECT_NE(error_of(encode(R"({"text": "a"})", generation)).find("--is-embedding"), std::string::npos);
    for (ApiKind kind : {ApiKind::kChatCompletion, ApiKind::kCompletion, ApiKind::kGenerate}) {
        auto o = parse_request(kind, R"({"prompt": "a", "text": "a"})", embedding_server(), "x");
        EXPECT_NE(error_of(o).find("use POST /v1/embeddings or /encode"), std::string::npos);
    }
}

// TokenizerManager._validate_for_matryoshka_dim, in its order.
TEST(EmbeddingProtocolTest, DimensionsFollowTheModelsMatryoshkaSizes) {
    EXPECT_EQ(error_of(embeddings(R"({"input": "a", "dimensions": 2})")),
              "Model '/models/tiny' does not support matryoshka representation, changing output dimensions will "
              "lead to poor results.");
    EXPECT_EQ(error_of(embeddings(R"({"input": "a", "dimensions": 0})", embedding_server(true))),
              "Requested dimensions must be greater than 0");
    EXPECT_EQ(error_of(embeddings(R"({"input": "a", "dimensions": 3})", embedding_server(true, {2, 4}))),
              "Model '/models/tiny' only supports [2, 4] matryoshka dimensions, using other output dimensions will "
              "lead to poor results.");
    EXPECT_EQ(error_of(embeddings(R"({"input": "a", "dimensions": 8})", embedding_server(true))),
              "Provided dimensions are greater than max embedding dimension: 4");
    auto ok = embeddings(R"({"input": "a", "dimensions": 2})", embedding_server(true, {2, 4}));
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok.request.dimensions, 2);
}

TEST(EmbeddingProtocolTest, EmbeddingsBodyListsVectorsInInputOrderWithUsage) {
    auto parsed = embeddings(R"({"input": ["a", "b"]})");
    ASSERT_TRUE(parsed.ok());
    ResponseBuilder b(parsed.request);
    EXPECT_EQ(b.add_event(1, embedding_event({0.0f, 1.0f}, 3)), "");
    EXPECT_FALSE(b.finished());
    b.add_event(0, embedding_event({0.6f, 0.8f}, 2));
    ASSERT_TRUE(b.finished());
    const Json j = Json::parse(b.body());
    EXPECT_EQ(j["object"], "list");
    EXPECT_EQ(j["model"], "/models/tiny");
    ASSERT_EQ(j["data"].size(), 2u);
    EXPECT_EQ(j["data"][0]["object"], "embedding");
    EXPECT_EQ(j["data"][0]["index"], 0);
    EXPECT_FLOAT_EQ(j["data"][0]["embedding"][1].get<float>(), 0.8f);
    EXPECT_EQ(j["data"][1]["index"], 1);
    EXPECT_FLOAT_EQ(j["data"][1]["embedding"][1].get<float>(), 1.0f);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

// dimensions keeps the first entries and scales them to unit length again; base64 is the f32
// bytes (OpenAI's encoding).
TEST(EmbeddingProtocolTest, TruncationRenormalisesAndBase64CarriesTheFloats) {
    auto parsed = embeddings(R"({"input": "a", "dimensions": 2, "encoding_format": "base64"})", embedding_server(true));
    ASSERT_TRUE(parsed.ok());
    ResponseBuilder b(parsed.request);
    b.add_event(0, embedding_event({0.3f, 0.4f, 0.5f, std::sqrt(0.5f)}, 1));
    const std::string encoded = Json::parse(b.body())["data"][0]["embedding"].get<std::string>();
    EXPECT_EQ(encoded.size(), 12u);  // 8 bytes: 12 characters with one '='
    EXPECT_EQ(encoded.back(), '=');
    // Decode by hand: 0.6f and 0.8f.
    std::string bytes;
    std::uint32_t bits = 0;
    int n_bits = 0;
    const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (char ch : encoded) {
        if (ch == '=') break;
        bits = bits << 6 | static_cast<std::uint32_t>(alphabet.find(ch));
        n_bits += 6;
        if (n_bits >= 8) {
            n_bits -= 8;
            bytes += static_cast<char>((bits >> n_bits) & 0xff);
        }
    }
    ASSERT_EQ(bytes.size(), 8u);
    float values[2];
    std::memcpy(values, bytes.data(), 8);
    EXPECT_NEAR(values[0], 0.6f, 1e-6f);
    EXPECT_NEAR(values[1], 0.8f, 1e-6f);
}

// SGLang's /encode: text or input_ids, one object per input, a list when the input was one.
TEST(EmbeddingProtocolTest, EncodeAnswersAnObjectOrAList) {
    EXPECT_EQ(error_of(encode(R"({})")), "At least one of text, input_ids, or image should be provided");
    EXPECT_EQ(error_of(encode(R"({"text": "a", "input_ids": [1]})")),
              "text and input_ids cannot be provided at the same time");
    EXPECT_NE(error_of(encode(R"({"text": "a", "image_data": "x.png"})")).find("not supported"), std::string::npos);

    auto single = encode(R"({"text": "a", "rid": "mine"})");
    ASSERT_TRUE(single.ok());
    EXPECT_EQ(single.request.requests[0].request_id, "mine");
    ResponseBuilder b(single.request);
    b.add_event(0, embedding_event({1.0f, 0.0f}, 4));
    const Json j = Json::parse(b.body());
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["embedding"], Json::array({1.0, 0.0}));
    EXPECT_EQ(j["meta_info"]["id"], "mine");
    EXPECT_EQ(j["meta_info"]["prompt_tokens"], 4);
    EXPECT_EQ(j["meta_info"]["finish_reason"], Json({{"type", "length"}, {"length", 0}}));

    auto batch = encode(R"({"input_ids": [[1, 2]]})");
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(batch.request.requests[0].request_id, "enc-1-0");
    ResponseBuilder bb(batch.request);
    bb.add_event(0, embedding_event({1.0f}, 2));
    const Json list = Json::parse(bb.body());
    ASSERT_TRUE(list.is_array());
    EXPECT_EQ(list.size(), 1u);
}

}  // namespace
}  // namespace tessera::server
