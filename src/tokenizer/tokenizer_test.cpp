// tokenizer/tokenizer_test.cpp — the BPE tokenizer against Hugging Face tokenizers.
//
// The expected ids and texts in tests/tokenizer/golden/{qwen3,llama3,deepseek_v3}.json come
// from an independent implementation: the npm package `tokenizers` (HF's Rust library)
// loading the same tokenizer.json files (plus, for DeepSeek V3, the BOS that transformers
// adds; see generate.js). To regenerate after changing the cases:
//   cd tests/tokenizer/golden && npm ci && node generate.js
// (see tests/tokenizer/golden/README.md).

#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace tessera::tokenizer {
namespace {

using testing::golden;
using testing::ids_to_string;
using testing::real_tokenizer;

class RealTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
    const Tokenizer& tok() const { return real_tokenizer(GetParam()); }
    const testing::Golden& gold() const { return golden(GetParam()); }
};

TEST_P(RealTokenizerTest, HasEnoughGoldenCases) {
    EXPECT_GE(gold().cases.size(), 60u);
}

TEST_P(RealTokenizerTest, EncodeMatchesReference) {
    for (const auto& c : gold().cases) {
        SCOPED_TRACE(c.label);
        EXPECT_EQ(ids_to_string(tok().encode(c.text, false)), ids_to_string(c.ids));
    }
}

TEST_P(RealTokenizerTest, EncodeWithSpecialTokensMatchesReference) {
    for (const auto& c : gold().cases) {
        SCOPED_TRACE(c.label);
        EXPECT_EQ(ids_to_string(tok().encode(c.text, true)), ids_to_string(c.ids_with_special));
    }
}

TEST_P(RealTokenizerTest, DecodeMatchesReference) {
    for (const auto& c : gold().cases) {
        SCOPED_TRACE(c.label);
        EXPECT_EQ(tok().decode(c.ids_with_special, false), c.decoded);
        EXPECT_EQ(tok().decode(c.ids_with_special, true), c.decoded_skip_special);
        EXPECT_EQ(tok().decode(c.ids, false), c.decoded_plain);
    }
}

TEST_P(RealTokenizerTest, DecodeOfArbitraryIdsMatchesReference) {
    for (const auto& c : gold().decode_cases) {
        SCOPED_TRACE(ids_to_string(c.ids));
        EXPECT_EQ(tok().decode(c.ids, false), c.decoded);
        EXPECT_EQ(tok().decode(c.ids, true), c.decoded_skip_special);
    }
}

// decode(encode(x)) gives back x, up to invalid bytes (→ U+FFFD), for Qwen NFC, and for
// Mistral the SentencePiece space mark (a "▁" in the text decodes as a space).
TEST_P(RealTokenizerTest, RoundTrip) {
    for (const auto& c : gold().cases) {
        SCOPED_TRACE(c.label);
        const std::string back = tok().decode(tok().encode(c.text, false), false);
        EXPECT_EQ(back, c.decoded_plain);
        if (GetParam() != "qwen3" && GetParam() != "mistral") {
            EXPECT_EQ(back, utf8_replace_invalid(c.text));
        }
    }
}

TEST_P(RealTokenizerTest, VocabSizeMatchesReference) {
    EXPECT_EQ(tok().vocab_size(), gold().vocab_size);
}

// Complexity guard: a 100 kB run of one character is a single huge piece (or 100k tiny
// ones); a quadratic merge loop or pre-tokenizer would take minutes.
TEST_P(RealTokenizerTest, LongRepeatedCharacterIsFast) {
    for (const std::string unit : {"a", " ", "1", "\n", "!", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80"}) {
        std::string text;
        while (text.size() < 100'000) text += unit;
        const auto start = std::chrono::steady_clock::now();
        const auto ids = tok().encode(text, false);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        SCOPED_TRACE(testing::printable(unit));
        // A complexity guard, not a timing: quadratic merging takes minutes here; 5 s leaves room
        // for a loaded 2-core CI machine.
        EXPECT_LT(seconds, 5.0);
        EXPECT_FALSE(ids.empty());
        EXPECT_EQ(tok().decode(ids, false), text);
    }
}

TEST_P(RealTokenizerTest, ConcurrentEncodeIsConsistent) {
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < 3; ++round) {
                for (const auto& c : gold().cases) {
                    if (tok().encode(c.text, false) != c.ids) ++mismatches[t];
                }
            }
        });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizerTest,
                         ::testing::Values("qwen3", "llama3", "deepseek_v3", "gpt2_style", "mistral"),
                         [](const auto& info) { return info.param; });

