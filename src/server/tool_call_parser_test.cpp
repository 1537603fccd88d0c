// --tool-call-parser: SGLang's qwen25, deepseekv3, deepseekv31, kimi_k2, llama3, mistral and pythonic
// formats, whole and streamed.
#include "server/tool_call_parser.h"
#include "server/partial_json.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::server {
namespace {

std::string strip_copy(std::string_view text) {
    const std::size_t b = text.find_first_not_of(" \n");
    if (b == std::string_view::npos) return std::string();
    return std::string(text.substr(b, text.find_last_not_of(" \n") + 1 - b));
}

ToolCallDetector detector(const char* name, std::vector<std::string> tools = {"get_weather", "add"}) {
    return ToolCallDetector(tool_call_format(name).value(), std::move(tools));
}

const std::string kQwen =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";

TEST(ToolCallParserTest, Qwen25WholeOutput) {
    const ToolCallParts p = detector("qwen25").parse_all(kQwen);
    EXPECT_EQ(p.normal, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(p.calls[1].arguments, R"({"a":1,"b":2})");
    // A function the request did not offer, and broken JSON, are dropped; plain text stays.
    EXPECT_TRUE(detector("qwen25", {"add"}).parse_all(kQwen).calls.size() == 1);
    EXPECT_TRUE(detector("qwen25").parse_all("<tool_call>\n{\"name\": \n</tool_call>").calls.empty());
    EXPECT_EQ(detector("qwen25").parse_all("no calls").normal, "no calls");
}

// A model can be made to write arguments nested past any stack: such a call is dropped as
// broken JSON, whole and streamed, instead of being read (and written again) level by level.
TEST(ToolCallParserTest, ArgumentsNestedTooDeepAreDroppedNotRecursedInto) {
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    const std::string output = "<tool_call>\n{\"name\": \"add\", \"arguments\": " + deep + "}\n</tool_call>";
    EXPECT_TRUE(detector("qwen25").parse_all(output).calls.empty());
    ToolCallDetector streamed = detector("qwen25");
    std::vector<ToolCallDelta> deltas;
    for (std::size_t at = 0; at < output.size(); at += 4096) {
        const ToolCallParts step = streamed.parse_increment(std::string_view(output).substr(at, 4096));
        deltas.insert(deltas.end(), step.deltas.begin(), step.deltas.end());
    }
    for (const ToolCallDelta& d : deltas) EXPECT_LT(d.arguments.size(), 1000u);
    const std::string shallow = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": [[[1]]]}}\n</tool_call>";
    ASSERT_EQ(detector("qwen25").parse_all(shallow).calls.size(), 1u);
    // Python literals, read by tessera's own recursive reader.
    EXPECT_TRUE(detector("pythonic").parse_all("[add(a=" + deep + ")]").calls.empty());
    EXPECT_EQ(detector("pythonic").parse_all("[add(a=[[(1,)]])]").calls.size(), 1u);
}

// The calls a stream's deltas add up to: a name opens a call, arguments join the call at their index.
void join(std::vector<ToolCallDelta>& deltas, std::vector<ParsedToolCall>& calls) {
    for (ToolCallDelta& d : deltas) {
        if (!d.name.empty()) {
            ASSERT_EQ(static_cast<std::size_t>(d.index), calls.size()) << "calls open in order";
            calls.push_back({std::move(d.name), ""});
        }
        ASSERT_LT(static_cast<std::size_t>(d.index), calls.size()) << "arguments of a call not opened";
        calls[static_cast<std::size_t>(d.index)].arguments += d.arguments;
    }
    deltas.clear();
}

TEST(ToolCallParserTest, Qwen25StreamedCallsCompleteOneAtATime) {
    ToolCallDetector d = detector("qwen25");
    std::string normal;
    std::vector<std::size_t> calls_after;
    std::vector<ParsedToolCall> calls;
    for (std::size_t i = 0; i < kQwen.size(); i += 7) {  // 7-byte pieces split every tag
        ToolCallParts p = d.parse_increment(std::string_view(kQwen).substr(i, 7));
        normal += p.normal;
        join(p.deltas, calls);
        calls_after.push_back(calls.size());
    }
    normal += d.finish();
    EXPECT_EQ(normal, "Let me check.\n");
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[1].arguments, R"({"a":1,"b":2})");
    // Each call opens before it ends: the second one before the last piece.
    EXPECT_EQ(calls_after[calls_after.size() - 2], 2u);
}

TEST(ToolCallParserTest, DeepSeekV3) {
    const std::string begin = "<\xEF\xBD\x9Ctool\xE2\x96\x81", bar = "\xEF\xBD\x9C>";
    const std::string text = "Sure." + begin + "calls\xE2\x96\x81" "begin" + bar + begin + "call\xE2\x96\x81" "begin" +
                             bar + "function" + begin.substr(0, 1) + "\xEF\xBD\x9Ctool\xE2\x96\x81sep" + bar +
                             "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" + begin + "call\xE2\x96\x81" "end" + bar +
                             begin + "calls\xE2\x96\x81" "end" + bar;
    const ToolCallParts p = detector("deepseekv3").parse_all(text);
    EXPECT_EQ(p.normal, "Sure.");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
    ToolCallDetector d = detector("deepseekv3");
    ToolCallParts streamed = d.parse_increment(text.substr(0, 20));
    ToolCallParts rest = d.parse_increment(text.substr(20));
    EXPECT_EQ(streamed.normal + rest.normal + d.finish(), "Sure.");
    std::vector<ParsedToolCall> calls;
    join(streamed.deltas, calls);
    join(rest.deltas, calls);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].arguments, R"({"city":"Oslo"})");
}

