// The grammar backend over the real tokenizers of four model families: random walks through
// the masks (a seeded choice among the allowed tokens each step) must decode, with the
// tokenizer's own decode(), to text that matches the pattern, checked by an independent
// matcher (std::regex, or parsing the JSON). This holds only if every token's bytes as the
// grammar sees them are what the detokenizer prints: byte-level BPE (Qwen3, Llama 3,
// DeepSeek-V3) and SentencePiece with byte fallback (Mistral).

#include "front/grammar_compiler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

namespace tessera::front {
namespace {

struct Walk {
    std::vector<std::int32_t> ids;  // without the stop token
    bool stopped = false;
};

constexpr std::int32_t kStop = -7;  // a stand-in stop token outside the vocabulary

// Picks allowed tokens at random until the stop token is picked (or `max_tokens`). Stops are
// taken with probability 1/3 when allowed, so walks also run past points where they could end.
Walk random_walk(scheduler::TokenConstraint& c, const std::vector<std::int32_t>& stops, std::uint64_t seed,
                 int max_tokens) {
    std::mt19937_64 rng(seed);
    Walk walk;
    for (int step = 0; step < max_tokens; ++step) {
        auto mask = c.allowed_tokens();
        EXPECT_TRUE(mask.ok()) << mask.status().to_string();
        if (!mask.ok()) break;
        std::vector<std::int32_t> allowed;
        bool stop_allowed = false;
        for (std::size_t w = 0; w < mask.value()->size(); ++w) {
            for (std::uint32_t bits = (*mask.value())[w]; bits != 0; bits &= bits - 1) {
                const auto t = static_cast<std::int32_t>(w * 32 + static_cast<std::size_t>(__builtin_ctz(bits)));
                if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
                    stop_allowed = true;
                } else {
                    allowed.push_back(t);
                }
            }
        }
        if (stop_allowed && (allowed.empty() || rng() % 3 == 0)) {
            EXPECT_TRUE(c.accept(stops.front()));
            EXPECT_TRUE(c.terminated());
            walk.stopped = true;
            break;
        }
        EXPECT_FALSE(allowed.empty());
        if (allowed.empty()) break;
        const std::int32_t t = allowed[rng() % allowed.size()];
        EXPECT_TRUE(c.accept(t));
        walk.ids.push_back(t);
    }
    return walk;
}

class GrammarCompilerTest : public ::testing::TestWithParam<const char*> {
 protected:
    void SetUp() override {
        auto tok = tokenizer::Tokenizer::load(std::string(TSR_TOKENIZER_ASSETS) + "/" + GetParam());
        ASSERT_TRUE(tok.ok()) << tok.status().to_string();
        tokenizer_ = std::move(tok.value());
        stops_ = tokenizer_->eos_token_ids();
        ASSERT_FALSE(stops_.empty());
    }
    std::shared_ptr<scheduler::TokenConstraint> make(server::OutputConstraint::Kind kind, std::string text,
                                                     grammar::JsonWhitespace ws = {}) {
        if (!compiler_ || ws.mode != ws_.mode) {
            compiler_ = std::make_unique<GrammarCompiler>(*tokenizer_, ws);
            ws_ = ws;
        }
        auto c = compiler_->constraint({kind, std::move(text)}, stops_);
        EXPECT_TRUE(c.ok()) << c.status().to_string();
        return c.ok() ? c.value() : nullptr;
    }
    std::string decode(const Walk& w) const { return tokenizer_->decode(w.ids, /*skip_special_tokens=*/true); }

    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
    std::unique_ptr<GrammarCompiler> compiler_;
    grammar::JsonWhitespace ws_;
    std::vector<std::int32_t> stops_;
};

TEST_P(GrammarCompilerTest, RegexWalksDecodeToMatches) {
    const std::pair<const char*, const char*> patterns[] = {
        {R"(\d{3}-\d{4})", R"([0-9]{3}-[0-9]{4})"},
        {R"((yes|no|maybe)\.)", R"((yes|no|maybe)\.)"},
        {R"([A-Z][a-z]{0,8}( [A-Z][a-z]{0,8}){0,2})", R"([A-Z][a-z]{0,8}( [A-Z][a-z]{0,8}){0,2})"},
        {R"(\[(\d{1,4}(, \d{1,4}){0,3})?\])", R"(\[([0-9]{1,4}(, [0-9]{1,4}){0,3})?\])"},
    };
    for (const auto& [pattern, ecma] : patterns) {
        for (std::uint64_t seed = 0; seed < 8; ++seed) {
            auto c = make(server::OutputConstraint::Kind::kRegex, pattern);
            ASSERT_TRUE(c);
            const Walk w = random_walk(*c, stops_, seed, 64);
            const std::string text = decode(w);
            EXPECT_TRUE(w.stopped) << pattern << " seed " << seed << ": " << text;
            EXPECT_TRUE(std::regex_match(text, std::regex(ecma)))
                << pattern << " seed " << seed << ": '" << text << "'";
        }
    }
}

TEST_P(GrammarCompilerTest, NonAsciiTextSurvivesTokensThatSplitCharacters) {
    for (std::uint64_t seed = 0; seed < 8; ++seed) {
        auto c = make(server::OutputConstraint::Kind::kRegex, "(日本語|привет|é){1,3}");
        ASSERT_TRUE(c);
        const Walk w = random_walk(*c, stops_, seed, 64);
        const std::string text = decode(w);
        EXPECT_TRUE(w.stopped) << text;
        // A whole number of the three words, each whole.
        std::string rest = text;
        int words = 0;
        while (!rest.empty()) {
            bool found = false;
            for (const std::string word : {"日本語", "привет", "é"}) {
                if (rest.starts_with(word)) {
                    rest.erase(0, word.size());
                    found = true;
                    break;
                }
            }
            ASSERT_TRUE(found) << "'" << text << "'";
            ++words;
        }
        EXPECT_GE(words, 1);
        EXPECT_LE(words, 3);
    }
}

TEST_P(GrammarCompilerTest, JsonSchemaWalksParseAndFitTheSchema) {
    const std::string schema = R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "ok": {"type": "boolean"}}, "required": ["name", "age"]})";
    for (const bool compact : {true, false}) {
        grammar::JsonWhitespace ws;
        if (compact) ws.mode = grammar::JsonWhitespace::Mode::kCompact;
        if (!compact) ws = {.mode = grammar::JsonWhitespace::Mode::kPattern, .pattern = "[ ]?"};
        for (std::uint64_t seed = 0; seed < 8; ++seed) {
            auto c = make(server::OutputConstraint::Kind::kJsonSchema, schema, ws);
            ASSERT_TRUE(c);
            const Walk w = random_walk(*c, stops_, seed, 200);
            const std::string text = decode(w);
            if (!w.stopped) continue;  // a long string ran out of steps; the prefix is checked elsewhere
            // "age" is an integer of any length: checked here, then replaced by 0 for the JSON parser,
            // which refuses numbers beyond a double's range.
            const std::regex age(R"(("age" ?: ?)-?(0|[1-9][0-9]*)( ?[,}]))");
            EXPECT_TRUE(std::regex_search(text, age)) << text;
            const auto j = nlohmann::json::parse(std::regex_replace(text, age, "$010$3"), nullptr, false);
            ASSERT_FALSE(j.is_discarded()) << "'" << text << "'";
            ASSERT_TRUE(j.is_object()) << text;
            ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
            EXPECT_LE(j["name"].get<std::string>().size(), 6u * 4) << text;  // 6 characters of up to 4 bytes
            EXPECT_EQ(j.value("age", -1), 0) << text;
            if (j.contains("tags")) {
                ASSERT_TRUE(j["tags"].is_array()) << text;
                EXPECT_LE(j["tags"].size(), 2u) << text;
                for (const auto& t : j["tags"]) EXPECT_TRUE(t == "a" || t == "b") << text;
            }
            if (j.contains("ok")) {
                EXPECT_TRUE(j["ok"].is_boolean()) << text;
            }
            for (const auto& [key, unused] : j.items())
                EXPECT_TRUE(key == "name" || key == "age" || key == "tags" || key == "ok") << text;
            // Compact output is what json.dumps writes: ", " and ": " and no other whitespace.
            if (compact) {
                std::string expect;
                bool in_string = false;
                for (std::size_t i = 0; i < text.size(); ++i) {
                    if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) in_string = !in_string;
                    if (!in_string && (text[i] == ' ' || text[i] == '\n')) {
                        EXPECT_TRUE(i > 0 && (text[i - 1] == ',' || text[i - 1] == ':') && text[i] == ' ') << text;
                    }
                }
            }
        }
    }
}