TEST(Qwen3Tokenizer, SpecialTokensAndConfig) {
    const Tokenizer& tok = real_tokenizer("qwen3");
    EXPECT_EQ(tok.vocab_size(), 151669);
    EXPECT_FALSE(tok.bos_token_id().has_value());
    EXPECT_EQ(tok.bos_token(), "");
    EXPECT_EQ(tok.eos_token(), "<|im_end|>");
    EXPECT_EQ(tok.eos_token_ids(), std::vector<std::int32_t>{151645});
    EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
    EXPECT_EQ(tok.token_to_id("<think>"), 151667);
    EXPECT_EQ(tok.token_to_id("\xC4\xA0\xC4\xA0"), 256);  // "ĠĠ": the first merge
    EXPECT_FALSE(tok.token_to_id("no such token").has_value());
    EXPECT_TRUE(tok.is_special(151643));
    EXPECT_FALSE(tok.is_special(151667));  // <think> is added but not special
    EXPECT_EQ(tok.token_bytes(151644), "<|im_start|>");
    EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(Llama3Tokenizer, SpecialTokensAndConfig) {
    const Tokenizer& tok = real_tokenizer("llama3");
    EXPECT_EQ(tok.vocab_size(), 128256);
    EXPECT_EQ(tok.bos_token_id(), 128000);
    EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
    EXPECT_EQ(tok.eos_token(), "<|eot_id|>");
    EXPECT_EQ(tok.eos_token_ids(), std::vector<std::int32_t>{128009});
    EXPECT_EQ(tok.encode("", true), std::vector<std::int32_t>{128000});
    EXPECT_TRUE(tok.is_special(128255));
    EXPECT_EQ(tok.token_bytes(220), " ");
    EXPECT_NE(tok.chat_template().find("<|start_header_id|>"), std::string::npos);
}

TEST(DeepSeekV3Tokenizer, SpecialTokensAndConfig) {
    const Tokenizer& tok = real_tokenizer("deepseek_v3");
    const std::string bos = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
    const std::string eos = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";
    EXPECT_EQ(tok.vocab_size(), 128815);
    EXPECT_EQ(tok.bos_token_id(), 0);
    EXPECT_EQ(tok.bos_token(), bos);
    EXPECT_EQ(tok.eos_token(), eos);
    EXPECT_EQ(tok.eos_token_ids(), std::vector<std::int32_t>{1});
    // add_bos_token (LlamaTokenizerFast): the BOS comes from tokenizer_config.json, as in
    // transformers, although tokenizer.json's post-processor adds none.
    EXPECT_EQ(tok.encode("", true), std::vector<std::int32_t>{0});
    EXPECT_EQ(tok.encode("", false), std::vector<std::int32_t>{});
    EXPECT_EQ(tok.encode(bos + "Hi", true), (std::vector<std::int32_t>{0, 0, 23166}));
    EXPECT_EQ(tok.token_to_id("<\uFF5CUser\uFF5C>"), 128803);
    EXPECT_EQ(tok.token_to_id("<|EOT|>"), 128805);
    EXPECT_TRUE(tok.is_special(0));
    EXPECT_TRUE(tok.is_special(128799));
    EXPECT_FALSE(tok.is_special(128803));  // <｜User｜> is added but not special
    EXPECT_EQ(tok.token_bytes(1), eos);
    EXPECT_EQ(tok.decode(std::vector<std::int32_t>{0, 23166, 1}, true), "Hi");
    EXPECT_NE(tok.chat_template().find("bos_token"), std::string::npos);
    EXPECT_NE(tok.chat_template().find("<\uFF5CAssistant\uFF5C>"), std::string::npos);
}

// The three DeepSeek V3 Split steps on their own: each later step splits every piece of the
// one before, and text that no match covers stays a piece. Expected pieces: HF tokenizers'
// pre_tokenize_str with the real tokenizer.json.
TEST(PreTokenizer, DeepSeekV3StepsSplitThePiecesOfEachOther) {
    const PreTokenizer pre(std::vector<SplitPattern>{
        SplitPattern::kDigitGroups, SplitPattern::kCjkKana, SplitPattern::kDeepSeekV3});
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"Hello \u4F60\u597D 12345", {"Hello", " ", "\u4F60\u597D", " ", "123", "45"}},
        {"a1234567b", {"a", "123", "456", "7", "b"}},
        {".Hello ..Hello #define", {".Hello", " ..", "Hello", " #", "define"}},
        {"x\u200Dy", {"x", "\u200Dy"}},
        {"\u30C6\u30B9\u30C8\u30FB\u30C6\u30B9\u30C8",
         {"\u30C6\u30B9\u30C8", "\u30FB", "\u30C6\u30B9\u30C8"}},
        {"e\u0301 \u0301a", {"e\u0301", " \u0301a"}},
        {"end.\n\nNext", {"end", ".\n\n", "Next"}},
        {"  hi\t!", {" ", " hi", "\t", "!"}},
        {"\u20AC100 \u00A92024", {"\u20AC", "100", " \u00A9", "202", "4"}},
    };
    for (const auto& [text, expected] : cases) {
        SCOPED_TRACE(testing::printable(text));
        std::vector<std::string_view> pieces;
        pre.split(text, pieces);
        EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), expected);
    }
}