// DeepSeek-V3.1: NAME<｜tool▁sep｜>ARGS between the same markers as V3, no fences.
TEST(ToolCallParserTest, DeepSeekV31) {
    const auto marker = [](const std::string& what) {
        return "<\xEF\xBD\x9Ctool\xE2\x96\x81" + what + "\xEF\xBD\x9C>";
    };
    const std::string call_begin = marker("call\xE2\x96\x81" "begin"), call_end = marker("call\xE2\x96\x81" "end");
    const std::string text = "Checking." + marker("calls\xE2\x96\x81" "begin") + call_begin + "get_weather" +
                             marker("sep") + R"({"city": "Tokyo"})" + call_end + call_begin + "add" + marker("sep") +
                             R"({"a": 1, "b": 2})" + call_end + marker("calls\xE2\x96\x81" "end");
    const ToolCallParts p = detector("deepseekv31").parse_all(text);
    EXPECT_EQ(p.normal, "Checking.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Tokyo"})");
    EXPECT_EQ(p.calls[1].name, "add");
    EXPECT_EQ(p.calls[1].arguments, R"({"a":1,"b":2})");
    // V3's parser does not read V3.1's calls (no "function" and ```json fence).
    EXPECT_TRUE(detector("deepseekv3").parse_all(text).calls.empty());
    ToolCallDetector d = detector("deepseekv31");
    std::vector<ParsedToolCall> streamed;
    std::string normal;
    for (std::size_t i = 0; i < text.size(); i += 5) {
        ToolCallParts part = d.parse_increment(std::string_view(text).substr(i, 5));
        normal += part.normal;
        join(part.deltas, streamed);
    }
    normal += d.finish();
    EXPECT_EQ(normal, "Checking.");
    ASSERT_EQ(streamed.size(), 2u);
    EXPECT_EQ(streamed[1].arguments, R"({"a":1,"b":2})");
}

// Streams `text` in `step`-byte pieces: the content and the calls as they complete.
ToolCallParts stream(ToolCallDetector d, const std::string& text, std::size_t step) {
    ToolCallParts all;
    for (std::size_t i = 0; i < text.size(); i += step) {
        ToolCallParts part = d.parse_increment(std::string_view(text).substr(i, step));
        all.normal += part.normal;
        join(part.deltas, all.calls);
    }
    all.normal += d.finish();
    return all;
}

