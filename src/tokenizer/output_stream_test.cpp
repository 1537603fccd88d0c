#include "tokenizer/output_stream.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer_test_util.h"

namespace tessera::tokenizer {
namespace {

std::unique_ptr<Tokenizer> qwen3() {
    auto t = Tokenizer::load(std::string(TSR_TOKENIZER_ASSETS) + "/qwen3");
    EXPECT_TRUE(t.ok()) << t.status().message();
    return std::move(t).value();
}

TEST(OutputStreamTest, StopStringEndsTheOutputAndIsNotPartOfIt) {
    auto tok = qwen3();
    const auto ids = tok->encode("The answer is 42. END of story", false);
    OutputStream out(*tok, true, {"END"});
    std::string text;
    std::optional<std::string> matched;
    for (auto id : ids) {
        auto d = out.add(id);
        text += d.text;
        if (d.matched_stop) matched = d.matched_stop;
    }
    text += out.finish();
    EXPECT_EQ(text, "The answer is 42. ");
    EXPECT_EQ(matched, "END");
    EXPECT_TRUE(out.stopped());
}

TEST(OutputStreamTest, HeldBackPrefixIsReleasedWhenItCannotMatch) {
    auto tok = qwen3();
    const auto ids = tok->encode("a b c STOP? no: STOX done 你好", false);
    OutputStream out(*tok, true, {"STOP!"});
    std::string text;
    for (auto id : ids) text += out.add(id).text;
    text += out.finish();
    EXPECT_EQ(text, "a b c STOP? no: STOX done 你好");
    EXPECT_FALSE(out.stopped());
}

TEST(OutputStreamTest, WithoutStopStringsEqualsTheFullDecode) {
    auto tok = qwen3();
    const std::string sample = "Emoji 😀👍🏽 and 中文 and code {\"a\": [1, 2]}\n";
    const auto ids = tok->encode(sample, false);
    OutputStream out(*tok, true, {});
    std::string text;
    for (auto id : ids) text += out.add(id).text;
    text += out.finish();
    EXPECT_EQ(text, tok->decode(ids, true));
}

}  // namespace
}  // namespace tessera::tokenizer