// ---- A synthetic tokenizer for loader behaviour: 256 byte tokens, a few merges.

class TinyTokenizerDir {
 public:
    explicit TinyTokenizerDir(const std::string& name) {
        dir_ = std::filesystem::path(::testing::TempDir()) / ("tsr_tok_" + name);
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    ~TinyTokenizerDir() { std::filesystem::remove_all(dir_); }

    void write(const std::string& file, const nlohmann::json& doc) const {
        std::ofstream(dir_ / file) << doc.dump();
    }
    std::string path() const { return dir_.string(); }

 private:
    std::filesystem::path dir_;
};

constexpr const char* kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Byte-level text of one byte (the GPT-2 alphabet), built independently of byte_level.cpp.
std::string byte_char(int b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int cp = b;
    if (!printable) {
        int k = 0;
        for (int x = 0; x < b; ++x) {
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++k;
        }
        cp = 256 + k;
    }
    std::string s;
    append_utf8(static_cast<char32_t>(cp), s);
    return s;
}

nlohmann::json tiny_tokenizer_json(bool string_merges, const std::string& regex = kQwenRegex) {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    vocab["ab"] = 256;
    vocab["abc"] = 257;
    vocab[byte_char(' ') + "abc"] = 258;
    nlohmann::json merges = nlohmann::json::array();
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"a", "b"}, {"ab", "c"}, {byte_char(' '), "abc"}};
    for (const auto& [l, r] : pairs) {
        if (string_merges) {
            merges.push_back(l + " " + r);
        } else {
            merges.push_back(nlohmann::json::array({l, r}));
        }
    }
    nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                 {"trim_offsets", false}, {"use_regex", false}};
    return {
        {"added_tokens",
         nlohmann::json::array({{{"id", 300}, {"content", "<|end|>"}, {"special", true}}})},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           nlohmann::json::array({{{"type", "Split"},
                                   {"pattern", {{"Regex", regex}}},
                                   {"behavior", "Isolated"},
                                   {"invert", false}},
                                  byte_level})}}},
        {"post_processor", byte_level},
        {"decoder", byte_level},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
    };
}

TEST(TinyTokenizer, BothMergeFormatsAndTokenizerJsonAlone) {
    for (const bool string_merges : {true, false}) {
        TinyTokenizerDir dir(string_merges ? "str" : "arr");
        dir.write("tokenizer.json", tiny_tokenizer_json(string_merges));
        auto tok = Tokenizer::load(dir.path());
        ASSERT_TRUE(tok.ok()) << tok.status().message();
        EXPECT_EQ(tok.value()->encode("abc abc<|end|>ab", true),
                  (std::vector<std::int32_t>{257, 258, 300, 256}));
        EXPECT_EQ(tok.value()->vocab_size(), 301);
        EXPECT_TRUE(tok.value()->eos_token_ids().empty());
        EXPECT_FALSE(tok.value()->bos_token_id().has_value());
    }
}