// Llama 3: JSON objects after <|python_tag|> (or opening the output, when the tag was a special
// token left out of the text), separated by ';', "parameters" as the arguments.
TEST(ToolCallParserTest, Llama3) {
    const std::string tagged = R"(Let me look.<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}; )"
                               R"({"name": "add", "parameters": {"a": "}", "b": 2}})";
    for (const ToolCallParts& p : {detector("llama3").parse_all(tagged), stream(detector("llama3"), tagged, 3)}) {
        EXPECT_EQ(p.normal, "Let me look.");
        ASSERT_EQ(p.calls.size(), 2u);
        EXPECT_EQ(p.calls[0].name, "get_weather");
        EXPECT_EQ(p.calls[0].arguments, R"({"city":"Rome"})");
        EXPECT_EQ(p.calls[1].arguments, R"({"a":"}","b":2})");  // a brace inside a string
    }
    const std::string bare = R"({"name": "add", "parameters": {"a": 1, "b": 2}} and then some)";
    for (const ToolCallParts& p : {detector("llama3").parse_all(bare), stream(detector("llama3"), bare, 4)}) {
        ASSERT_EQ(p.calls.size(), 1u);
        EXPECT_EQ(p.calls[0].name, "add");
        EXPECT_EQ(strip_copy(p.normal), "and then some");
    }
    // Plain text, and '{' that does not open the output, are content.
    EXPECT_EQ(detector("llama3").parse_all("x = {1}").normal, "x = {1}");
    EXPECT_EQ(stream(detector("llama3"), "x = {1}", 2).normal, "x = {1}");
    // A call still open when the output ends: whole, it is not a call; streamed, its name went
    // out once whole (as SGLang streams it) and no arguments followed.
    EXPECT_TRUE(detector("llama3").parse_all(R"(<|python_tag|>{"name": "add", "par)").calls.empty());
    const ToolCallParts cut = stream(detector("llama3"), R"(<|python_tag|>{"name": "add", "par)", 5);
    ASSERT_EQ(cut.calls.size(), 1u);
    EXPECT_EQ(cut.calls[0].name, "add");
    EXPECT_EQ(cut.calls[0].arguments, "");
}

// Mistral: [TOOL_CALLS] then a JSON array of calls, or the compact name[ARGS]{...}.
TEST(ToolCallParserTest, Mistral) {
    const std::string array = R"(Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon"}}, )"
                              R"({"name": "add", "arguments": {"a": 1, "b": 2}}])";
    for (const ToolCallParts& p : {detector("mistral").parse_all(array), stream(detector("mistral"), array, 6)}) {
        EXPECT_EQ(strip_copy(p.normal), "Sure.");
        ASSERT_EQ(p.calls.size(), 2u);
        EXPECT_EQ(p.calls[0].arguments, R"({"city":"Lyon"})");
        EXPECT_EQ(p.calls[1].name, "add");
    }
    const std::string compact = R"([TOOL_CALLS]get_weather[ARGS]{"city": "Nice"})";
    for (const ToolCallParts& p : {detector("mistral").parse_all(compact), stream(detector("mistral"), compact, 4)}) {
        EXPECT_EQ(p.normal, "");
        ASSERT_EQ(p.calls.size(), 1u);
        EXPECT_EQ(p.calls[0].name, "get_weather");
        EXPECT_EQ(p.calls[0].arguments, R"({"city":"Nice"})");
    }
    EXPECT_TRUE(detector("mistral", {"add"}).parse_all(compact).calls.empty()) << "not an offered function";
}

