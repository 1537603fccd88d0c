// --reasoning-parser: SGLang's detect_and_parse and parse_streaming_increment, by format.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::server {
namespace {

ReasoningFormat format(const char* name) {
    auto f = reasoning_format(name);
    EXPECT_TRUE(f.ok()) << f.status().message();
    return f.ok() ? *f : ReasoningFormat{};
}

// The streamed pieces' reasoning and content, each concatenated.
ReasoningParts stream(ReasoningDetector d, const std::vector<std::string>& pieces) {
    ReasoningParts all;
    for (const std::string& p : pieces) {
        ReasoningParts part = d.parse_increment(p);
        all.reasoning += part.reasoning;
        all.normal += part.normal;
    }
    return all;
}

TEST(ReasoningParserTest, WholeOutputs) {
    const ReasoningDetector qwen3(format("qwen3"), false, true);
    ReasoningParts p = qwen3.parse_all("<think>\nLet me add.\n</think>\n\nIt is 4.");
    EXPECT_EQ(p.reasoning, "Let me add.\n");
    EXPECT_EQ(p.normal, "It is 4.");
    p = qwen3.parse_all("It is 4.");  // no think tag, not forced: all content
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.normal, "It is 4.");
    p = qwen3.parse_all("<think>cut off");  // truncated before the end tag: all reasoning
    EXPECT_EQ(p.reasoning, "cut off");
    EXPECT_EQ(p.normal, "");
    // DeepSeek-R1's template opened the block in the prompt: the output starts inside it.
    p = ReasoningDetector(format("deepseek-r1"), false, true).parse_all("Hmm, 2 + 2.</think>4");
    EXPECT_EQ(p.reasoning, "Hmm, 2 + 2.");
    EXPECT_EQ(p.normal, "4");
    // Forced by the request (enable_thinking): the same for qwen3.
    p = ReasoningDetector(format("qwen3"), true, true).parse_all("Hmm.</think> 4");
    EXPECT_EQ(p.reasoning, "Hmm.");
    EXPECT_EQ(p.normal, "4");
    p = ReasoningDetector(format("kimi_k2"), false, true).parse_all("Hmm.</think>4");  // as deepseek-r1
    EXPECT_EQ(p.reasoning, "Hmm.");
    EXPECT_EQ(p.normal, "4");
    p = ReasoningDetector(format("kimi"), false, true).parse_all("\xE2\x97\x81think\xE2\x96\xB7r\xE2\x97\x81/think\xE2\x96\xB7n");
    EXPECT_EQ(p.reasoning, "r");
    EXPECT_EQ(p.normal, "n");
}

TEST(ReasoningParserTest, StreamedPiecesSplitTagsAcrossPieces) {
    const std::vector<std::string> pieces = {"<", "think>", "Let me", " add.", "</th", "ink>", "It is", " 4."};
    ReasoningParts p = stream(ReasoningDetector(format("qwen3"), false, true), pieces);
    EXPECT_EQ(p.reasoning, "Let me add.");
    EXPECT_EQ(p.normal, "It is 4.");
    // Reasoning held back until the end tag when not streamed; the same text in the end.
    ReasoningDetector held(format("qwen3"), false, false);
    EXPECT_EQ(held.parse_increment("<think>a").reasoning, "");
    EXPECT_EQ(held.parse_increment("b").reasoning, "");
    const ReasoningParts last = held.parse_increment("c</think>d");
    EXPECT_EQ(last.reasoning, "abc");
    EXPECT_EQ(last.normal, "d");
    // Not reasoning at all: content as it comes.
    p = stream(ReasoningDetector(format("qwen3"), false, true), {"Hi", " there"});
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.normal, "Hi there");
    p = stream(ReasoningDetector(format("deepseek-r1"), false, true), {"So", "</think>", "Yes"});
    EXPECT_EQ(p.reasoning, "So");
    EXPECT_EQ(p.normal, "Yes");
    // An end tag in pieces that do not start with it; a tail that only looks like one is
    // handed out at the end.
    p = stream(ReasoningDetector(format("qwen3"), false, true), {"<think>Hm</th", "ink>ok"});
    EXPECT_EQ(p.reasoning, "Hm");
    EXPECT_EQ(p.normal, "ok");
    ReasoningDetector cut(format("qwen3"), false, true);
    EXPECT_EQ(cut.parse_increment("<think>Hm</thi").reasoning, "Hm");
    EXPECT_EQ(cut.finish().reasoning, "</thi");
}

// Mistral's [THINK]...[/THINK], only when the model writes it (not forced).
TEST(ReasoningParserTest, MistralThinkMarkers) {
    const ReasoningDetector d(format("mistral"), false, true);
    const ReasoningParts p = d.parse_all("[THINK]plan[/THINK]answer");
    EXPECT_EQ(p.reasoning, "plan");
    EXPECT_EQ(p.normal, "answer");
    EXPECT_EQ(d.parse_all("just an answer").normal, "just an answer");
}

TEST(ReasoningParserTest, NamesAndTemplates) {
    EXPECT_EQ(format("deepseek-v3").request_switch, "thinking");
    EXPECT_EQ(format("qwen3").request_switch, "enable_thinking");
    EXPECT_TRUE(format("qwen3-thinking").always_reasoning);
    EXPECT_TRUE(format("minimax").always_reasoning);  // DetectorMap's forced names
    EXPECT_EQ(format("deepseek-v4").request_switch, "thinking");
    const auto unknown = reasoning_format("gpt-oss");
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.status().message(),
              "--reasoning-parser gpt-oss: tessera parses deepseek-r1, deepseek-v3, deepseek-v4, glm45, interns1, "
              "kimi, kimi_k2, minimax, mistral, qwen3, qwen3-thinking, step3, step3p5 (SGLang's other parsers are not "
              "implemented)");
    EXPECT_TRUE(template_opens_reasoning("{{- '<|im_start|>assistant\\n<think>\\n' }}"));
    EXPECT_FALSE(template_opens_reasoning("{{- '<|im_start|>assistant\\n' }}"));
}

}  // namespace
}  // namespace tessera::server
