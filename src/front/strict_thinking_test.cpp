#include "front/strict_thinking.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::front {
namespace {

bool allowed(const std::vector<std::uint32_t>& mask, std::int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }

// Qwen3's real tokenizer: its excluded markers are single special tokens, all else stays.
TEST(StrictThinkingTest, Qwen3BansItsToolCallAndEndOfTurnTokensOnly) {
    auto tok = tokenizer::Tokenizer::load(std::string(TSR_TOKENIZER_ASSETS) + "/qwen3");
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    const server::ReasoningFormat qwen3 = server::reasoning_format("qwen3").value();
    constexpr std::int64_t kVocab = 151936;
    auto filter = strict_thinking_filter(qwen3, **tok, kVocab);
    ASSERT_TRUE(filter.ok()) << filter.status().message();
    const std::vector<std::uint32_t>& mask = **filter;
    ASSERT_EQ(mask.size(), static_cast<std::size_t>(kVocab / 32));
    int banned = 0;
    for (std::int32_t id = 0; id < kVocab; ++id) banned += allowed(mask, id) ? 0 : 1;
    EXPECT_EQ(banned, 4);
    for (const char* text : {"<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>"}) {
        const std::vector<std::int32_t> ids = (*tok)->encode(text, false);
        ASSERT_EQ(ids.size(), 1u) << text;
        EXPECT_FALSE(allowed(mask, ids[0])) << text;
    }
    EXPECT_TRUE(allowed(mask, (*tok)->encode("</think>", false).at(0))) << "the reasoning must be able to end";
    EXPECT_TRUE(allowed(mask, (*tok)->encode("hello", false).at(0)));
}

TEST(StrictThinkingTest, ParsersWithoutExcludedTokensFilterNothingAndTheEndMustBeOneToken) {
    auto tok = tokenizer::Tokenizer::load(std::string(TSR_TOKENIZER_ASSETS) + "/qwen3");
    ASSERT_TRUE(tok.ok());
    auto none = strict_thinking_filter(server::reasoning_format("deepseek-r1").value(), **tok, 151936);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, nullptr);
    server::ReasoningFormat split = server::reasoning_format("qwen3").value();
    split.think_end = "the end";
    EXPECT_NE(strict_thinking_filter(split, **tok, 151936).status().message().find("must encode to exactly one token"),
              std::string::npos);
    // A vocabulary that is not a multiple of 32: no bit past its end.
    auto odd = strict_thinking_filter(server::reasoning_format("qwen3").value(), **tok, 151669);
    ASSERT_TRUE(odd.ok());
    EXPECT_EQ((*odd)->size(), (151669u + 31) / 32);
    EXPECT_EQ((*odd)->back() >> (151669 % 32), 0u);
}

}  // namespace
}  // namespace tessera::front