// pythonic (Llama 3.2 / 4): the whole output is a Python list of calls with literal keyword
// arguments, read into JSON as ast would.
TEST(ToolCallParserTest, Pythonic) {
    const std::string text = R"([get_weather(city='San Francisco', days=3, units=None), )"
                             R"(add(a=-1.5, b=[1, (2, 3)], opts={'deep': True, "k": "it's"},)])";
    for (const ToolCallParts& p : {detector("pythonic").parse_all(text), stream(detector("pythonic"), text, 4)}) {
        EXPECT_EQ(p.normal, "");
        ASSERT_EQ(p.calls.size(), 2u);
        EXPECT_EQ(p.calls[0].name, "get_weather");
        EXPECT_EQ(p.calls[0].arguments, R"({"city":"San Francisco","days":3,"units":null})");
        EXPECT_EQ(p.calls[1].arguments, R"({"a":-1.5,"b":[1,[2,3]],"opts":{"deep":true,"k":"it's"}})");
    }
    // Text that is not exactly a list of calls is content: prose, a positional argument, a
    // name that is not a literal, a list of numbers.
    for (const std::string other : {"Sure, here: [f(a=1)]", "[f(1)]", "[f(a=x)]", "[1, 2]", "no calls"}) {
        EXPECT_EQ(detector("pythonic", {"f"}).parse_all(other).normal, other) << other;
        EXPECT_TRUE(detector("pythonic", {"f"}).parse_all(other).calls.empty()) << other;
        EXPECT_EQ(stream(detector("pythonic", {"f"}), other, 3).normal, other) << other;
    }
    EXPECT_TRUE(detector("pythonic", {"add"}).parse_all("[get_weather(city='x')]").calls.empty())
        << "a function the request did not offer";
}

// kimik2_detector.py: functions.NAME:INDEX (or NAME:INDEX) then the JSON arguments.
TEST(ToolCallParserTest, KimiK2) {
    const std::string text =
        "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        R"({"city": "Beijing"})"
        "<|tool_call_end|><|tool_call_begin|> add:1 <|tool_call_argument_begin|>"
        R"({"a": 1})"
        "<|tool_call_end|><|tool_call_begin|>bad id<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>";
    const ToolCallParts p = detector("kimi_k2").parse_all(text);
    EXPECT_EQ(p.normal, "Sure.");
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Beijing"})");
    EXPECT_EQ(p.calls[1].name, "add");
    EXPECT_TRUE(tool_call_format("kimi_k2").value().numbered_call_ids);
    const ToolCallParts streamed = stream(detector("kimi_k2"), text, 7);
    EXPECT_EQ(streamed.normal, "Sure.");
    ASSERT_EQ(streamed.calls.size(), 2u);
    EXPECT_EQ(streamed.calls[1].arguments, R"({"a":1})");
}