TEST(TinyTokenizer, EosFromAllConfigFilesAndAddBosToken) {
    TinyTokenizerDir dir("eos");
    dir.write("tokenizer.json", tiny_tokenizer_json(true));
    dir.write("tokenizer_config.json", {{"bos_token", {{"content", "a"}}},
                                        {"eos_token", "<|end|>"},
                                        {"add_bos_token", true},
                                        {"chat_template", "{{ x }}"}});
    dir.write("generation_config.json", {{"eos_token_id", {300, 5}}});
    dir.write("config.json", {{"eos_token_id", 7}});
    auto tok = Tokenizer::load(dir.path());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    EXPECT_EQ(tok.value()->eos_token_ids(), (std::vector<std::int32_t>{300, 5, 7}));
    EXPECT_EQ(tok.value()->bos_token_id(), 'a');
    EXPECT_EQ(tok.value()->encode("ab", true), (std::vector<std::int32_t>{'a', 256}));
    EXPECT_EQ(tok.value()->encode("ab", false), (std::vector<std::int32_t>{256}));
    EXPECT_EQ(tok.value()->chat_template(), "{{ x }}");
}

// Named templates from tokenizer_config.json's list and additional_chat_templates/*.jinja;
// chat_template.jinja in the folder is the template, over the config's (as transformers
// loads them).
TEST(TinyTokenizer, ChatTemplateFilesAndNamedTemplates) {
    TinyTokenizerDir dir("templates");
    dir.write("tokenizer.json", tiny_tokenizer_json(true));
    dir.write("tokenizer_config.json",
              {{"chat_template", nlohmann::json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                       {{"name", "default"}, {"template", "D"}}})}});
    auto tok = Tokenizer::load(dir.path());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    EXPECT_EQ(tok.value()->chat_template(), "D");
    EXPECT_EQ(tok.value()->named_chat_templates(),
              (std::map<std::string, std::string>{{"default", "D"}, {"tool_use", "T"}}));

    std::filesystem::create_directories(std::filesystem::path(dir.path()) / "additional_chat_templates");
    std::ofstream(std::filesystem::path(dir.path()) / "additional_chat_templates" / "rag.jinja") << "R";
    std::ofstream(std::filesystem::path(dir.path()) / "chat_template.jinja") << "J";
    tok = Tokenizer::load(dir.path());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    EXPECT_EQ(tok.value()->chat_template(), "J");
    EXPECT_EQ(tok.value()->named_chat_templates(),
              (std::map<std::string, std::string>{{"default", "J"}, {"rag", "R"}, {"tool_use", "T"}}));

    // A list without "default": the first one.
    dir.write("tokenizer_config.json",
              {{"chat_template", nlohmann::json::array({{{"name", "a"}, {"template", "A"}}})}});
    std::filesystem::remove(std::filesystem::path(dir.path()) / "chat_template.jinja");
    tok = Tokenizer::load(dir.path());
    ASSERT_TRUE(tok.ok());
    EXPECT_EQ(tok.value()->chat_template(), "A");
}

TEST(TinyTokenizer, UnknownSplitPatternIsUnimplementedAndNamesIt) {
    TinyTokenizerDir dir("regex");
    dir.write("tokenizer.json", tiny_tokenizer_json(true, R"(\w+|\s+)"));
    auto tok = Tokenizer::load(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(tok.status().message().find(R"(\w+|\s+)"), std::string::npos);
    EXPECT_NE(tok.status().message().find("tokenizer.json"), std::string::npos);
}

TEST(TinyTokenizer, MissingFolderNamesTheFile) {
    auto tok = Tokenizer::load("/nonexistent/tessera/model");
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
    EXPECT_NE(tok.status().message().find("tokenizer.json"), std::string::npos);
}

TEST(TinyTokenizer, MergeWithUnknownTokenIsAnError) {
    TinyTokenizerDir dir("badmerge");
    auto doc = tiny_tokenizer_json(true);
    doc["model"]["merges"].push_back("x yz");
    dir.write("tokenizer.json", doc);
    auto tok = Tokenizer::load(dir.path());
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("merges[3]"), std::string::npos);
}

// ---- UTF-8 replacement policy (the maximal-subpart rule of WHATWG / Python / Rust).

TEST(Utf8, ReplacesMaximalInvalidSubparts) {
    const std::string r(kReplacementChar);
    EXPECT_EQ(utf8_replace_invalid("ok"), "ok");
    EXPECT_EQ(utf8_replace_invalid("\xE2\x82" "a"), r + "a");    // truncated 3-byte: one
    EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), r + r + r);  // surrogate: per byte
    EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98"), r);          // incomplete tail: one
    EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), r + r);          // overlong
    EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), r + r + r + r);
    EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80 caf\xC3\xA9"));
    EXPECT_FALSE(is_valid_utf8("abcdefgh\xFF"));
}

}  // namespace
}  // namespace tessera::tokenizer
