// tokenizer/incremental_detokenizer_test.cpp — streaming decode equals full decode for every
// golden case (see tokenizer_test.cpp for where the goldens come from), and no chunk ever
// holds a broken UTF-8 sequence.

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

using testing::golden;
using testing::ids_to_string;
using testing::real_tokenizer;

// Streams `ids` and checks each chunk; returns the concatenation.
std::string stream(const Tokenizer& tok, const std::vector<std::int32_t>& ids, bool skip) {
    IncrementalDetokenizer detok(tok, skip);
    std::string all;
    for (const std::int32_t id : ids) {
        const std::string chunk = detok.add(id);
        EXPECT_TRUE(is_valid_utf8(chunk)) << "broken UTF-8 after id " << id;
        all += chunk;
    }
    const std::string tail = detok.flush();
    EXPECT_TRUE(is_valid_utf8(tail));
    return all + tail;
}

class StreamingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingTest, ConcatenationEqualsFullDecode) {
    const Tokenizer& tok = real_tokenizer(GetParam());
    for (const bool skip : {false, true}) {
        for (const auto& c : golden(GetParam()).cases) {
            SCOPED_TRACE(c.label + (skip ? " skip_special" : ""));
            EXPECT_EQ(stream(tok, c.ids_with_special, skip), tok.decode(c.ids_with_special, skip));
            EXPECT_EQ(stream(tok, c.ids_with_special, skip),
                      skip ? c.decoded_skip_special : c.decoded);
        }
        for (const auto& c : golden(GetParam()).decode_cases) {
            SCOPED_TRACE(ids_to_string(c.ids) + (skip ? " skip_special" : ""));
            EXPECT_EQ(stream(tok, c.ids, skip), skip ? c.decoded_skip_special : c.decoded);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, StreamingTest,
                         ::testing::Values("qwen3", "llama3", "deepseek_v3", "gpt2_style", "mistral"),
                         [](const auto& info) { return info.param; });

TEST(IncrementalDetokenizer, HoldsBackASplitCharacterUntilComplete) {
    const Tokenizer& tok = real_tokenizer("llama3");
    const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999, three byte tokens in Llama 3
    const auto ids = tok.encode("a" + llama + "b", false);
    ASSERT_EQ(ids.size(), 5u);
    IncrementalDetokenizer detok(tok, false);
    EXPECT_EQ(detok.add(ids[0]), "a");
    EXPECT_EQ(detok.add(ids[1]), "");
    EXPECT_EQ(detok.add(ids[2]), "");
    EXPECT_EQ(detok.add(ids[3]), llama);
    EXPECT_EQ(detok.add(ids[4]), "b");
    EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizer, FlushReplacesAnUnfinishedCharacter) {
    const Tokenizer& tok = real_tokenizer("llama3");
    const auto ids = tok.encode("\xF0\x9F\xA6\x99", false);
    IncrementalDetokenizer detok(tok, false);
    EXPECT_EQ(detok.add(ids[0]), "");
    EXPECT_EQ(detok.flush(), std::string(kReplacementChar));
    EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensWithoutBreakingCharacters) {
    const Tokenizer& tok = real_tokenizer("qwen3");
    IncrementalDetokenizer detok(tok, true);
    EXPECT_EQ(detok.add(151644), "");  // <|im_start|>
    EXPECT_EQ(detok.add(151667), "<think>");  // added but not special: kept
    EXPECT_EQ(detok.flush(), "");
}

}  // namespace
}  // namespace tessera::tokenizer