TEST(PartialJsonTest, ReadsAValueCutAnywhere) {
    const auto read = [](std::string_view text, bool partial_strings = true) {
        const auto j = parse_partial_json(text, partial_strings);
        return j ? j->dump() : std::string("none");
    };
    EXPECT_EQ(read(R"({"a": "hel)"), R"({"a":"hel"})");
    EXPECT_EQ(read(R"({"a": "hel)", false), "{}") << "a string cut short is dropped";
    EXPECT_EQ(read(R"({"a": "x\)"), R"({"a":"x"})") << "a lone backslash waits for its character";
    EXPECT_EQ(read(R"({"a": "x\u00)"), R"({"a":"x"})") << "so does a \\u escape";
    EXPECT_EQ(read(R"({"a": "x\u00e9)"), "{\"a\":\"x\xC3\xA9\"}");
    EXPECT_EQ(read(R"({"a": 12)"), R"({"a":12})");
    EXPECT_EQ(read(R"({"a": tr)"), "{}");
    EXPECT_EQ(read(R"({"a": "x", "b)"), R"({"a":"x"})") << "a key cut short is dropped";
    EXPECT_EQ(read(R"({"a": "x", "b": )"), R"({"a":"x"})");
    EXPECT_EQ(read(R"({"a": [1, {"b": [)"), R"({"a":[1,{"b":[]}]})");
    EXPECT_EQ(read("{\"b\": 1, \"a\": 2}\n</tool"), R"({"b":1,"a":2})")
        << "keys keep their order; text after the value is not read";
    EXPECT_EQ(read(R"({"a": "}\"{"})"), R"({"a":"}\"{"})");
    EXPECT_EQ(read(""), "none");
}

// Every format that streams a call as it is written (the marked ones, and a call object after
// Llama 3's or Mistral's marker), in pieces of every size from 1 to 9 bytes: the deltas add up
// to parse_all's calls; a call opens (name) before its arguments are written and they come in
// several pieces; a function the request did not offer sends nothing.
TEST(ToolCallParserTest, CallsStreamTheirArgumentsAsTheyAreWritten) {
    const auto marker = [](const std::string& what) {
        return "<\xEF\xBD\x9Ctool\xE2\x96\x81" + what + "\xEF\xBD\x9C>";
    };
    const std::string args = R"({"city": "Saint-Pierre-et-Miquelon", "days": [1, 2], "units": "metric"})";
    const std::string v3_call = marker("call\xE2\x96\x81" "begin") + "function" + marker("sep") +
                                "get_weather\n```json\n" + args + "\n```" + marker("call\xE2\x96\x81" "end");
    const std::string v31_call =
        marker("call\xE2\x96\x81" "begin") + "get_weather" + marker("sep") + args + marker("call\xE2\x96\x81" "end");
    const std::vector<std::pair<const char*, std::string>> outputs = {
        {"qwen25", "Ok.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args +
                       "}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>"},
        {"deepseekv3", "Ok." + marker("calls\xE2\x96\x81" "begin") + v3_call + marker("calls\xE2\x96\x81" "end")},
        {"deepseekv31", "Ok." + marker("calls\xE2\x96\x81" "begin") + v31_call + marker("calls\xE2\x96\x81" "end")},
        {"kimi_k2", "Ok.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                    "<|tool_call_argument_begin|>" + args + "<|tool_call_end|><|tool_calls_section_end|>"},
        {"llama3", "Ok.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": " + args +
                       "}; {\"name\": \"add\", \"parameters\": {\"a\": 1}}"},
        {"mistral", "Ok.[TOOL_CALLS] {\"name\": \"get_weather\", \"arguments\": " + args + "}"},
    };
    for (const auto& [format, text] : outputs) {
        const ToolCallParts whole = detector(format).parse_all(text);
        ASSERT_FALSE(whole.calls.empty()) << format;
        EXPECT_EQ(whole.calls[0].arguments, R"({"city":"Saint-Pierre-et-Miquelon","days":[1,2],"units":"metric"})")
            << format << ": the model's key order";
        const std::size_t args_at = text.find(args);
        for (std::size_t step = 1; step <= 9; ++step) {
            ToolCallDetector d = detector(format);
            std::vector<ParsedToolCall> calls;
            std::string normal;
            int argument_pieces = 0;
            bool opened_early = false;
            for (std::size_t i = 0; i < text.size(); i += step) {
                ToolCallParts part = d.parse_increment(std::string_view(text).substr(i, step));
                normal += part.normal;
                for (const ToolCallDelta& delta : part.deltas) {
                    if (delta.index == 0 && delta.name.empty()) ++argument_pieces;
                    if (delta.index == 0 && !delta.name.empty()) opened_early = i + step <= args_at + args.size() / 2;
                }
                join(part.deltas, calls);
            }
            normal += d.finish();
            EXPECT_EQ(normal.substr(0, 3), "Ok.") << format << " step " << step;
            EXPECT_EQ(normal.find_first_not_of(" \n", 3), std::string::npos) << format << " step " << step;
            ASSERT_EQ(calls.size(), whole.calls.size()) << format << " step " << step;
            for (std::size_t k = 0; k < calls.size(); ++k) {
                EXPECT_EQ(calls[k].name, whole.calls[k].name) << format << " step " << step;
                EXPECT_EQ(calls[k].arguments, whole.calls[k].arguments) << format << " step " << step;
            }
            EXPECT_TRUE(opened_early) << format << " step " << step;
            EXPECT_GE(argument_pieces, 3) << format << " step " << step;
        }
        ToolCallDetector only_add = detector(format, {"add"});
        std::vector<ParsedToolCall> calls;
        for (std::size_t i = 0; i < text.size(); i += 3) {
            ToolCallParts part = only_add.parse_increment(std::string_view(text).substr(i, 3));
            join(part.deltas, calls);
        }
        for (const ParsedToolCall& call : calls) EXPECT_EQ(call.name, "add") << format;
    }
    // Kimi-K2: an id without its ":N" is not a call (decode drops it), so it does not open one.
    ToolCallDetector kimi = detector("kimi_k2");
    const ToolCallParts part = kimi.parse_increment(
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.add<|tool_call_argument_begin|>{\"a\": 1");
    EXPECT_TRUE(part.deltas.empty());
}

TEST(ToolCallParserTest, UnknownParserNamesTheOnesThatWork) {
    const auto f = tool_call_format("glm45");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().message(),
              "--tool-call-parser glm45: tessera parses deepseekv3, deepseekv31, kimi_k2, llama3, mistral, pythonic, "
              "qwen25 (SGLang's other parsers are not implemented)");
}

}  // namespace
}  // namespace tessera::server