TEST_P(GrammarCompilerTest, SpecialTokensAreNeverAllowed) {
    auto c = make(server::OutputConstraint::Kind::kRegex, "[^\\n]{1,5}");
    ASSERT_TRUE(c);
    auto mask = c->allowed_tokens();
    ASSERT_TRUE(mask.ok());
    for (std::int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
        if (!tokenizer_->is_special(id)) continue;
        EXPECT_FALSE(((*mask.value())[static_cast<std::size_t>(id) >> 5] >> (id & 31)) & 1u) << id;
    }
}

// Mistral's detokenizer drops the output's first space: a first token "▁1" prints "1", so the
// grammar offers it where a digit must come (and walks above decode to matches with it).
TEST_P(GrammarCompilerTest, TheFirstTokenMayCarryTheSpaceTheDecoderDrops) {
    auto c = make(server::OutputConstraint::Kind::kRegex, R"(\d{1,3})");
    ASSERT_TRUE(c);
    auto mask = c->allowed_tokens();
    ASSERT_TRUE(mask.ok());
    int with_space = 0;
    for (std::int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
        if (((*mask.value())[static_cast<std::size_t>(id) >> 5] >> (id & 31)) & 1u)
            with_space += tokenizer_->token_bytes(id).starts_with(' ') ? 1 : 0;
    }
    if (tokenizer_->leading_spaces_stripped() > 0) {
        EXPECT_GT(with_space, 0);
    } else {
        EXPECT_EQ(with_space, 0);
    }
}

TEST_P(GrammarCompilerTest, BadPatternsAreInvalidArguments) {
    GrammarCompiler compiler(*tokenizer_, {});
    auto bad_regex = compiler.constraint({server::OutputConstraint::Kind::kRegex, "(a"}, stops_);
    ASSERT_FALSE(bad_regex.ok());
    EXPECT_EQ(bad_regex.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad_regex.status().message().find("regex: invalid regex"), std::string::npos);
    auto bad_schema = compiler.constraint({server::OutputConstraint::Kind::kJsonSchema, R"({"minimum": 3})"}, stops_);
    ASSERT_FALSE(bad_schema.ok());
    EXPECT_EQ(bad_schema.status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GrammarCompilerTest,
                         ::testing::Values("qwen3", "llama3", "deepseek_v3", "mistral"));

}  // namespace
}  // namespace tessera::front
