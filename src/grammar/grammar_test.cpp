#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/lazy_dfa.h"
#include "grammar/regex.h"
#include "grammar/structural_tag.h"
#include "grammar/token_grammar.h"
#include "tokenizer/utf8.h"

namespace tessera::grammar {
namespace {

// Whether `text` matches `pattern` as a whole.
bool full_match(std::string_view pattern, std::string_view text) {
    auto nfa = compile_regex(pattern);
    EXPECT_TRUE(nfa.ok()) << pattern << ": " << nfa.status().to_string();
    if (!nfa.ok()) return false;
    LazyDfa dfa(std::move(nfa.value()));
    const std::int32_t end = dfa.walk(dfa.start(), text);
    return end != LazyDfa::kDead && dfa.accepting(end);
}

std::string regex_error(std::string_view pattern) {
    auto nfa = compile_regex(pattern);
    return nfa.ok() ? "" : nfa.status().message();
}

TEST(RegexTest, LiteralsClassesAndQuantifiers) {
    EXPECT_TRUE(full_match("abc", "abc"));
    EXPECT_FALSE(full_match("abc", "ab"));
    EXPECT_FALSE(full_match("abc", "abcd"));
    EXPECT_TRUE(full_match("a|bc|", ""));
    EXPECT_TRUE(full_match("[a-c]+x?", "abcabc"));
    EXPECT_TRUE(full_match("[a-c]+x?", "cx"));
    EXPECT_FALSE(full_match("[a-c]+x?", "x"));
    EXPECT_TRUE(full_match("[^a-c]*", "xyz\n"));
    EXPECT_FALSE(full_match("[^a-c]*", "xaz"));
    EXPECT_TRUE(full_match("a{3}", "aaa"));
    EXPECT_FALSE(full_match("a{3}", "aa"));
    EXPECT_TRUE(full_match("a{2,}", "aaaaa"));
    EXPECT_FALSE(full_match("a{2,}", "a"));
    EXPECT_TRUE(full_match("a{,2}b", "b"));
    EXPECT_TRUE(full_match("(ab){1,2}", "abab"));
    EXPECT_FALSE(full_match("(ab){1,2}", "ababab"));
    EXPECT_TRUE(full_match("a{x}", "a{x}"));  // not a quantifier: literal braces, as in Python
    EXPECT_TRUE(full_match("(?:a|b)*?c", "abbac"));
    EXPECT_TRUE(full_match("(?P<year>\\d{4})-(?<m>\\d\\d)", "2026-12"));
    EXPECT_TRUE(full_match("^\\d+\\.\\d*$", "3.14"));
    EXPECT_FALSE(full_match("\\d+", "１"));  // \d is ASCII, as xgrammar's
    EXPECT_TRUE(full_match("\\w+\\s\\W", "a_Z9\t!"));
    EXPECT_TRUE(full_match("[\\]\\-x]+", "]-x"));
    EXPECT_TRUE(full_match("[-a]+", "-a-"));
    EXPECT_TRUE(full_match("\\x41\\u00e9\\{", "Aé{"));
    EXPECT_TRUE(full_match("(a*)*b", "aaab"));
}

// A branch no text can finish is not begun: the output never writes itself into a dead end,
// where no token would be allowed.
TEST(RegexTest, NoMoveLeadsWhereNoMatchCanFollow) {
    auto nfa = compile_regex("abc[^\\s\\S]|ac");
    ASSERT_TRUE(nfa.ok());
    LazyDfa dfa(std::move(nfa.value()));
    EXPECT_EQ(dfa.walk(dfa.start(), "ab"), LazyDfa::kDead);
    EXPECT_NE(dfa.walk(dfa.start(), "a"), LazyDfa::kDead);
    EXPECT_TRUE(dfa.accepting(dfa.walk(dfa.start(), "ac")));
    auto nothing = compile_regex("[^\\s\\S]");
    ASSERT_TRUE(nothing.ok());
    LazyDfa none(std::move(nothing.value()));
    EXPECT_EQ(none.walk(none.start(), "a"), LazyDfa::kDead);
    EXPECT_FALSE(none.accepting(none.start()));
}

TEST(RegexTest, MatchesUtf8ByCodePoint) {
    EXPECT_TRUE(full_match(".", "é"));
    EXPECT_TRUE(full_match(".", "中"));
    EXPECT_TRUE(full_match(".", "😀"));
    EXPECT_FALSE(full_match(".", "\n"));
    EXPECT_FALSE(full_match(".", "ab"));
    EXPECT_TRUE(full_match("[à-ÿ]+", "éü"));
    EXPECT_FALSE(full_match("[à-ÿ]+", "e"));
    EXPECT_TRUE(full_match("[^a]", "中"));
    EXPECT_TRUE(full_match("中+文", "中中文"));
    EXPECT_FALSE(full_match(".", "\xC3"));      // a truncated character
    EXPECT_FALSE(full_match(".", "\xED\xA0\x80"));  // an encoded surrogate
}

TEST(RegexTest, Utf8SequencesCoverExactlyTheRange) {
    // The tokenizer's encoder, written apart from the one under test.
    const auto encode = [](char32_t cp) {
        std::string s;
        tokenizer::append_utf8(cp, s);
        return s;
    };
    const auto covered = [](const auto& seqs, const std::string& bytes) {
        for (const auto& seq : seqs) {
            if (seq.size() != bytes.size()) continue;
            bool in = true;
            for (std::size_t k = 0; k < seq.size(); ++k) {
                const auto b = static_cast<std::uint8_t>(bytes[k]);
                in = in && seq[k].first <= b && b <= seq[k].second;
            }
            if (in) return true;
        }
        return false;
    };
    const std::pair<char32_t, char32_t> ranges[] = {{0x41, 0x5A}, {0x70, 0x900}, {0x7FF, 0x10010}, {0xD7F0, 0xE010},
                                                    {0xFFF0, 0x10FFFF}};
    for (const auto& [lo, hi] : ranges) {
        const auto seqs = utf8_sequences(lo, hi);
        for (char32_t cp = lo > 0x40 ? lo - 0x40 : 0; cp <= std::min<char32_t>(hi + 0x40, 0x10FFFF); cp += 7) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            EXPECT_EQ(covered(seqs, encode(cp)), cp >= lo && cp <= hi)
                << std::hex << static_cast<std::uint32_t>(cp) << " in " << static_cast<std::uint32_t>(lo) << ".."
                << static_cast<std::uint32_t>(hi);
        }
    }
}

TEST(RegexTest, RefusesWhatItCannotConstrain) {
    EXPECT_NE(regex_error("(?=a)b").find("lookaround"), std::string::npos);
    EXPECT_NE(regex_error("(a)\\1").find("backreferences"), std::string::npos);
    EXPECT_NE(regex_error("\\bword").find("word boundaries"), std::string::npos);
    EXPECT_NE(regex_error("(?i)abc").find("inline flags"), std::string::npos);
    EXPECT_NE(regex_error("a^b").find("anchors"), std::string::npos);
    EXPECT_NE(regex_error("(ab").find("missing )"), std::string::npos);
    EXPECT_NE(regex_error("ab)").find("unbalanced"), std::string::npos);
    EXPECT_NE(regex_error("[z-a]").find("bad character range"), std::string::npos);
    EXPECT_NE(regex_error("*a").find("nothing to repeat"), std::string::npos);
    EXPECT_NE(regex_error("a**").find("multiple repeat"), std::string::npos);
    EXPECT_NE(regex_error("a{3,2}").find("min repeat greater"), std::string::npos);
    EXPECT_NE(regex_error("[abc").find("unterminated"), std::string::npos);
    EXPECT_NE(regex_error("\\q").find("bad escape"), std::string::npos);
    EXPECT_NE(regex_error("(a{1000}){1000}").find("too large"), std::string::npos);
    EXPECT_EQ(regex_error("a{5}"), "");
}

TEST(RegexTest, EscapedTextMatchesItself) {
    const std::string text = R"(a.b*c+(d)[e]{f}|g^h$i\j?k-l/)";
    EXPECT_TRUE(full_match(regex_escape(text), text));
    EXPECT_FALSE(full_match(regex_escape(text), "a.b*c+(d)[e]{f}|g^h$i\\j?k-l"));
}

std::string schema_regex(std::string_view schema, JsonWhitespace ws = {}) {
    auto regex = json_schema_to_regex(schema, ws);
    EXPECT_TRUE(regex.ok()) << schema << ": " << regex.status().to_string();
    return regex.ok() ? regex.value() : "";
}

TEST(JsonSchemaTest, ObjectsKeepOrderRequiredAndOptional) {
    const std::string re = schema_regex(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "age"]})");
    EXPECT_TRUE(full_match(re, R"({"name": "Ada", "age": 36})"));
    EXPECT_TRUE(full_match(re, R"({"name":"Ada","age":-1,"tags":["x","y"]})"));
    EXPECT_TRUE(full_match(re, "{\n  \"name\": \"A\\\"da\",\n  \"age\": 0\n}"));
    EXPECT_FALSE(full_match(re, R"({"age": 36, "name": "Ada"})"));     // order
    EXPECT_FALSE(full_match(re, R"({"name": "Ada"})"));                // required
    EXPECT_FALSE(full_match(re, R"({"name": "Ada", "age": 01})"));     // leading zero
    EXPECT_FALSE(full_match(re, R"({"name": "Ada", "age": 3, "x": 1})"));  // undeclared
    EXPECT_FALSE(full_match(re, "{\"name\": \"a\nb\", \"age\": 3}"));  // raw control character
}

TEST(JsonSchemaTest, AllOptionalPropertiesAndExtras) {
    const std::string re = schema_regex(R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})");
    EXPECT_TRUE(full_match(re, "{}"));
    EXPECT_TRUE(full_match(re, R"({"b": null})"));
    EXPECT_TRUE(full_match(re, R"({"a": true, "b": null})"));
    EXPECT_FALSE(full_match(re, R"({, "b": null})"));
    EXPECT_FALSE(full_match(re, R"({"a": true,})"));
    const std::string extras = schema_regex(
        R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
            "additionalProperties": {"type": "number"}})");
    EXPECT_TRUE(full_match(extras, R"({"id": 1, "x": 2.5e3, "y": -0.5})"));
    EXPECT_FALSE(full_match(extras, R"({"id": 1, "x": "s"})"));
    const std::string any_object = schema_regex(R"({"type": "object"})");
    EXPECT_TRUE(full_match(any_object, R"({"k": [1, {"z": null}], "s": "t"})"));
    EXPECT_FALSE(full_match(any_object, R"([1])"));
}

TEST(JsonSchemaTest, ArraysEnumsConstAndUnions) {
    const std::string re = schema_regex(R"({"type": "array", "items": {"enum": ["red", "green", 3]},
                                           "minItems": 1, "maxItems": 2})");
    EXPECT_TRUE(full_match(re, R"(["red"])"));
    EXPECT_TRUE(full_match(re, R"([3, "green"])"));
    EXPECT_FALSE(full_match(re, R"([])"));
    EXPECT_FALSE(full_match(re, R"(["red", "red", "red"])"));
    EXPECT_FALSE(full_match(re, R"(["blue"])"));
    const std::string tuple = schema_regex(R"({"prefixItems": [{"type": "integer"}, {"const": "x"}], "items": false,
                                              "minItems": 1})");
    EXPECT_TRUE(full_match(tuple, R"([1, "x"])"));
    EXPECT_TRUE(full_match(tuple, R"([1])"));
    EXPECT_FALSE(full_match(tuple, R"(["x"])"));
    const std::string either = schema_regex(R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]})");
    EXPECT_TRUE(full_match(either, R"("ab")"));
    EXPECT_TRUE(full_match(either, "null"));
    EXPECT_FALSE(full_match(either, R"("abc")"));
    const std::string typed = schema_regex(R"({"type": ["number", "boolean"]})");
    EXPECT_TRUE(full_match(typed, "1.5E-3"));
    EXPECT_TRUE(full_match(typed, "false"));
    EXPECT_FALSE(full_match(typed, "\"1\""));
}

TEST(JsonSchemaTest, StringFormatsAndPatterns) {
    EXPECT_TRUE(full_match(schema_regex(R"({"type": "string", "format": "date"})"), R"("2026-12-04")"));
    EXPECT_FALSE(full_match(schema_regex(R"({"type": "string", "format": "date"})"), R"("2026-13-04")"));
    EXPECT_TRUE(full_match(schema_regex(R"({"type": "string", "format": "date-time"})"),
                           R"("2026-12-04T22:14:11Z")"));
    EXPECT_TRUE(full_match(schema_regex(R"({"type": "string", "format": "uuid"})"),
                           R"("123e4567-e89b-12d3-a456-426614174000")"));
    const std::string code = schema_regex(R"({"type": "string", "pattern": "^[A-Z]{3}-\\d+$"})");
    EXPECT_TRUE(full_match(code, R"("ABC-42")"));
    EXPECT_FALSE(full_match(code, R"("AB-42")"));
}

TEST(JsonSchemaTest, RefsAndRecursionAreCut) {
    const std::string re = schema_regex(R"({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"]}}, "$ref": "#/$defs/node"})");
    EXPECT_TRUE(full_match(re, R"({"v": 1, "next": {"v": 2, "next": null}})"));
    EXPECT_FALSE(full_match(re, R"({"v": 1, "next": 2})"));
    std::string deep = "null";
    for (int i = 0; i < 10; ++i) deep = R"({"v": 1, "next": )" + deep + "}";
    EXPECT_FALSE(full_match(re, deep));  // deeper than kMaxNesting
}

TEST(JsonSchemaTest, Whitespace) {
    const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                             "required": ["a", "b"]})";
    const std::string compact = schema_regex(schema, {.mode = JsonWhitespace::Mode::kCompact});
    EXPECT_TRUE(full_match(compact, R"({"a": 1, "b": 2})"));
    EXPECT_FALSE(full_match(compact, R"({"a":1,"b":2})"));
    EXPECT_FALSE(full_match(compact, "{\"a\": 1,\n\"b\": 2}"));
    const std::string custom = schema_regex(schema, {.mode = JsonWhitespace::Mode::kPattern, .pattern = "[ ]?"});
    EXPECT_TRUE(full_match(custom, R"({"a":1, "b" :2})"));
    EXPECT_FALSE(full_match(custom, R"({"a":1,  "b":2})"));
}

TEST(JsonSchemaTest, IntegerRangesMatchExactlyTheirIntegers) {
    const std::optional<std::int64_t> none;
    const std::vector<std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>>> ranges = {
        {0, 0}, {0, 9}, {1, 100}, {7, 77}, {-5, 5}, {-123, -45}, {-1000, 999}, {19, 301}, {0, none},
        {37, none}, {-12, none}, {none, 0}, {none, -8}, {none, 250}, {none, none}};
    for (const auto& [lo, hi] : ranges) {
        const std::string re = integer_range_regex(lo, hi);
        for (std::int64_t v = -1100; v <= 1100; ++v) {
            const bool inside = (!lo || v >= *lo) && (!hi || v <= *hi);
            EXPECT_EQ(full_match(re, std::to_string(v)), inside) << re << " for " << v;
        }
        EXPECT_FALSE(full_match(re, "-0")) << re;
        EXPECT_FALSE(full_match(re, "007")) << re;
        EXPECT_EQ(full_match(re, "123456789012"), !hi) << re;
    }
    const std::string schema = schema_regex(R"({"type": "integer", "minimum": 1, "exclusiveMaximum": 10})");
    EXPECT_TRUE(full_match(schema, "9"));
    EXPECT_FALSE(full_match(schema, "10"));
    EXPECT_FALSE(full_match(schema, "0"));
    const std::string draft4 = schema_regex(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true,
                                               "maximum": 2.5})");
    EXPECT_FALSE(full_match(draft4, "0"));
    EXPECT_TRUE(full_match(draft4, "2"));
    EXPECT_FALSE(full_match(draft4, "3"));
}

TEST(JsonSchemaTest, RefusesTextNestedPastTheBound) {
    std::string deep = "1";
    for (int i = 0; i < 100000; ++i) deep = R"({"items": )" + deep + "}";
    const auto r = json_schema_to_regex(deep);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("json_schema nests deeper than 256 levels"), std::string::npos);
    const auto tag = structural_tag_nfa(R"({"format": )" + deep + "}");
    ASSERT_FALSE(tag.ok());
    EXPECT_NE(tag.status().message().find("structural_tag nests deeper than 256 levels"), std::string::npos);
    EXPECT_NE(json_schema_to_regex("{not json").status().message().find("json_schema is not valid JSON"),
              std::string::npos);
}

TEST(JsonSchemaTest, RefusesWhatItWouldIgnore) {
    const auto error = [](std::string_view schema) {
        auto r = json_schema_to_regex(schema);
        return r.ok() ? std::string() : r.status().message();
    };
    EXPECT_NE(error(R"({"type": "number", "minimum": 0})").find("'minimum' on a number is not supported"),
              std::string::npos);
    EXPECT_NE(error(R"({"minimum": 0})").find("'minimum' on a number"), std::string::npos);
    EXPECT_NE(error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"), std::string::npos);
    EXPECT_NE(error(R"({"type": "integer", "multipleOf": 2})").find("'multipleOf' is not supported"),
              std::string::npos);
    EXPECT_NE(error(R"({"not": {"type": "string"}})").find("'not'"), std::string::npos);
    EXPECT_NE(error(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
    EXPECT_NE(error(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
    EXPECT_NE(error(R"({"$ref": "http://x/y.json"})").find("not local"), std::string::npos);
    EXPECT_NE(error(R"({"type": "object", "required": ["a"]})").find("'a' is not among"), std::string::npos);
    EXPECT_NE(error("{not json").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error("false").find("admits no value"), std::string::npos);
    EXPECT_NE(error(R"j({"type": "string", "pattern": "(?=x)"})j").find("lookaround"), std::string::npos);
}

std::string ebnf_regex(std::string_view grammar) {
    auto regex = ebnf_to_regex(grammar);
    EXPECT_TRUE(regex.ok()) << grammar << ": " << regex.status().to_string();
    return regex.ok() ? regex.value() : "";
}

TEST(EbnfTest, RulesLiteralsClassesAndRepetition) {
    const std::string re = ebnf_regex(R"(
# a list of assignments
root  ::= stmt (";" ws stmt)*
stmt  ::= name ws "=" ws value
name  ::= [a-zA-Z_] [a-zA-Z0-9_]{0,7}
value ::= "\"" [^"\n]* "\"" | [0-9]+ | "true" | "false"
ws    ::= [ \t]?
)");
    EXPECT_TRUE(full_match(re, R"(x = 1)"));
    EXPECT_TRUE(full_match(re, "a_b=\"hi there\"; c =true;\tflag= false"));
    EXPECT_FALSE(full_match(re, "1x = 1"));
    EXPECT_FALSE(full_match(re, "x = maybe"));
    EXPECT_FALSE(full_match(re, "x = 1;"));
    // A rule may continue on an indented or operator-led next line; literals take escapes.
    const std::string multi = ebnf_regex("root ::= \"a\"\n    | \"b\" \"\\x41\\u00e9\\n\"\n");
    EXPECT_TRUE(full_match(multi, "a"));
    EXPECT_TRUE(full_match(multi, "bAé\n"));
    EXPECT_FALSE(full_match(multi, "ab"));
    const std::string counted = ebnf_regex(R"(root ::= "ab"{1, 2} [0-9]{3})");
    EXPECT_TRUE(full_match(counted, "abab123"));
    EXPECT_FALSE(full_match(counted, "ab{1, 2}123"));
}

TEST(EbnfTest, RecursionIsCutAtTheNestingBound) {
    const std::string re = ebnf_regex(R"g(root ::= "(" root ")" | "x")g");
    EXPECT_TRUE(full_match(re, "x"));
    EXPECT_TRUE(full_match(re, "((x))"));
    EXPECT_FALSE(full_match(re, "((x)"));
    std::string deep = "x";
    for (int i = 0; i < kMaxNesting + 2; ++i) deep = "(" + deep + ")";
    EXPECT_FALSE(full_match(re, deep));
    const std::string mutual = ebnf_regex(R"(root ::= a
a ::= "[" b? "]"
b ::= a ("," a)*)");
    EXPECT_TRUE(full_match(mutual, "[[],[[]]]"));
}

// xgrammar's compile_structural_tag: free text until a trigger, then a structure that begins
// with it (the rest of its begin, an instance of its schema, its end), then free again.
TEST(StructuralTagTest, TriggersOpenTheirStructures) {
    const char* spec = R"({"type": "structural_tag", "triggers": ["<function=", "<<"],
        "structures": [
          {"begin": "<function=weather>", "schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"]}, "end": "</function>"},
          {"begin": "<function=time>", "schema": {"enum": [1, 2]}, "end": "</function>"},
          {"begin": "<<x", "schema": {"type": "integer"}, "end": ">>"}]})";
    auto nfa = structural_tag_nfa(spec, JsonWhitespace{JsonWhitespace::Mode::kCompact, ""});
    ASSERT_TRUE(nfa.ok()) << nfa.status().message();
    LazyDfa dfa(std::move(nfa.value()));
    const auto matches = [&](std::string_view text) {
        const std::int32_t end = dfa.walk(dfa.start(), text);
        return end != LazyDfa::kDead && dfa.accepting(end);
    };
    const auto prefix = [&](std::string_view text) { return dfa.walk(dfa.start(), text) != LazyDfa::kDead; };
    EXPECT_TRUE(matches(""));
    EXPECT_TRUE(matches("Any text at all, <func and < even"));
    EXPECT_TRUE(matches(R"(Let me check. <function=weather>{"city": "Paris"}</function> Done.)"));
    EXPECT_TRUE(matches("<function=time>2</function><function=time>1</function>"));
    EXPECT_TRUE(matches("a <<x42>> b <function=time>1</function>"));
    EXPECT_TRUE(matches("<fun<function=time>1</function>")) << "a trigger's broken prefix is text";
    EXPECT_FALSE(prefix("<<<x7>>")) << "the first trigger written dispatches: << then <x";
    EXPECT_FALSE(prefix("<function=weathe>")) << "a begin no structure has";
    EXPECT_FALSE(prefix("<function=time>3")) << "not an instance of the schema";
    EXPECT_FALSE(prefix(R"(<function=weather>{"town": )"));
    EXPECT_FALSE(matches("<function=time>1")) << "a structure must be finished";
    EXPECT_TRUE(prefix("<function=time>1</func"));
    EXPECT_FALSE(prefix("<<y")) << "the trigger << only opens <<x";

    const auto error = [](std::string_view text) {
        auto r = structural_tag_nfa(text);
        return r.ok() ? std::string() : r.status().message();
    };
    EXPECT_NE(error(R"({"triggers": ["<f"], "structures": [{"begin": "<g>", "schema": {}, "end": "</g>"}]})")
                  .find("the begin \"<g>\" starts with none of the triggers"), std::string::npos);
    EXPECT_NE(error(R"({"triggers": [""], "structures": [{"begin": "<g>", "schema": {}, "end": ""}]})")
                  .find("non-empty strings"), std::string::npos);
    EXPECT_NE(error(R"({"triggers": ["<"], "structures": [{"begin": "<g>", "schema": 3, "end": ""}]})").find(".schema"),
              std::string::npos);
    EXPECT_NE(error(R"({"triggers": ["<"], "structures": [{"begin": "<g>", "schema": {"not": {}}, "end": ""}]})")
                  .find("json_schema:"), std::string::npos);
    EXPECT_NE(error("[1]").find("a JSON object"), std::string::npos);
    const std::string long_trigger = std::string(5000, 'a');
    EXPECT_NE(error(R"({"triggers": [")" + long_trigger + R"("], "structures": [{"begin": ")" + long_trigger +
                    R"(", "schema": {}, "end": ""}]})").find("at most 4096 are taken"), std::string::npos);
}

namespace {

// The text a structural tag accepts whole, and the prefixes it can still complete.
struct TagLanguage {
    std::optional<LazyDfa> dfa;
    std::string error;

    explicit TagLanguage(std::string_view spec) {
        auto nfa = structural_tag_nfa(spec, JsonWhitespace{JsonWhitespace::Mode::kCompact, ""});
        if (nfa.ok()) {
            dfa.emplace(std::move(nfa.value()));
        } else {
            error = nfa.status().message();
        }
    }
    bool matches(std::string_view text) {
        EXPECT_TRUE(dfa) << error;
        if (!dfa) return false;
        const std::int32_t end = dfa->walk(dfa->start(), text);
        return end != LazyDfa::kDead && dfa->accepting(end);
    }
    bool prefix(std::string_view text) {
        EXPECT_TRUE(dfa) << error;
        return dfa && dfa->walk(dfa->start(), text) != LazyDfa::kDead;
    }
};

std::string tag_spec(std::string_view format) {
    return R"({"type": "structural_tag", "format": )" + std::string(format) + "}";
}

// xgrammar's converter test's tags: "A1" L1 "A" and "A2" L2 "A", both opened by the trigger "A".
std::string a_tags() {
    return R"([{"begin": "A1", "content": {"type": "const_string", "value": "L1"}, "end": "A"},
               {"begin": "A2", "content": {"type": "const_string", "value": "L2"}, "end": "A"}])";
}

// `head` (a format's opening fields) over a_tags(), with the two flags.
std::string over_a_tags(std::string_view head, bool at_least_one, bool stop_after_first) {
    return tag_spec(std::string(head) + R"(, "tags": )" + a_tags() + R"(, "at_least_one": )" +
                    (at_least_one ? "true" : "false") + R"(, "stop_after_first": )" +
                    (stop_after_first ? "true" : "false") + "}");
}

std::string triggered_a(bool at_least_one, bool stop_after_first) {
    return over_a_tags(R"({"type": "triggered_tags", "triggers": ["A"])", at_least_one, stop_after_first);
}

}  // namespace

// xgrammar's structural tag (structural_tag.cc): leaves and combinations.
TEST(StructuralTagFormatTest, StringsSchemasAndCombinations) {
    TagLanguage seq(tag_spec(R"({"type": "sequence", "elements": [
        {"type": "const_string", "value": "A"},
        {"type": "or", "elements": [{"type": "const_string", "value": "1"}, {"type": "regex", "pattern": "[0-9]{2}"},
                                    {"type": "grammar", "grammar": "root ::= \"x\" [a-c]+"}]},
        {"type": "json_schema", "json_schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                "required": ["n"]}}]})"));
    EXPECT_TRUE(seq.matches(R"(A1{"n": 3})"));
    EXPECT_TRUE(seq.matches(R"(A42{"n": -7})"));
    EXPECT_TRUE(seq.matches(R"(Axcab{"n": 0})"));
    EXPECT_FALSE(seq.prefix("B"));
    EXPECT_FALSE(seq.prefix("A123"));
    EXPECT_FALSE(seq.prefix(R"(A1{"m")")) << "undeclared properties are refused (xgrammar's strict mode)";
    EXPECT_FALSE(seq.matches("A1"));

    TagLanguage repeat(tag_spec(R"({"type": "repeat", "min": 2, "max": 3, "content": {"value": "ab"}})"));
    EXPECT_FALSE(repeat.matches("ab"));
    EXPECT_TRUE(repeat.matches("abab"));
    EXPECT_TRUE(repeat.matches("ababab"));
    EXPECT_FALSE(repeat.prefix("abababab"));
    TagLanguage loops(tag_spec(R"({"type": "sequence", "elements": [
        {"type": "plus", "content": {"type": "const_string", "value": "p"}},
        {"type": "star", "content": {"type": "const_string", "value": "s"}},
        {"type": "optional", "content": {"type": "const_string", "value": "o"}},
        {"type": "repeat", "min": 1, "max": -1, "content": {"type": "const_string", "value": "r"}}]})"));
    EXPECT_TRUE(loops.matches("pr"));
    EXPECT_TRUE(loops.matches("pppssorrr"));
    EXPECT_FALSE(loops.matches("sr"));
    EXPECT_FALSE(loops.matches("poor"));
    EXPECT_FALSE(loops.matches("pso"));

    // A schema's properties come in its own order, not sorted.
    TagLanguage ordered(tag_spec(R"({"type": "json_schema", "json_schema": {"type": "object",
        "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["b", "a"]}})"));
    EXPECT_TRUE(ordered.matches(R"({"b": 1, "a": 2})"));
    EXPECT_FALSE(ordered.prefix(R"({"a")"));
    TagLanguage ordered_legacy(R"({"triggers": ["<"], "structures": [{"begin": "<x>", "end": "</x>", "schema":
        {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
         "required": ["b", "a"]}}]})");
    EXPECT_TRUE(ordered_legacy.matches(R"(<x>{"b": 1, "a": 2}</x>)"));

    // No "type": the shape its keys fit (a tag, a const_string); a null schema takes any JSON.
    TagLanguage untyped(tag_spec(R"({"begin": "<", "content": {"json_schema": null}, "end": ">"})"));
    EXPECT_TRUE(untyped.matches(R"(<{"any": [1, "x"]}>)"));
    EXPECT_TRUE(untyped.matches("<7>"));
    EXPECT_FALSE(untyped.prefix("<7x"));
}

// A tag's content stops at the tag's end: any_text and free text may not write it (xgrammar's
// automatic end detection), through the sequences and ors between them.
TEST(StructuralTagFormatTest, TagsCloseAtTheirEnd) {
    TagLanguage text(tag_spec(R"({"type": "tag", "begin": "BEG", "content": {"type": "any_text"}, "end": "END"})"));
    EXPECT_TRUE(text.matches("BEGHello!END"));
    EXPECT_TRUE(text.matches("BEGENENNDENEND"));
    EXPECT_FALSE(text.prefix("BEGENENDEN"));
    EXPECT_FALSE(text.prefix("BEGBEGENDEND"));
    EXPECT_FALSE(text.matches("BEGHello"));

    TagLanguage nested(tag_spec(R"({"type": "tag", "begin": "<s>", "end": ["</s>", "</S>"], "content":
        {"type": "sequence", "elements": [{"type": "const_string", "value": "[T]"},
                                          {"type": "any_text", "excludes": ["bad"]}]}})"));
    EXPECT_TRUE(nested.matches("<s>[T]abc</s>"));
    EXPECT_TRUE(nested.matches("<s>[T]abc</S>"));
    EXPECT_FALSE(nested.prefix("<s>[T]a</s>b"));
    EXPECT_FALSE(nested.prefix("<s>[T]a bad"));
    EXPECT_FALSE(nested.prefix("<s>abc"));

    TagLanguage optional_end(
        tag_spec(R"({"type": "tag", "begin": "BEG", "content": {"value": "X"}, "end": ["", "END"]})"));
    EXPECT_TRUE(optional_end.matches("BEGX"));
    EXPECT_TRUE(optional_end.matches("BEGXEND"));

    TagLanguage thinking(tag_spec(R"({"type": "tag", "begin": "<r>", "end": "</r>", "content":
        {"type": "triggered_tags", "triggers": ["<f"], "tags": [{"begin": "<f>", "content": {"value": "1"},
                                                                  "end": "</f>"}]}})"));
    EXPECT_TRUE(thinking.matches("<r>hello <f>1</f> bye</r>"));
    EXPECT_FALSE(thinking.prefix("<r>hello</r>more"));
    EXPECT_FALSE(thinking.prefix("<r><f>2"));
}

// triggered_tags, with xgrammar's converter test's cases for at_least_one and stop_after_first.
TEST(StructuralTagFormatTest, TriggeredTagsFlags) {
    TagLanguage any(triggered_a(false, false));
    EXPECT_TRUE(any.matches(""));
    EXPECT_TRUE(any.matches("text"));
    EXPECT_TRUE(any.matches("A1L1A"));
    EXPECT_TRUE(any.matches("xA1L1AyA2L2Az"));
    EXPECT_FALSE(any.prefix("AA"));
    EXPECT_FALSE(any.prefix("A1L2A"));

    TagLanguage at_least_one(triggered_a(true, false));
    EXPECT_FALSE(at_least_one.matches(""));
    EXPECT_FALSE(at_least_one.prefix("text"));
    EXPECT_TRUE(at_least_one.matches("A1L1Atext"));
    EXPECT_TRUE(at_least_one.matches("A1L1AtextA2L2A"));

    TagLanguage first_only(triggered_a(false, true));
    EXPECT_TRUE(first_only.matches("text"));
    EXPECT_TRUE(first_only.matches("xA1L1A"));
    EXPECT_FALSE(first_only.prefix("A1L1Atext"));

    TagLanguage exactly_one(triggered_a(true, true));
    EXPECT_TRUE(exactly_one.matches("A1L1A"));
    EXPECT_TRUE(exactly_one.matches("A2L2A"));
    EXPECT_FALSE(exactly_one.prefix("xA1L1A"));
    EXPECT_FALSE(exactly_one.prefix("A1L1AA2L2A"));

    TagLanguage excludes(tag_spec(R"({"type": "triggered_tags", "triggers": ["A"], "excludes": ["STOP"],
                                      "tags": )" + a_tags() + "}"));
    EXPECT_TRUE(excludes.matches("xA1L1AST"));
    EXPECT_FALSE(excludes.prefix("xA1L1ASTOP"));

    // The legacy shape with SGLang's at_least_one.
    TagLanguage legacy(R"({"type": "structural_tag", "triggers": ["<f="], "at_least_one": true,
        "structures": [{"begin": "<f=t>", "schema": {"type": "integer"}, "end": "</f>"}]})");
    EXPECT_FALSE(legacy.prefix("text"));
    EXPECT_TRUE(legacy.matches("<f=t>12</f> done"));
}

TEST(StructuralTagFormatTest, TagsWithSeparatorAndDispatch) {
    const auto separated = [](bool at_least_one, bool stop_after_first) {
        return over_a_tags(R"({"type": "tags_with_separator", "separator": "AA")", at_least_one, stop_after_first);
    };
    TagLanguage list(separated(false, false));
    EXPECT_TRUE(list.matches(""));
    EXPECT_TRUE(list.matches("A1L1AAAA2L2A"));
    EXPECT_FALSE(list.prefix("A1L1AA2L2A"));
    EXPECT_FALSE(list.prefix("x"));
    TagLanguage non_empty(separated(true, false));
    EXPECT_FALSE(non_empty.matches(""));
    EXPECT_TRUE(non_empty.matches("A2L2A"));
    TagLanguage one(separated(false, true));
    EXPECT_TRUE(one.matches(""));
    EXPECT_TRUE(one.matches("A1L1A"));
    EXPECT_FALSE(one.prefix("A1L1AAAA2L2A"));

    TagLanguage dispatch(tag_spec(R"({"type": "dispatch", "excludes": ["STOP"],
        "rules": [["<a>", {"type": "const_string", "value": "1</a>"}]]})"));
    EXPECT_TRUE(dispatch.matches("x<a>1</a>y<a>1</a>"));
    EXPECT_FALSE(dispatch.prefix("<a>2"));
    EXPECT_FALSE(dispatch.prefix("xSTOP"));
    // A tag no text can finish is never begun: the automaton has no dead ends to write into.
    TagLanguage impossible(tag_spec(R"({"type": "triggered_tags", "triggers": ["<"], "tags": [
        {"begin": "<a>", "content": {"type": "regex", "pattern": "[^\\s\\S]"}, "end": "</a>"},
        {"begin": "<b>", "content": {"type": "const_string", "value": "1"}, "end": "</b>"}]})"));
    EXPECT_FALSE(impossible.prefix("x<a"));
    EXPECT_TRUE(impossible.matches("x<b>1</b>"));

    TagLanguage once(tag_spec(R"({"type": "dispatch", "loop": false,
        "rules": [["<a>", {"type": "const_string", "value": "1</a>"}]]})"));
    EXPECT_TRUE(once.matches("x<a>1</a>"));
    EXPECT_FALSE(once.prefix("x<a>1</a>y"));
}

TEST(StructuralTagFormatTest, RefusesWhatItCannotConstrain) {
    const auto error = [](std::string_view format) {
        auto r = structural_tag_nfa(tag_spec(format));
        return r.ok() ? std::string() : r.status().message();
    };
    const auto refused_with = [&](std::string_view format, std::string_view message) {
        const std::string got = error(format);
        EXPECT_NE(got.find(message), std::string::npos) << format << " gave: " << got;
    };
    refused_with(R"({"type": "tag", "begin": "<", "content": {"type": "any_text"}, "end": ""})",
                 "When the content is unlimited, at least one end string must be non-empty");
    refused_with(R"({"type": "tag", "begin": "<", "content": {"value": "x"}, "end": []})",
                 "end array cannot be empty");
    refused_with(R"({"type": "triggered_tags", "triggers": ["A", "A1"], "tags": )" + a_tags() + "}",
                 "One tag matches multiple triggers");
    refused_with(R"({"type": "triggered_tags", "triggers": ["B"], "tags": )" + a_tags() + "}",
                 "the begin \"A1\" starts with none of the triggers");
    refused_with(R"({"type": "triggered_tags", "triggers": [], "tags": )" + a_tags() + "}",
                 "triggers must be non-empty");
    refused_with(R"({"type": "repeat", "min": 3, "max": 2, "content": {"value": "x"}})", "Repeat min must be <= max");
    refused_with(R"({"type": "sequence", "elements": []})", "Sequence format must have at least one element");
    refused_with(R"({"type": "frobnicate"})", "Format type not recognized: frobnicate");
    refused_with(R"({"nothing": 1})", "Invalid format");
    refused_with(R"({"type": "token", "token": 5})", "token-level format \"token\" is not supported");
    refused_with(R"({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"})", "style \"qwen_xml\"");
    refused_with(R"({"type": "any_text", "max_chars": 10})", "any_text max_chars is not supported");
    refused_with(R"J({"type": "regex", "pattern": "(?=x)"})J", "regex:");
    refused_with(R"({"type": "triggered_tags", "triggers": ["A"], "at_least_one": 1, "tags": )" + a_tags() + "}",
                 "at_least_one must be a boolean");
    std::string deep = R"({"type": "const_string", "value": "x"})";
    for (int i = 0; i < kMaxFormatDepth + 1; ++i) deep = R"({"type": "optional", "content": )" + deep + "}";
    refused_with(deep, "nest more than 64 deep");
    refused_with(R"({"type": "repeat", "min": 10000, "max": 10000, "content": {"type": "json_schema",
                     "json_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}})",
                 "automaton states");
    EXPECT_NE(structural_tag_nfa(R"({"type": "structural_tag"})").status().message().find("must have a format"),
              std::string::npos);
    EXPECT_NE(structural_tag_nfa(R"({"type": "other", "format": {"value": "x"}})").status().message().find(
                  "type must be a string \"structural_tag\""),
              std::string::npos);
}

TEST(EbnfTest, RefusesWhatItCannotRead) {
    const auto error = [](std::string_view grammar) {
        auto r = ebnf_to_regex(grammar);
        return r.ok() ? std::string() : r.status().message();
    };
    EXPECT_NE(error(R"(start ::= "a")").find("no 'root' rule"), std::string::npos);
    EXPECT_NE(error(R"(root ::= item)").find("rule 'item' is used but not defined"), std::string::npos);
    EXPECT_NE(error(R"(root ::= "a
")").find("control character"), std::string::npos);
    EXPECT_NE(error(R"(root ::= "a)").find("closing '\"'"), std::string::npos);
    EXPECT_NE(error(R"g(root ::= (= "a") "b")g").find("lookahead"), std::string::npos);
    EXPECT_NE(error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    EXPECT_NE(error(R"(root = "a")").find("'::='"), std::string::npos);
    // Inlining that doubles at every level is bounded.
    std::string doubling = "root ::= r0\n";
    for (int i = 0; i < 40; ++i) doubling += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " r" +
                                             std::to_string(i + 1) + "\n";
    doubling += "r40 ::= \"a\"\n";
    EXPECT_NE(error(doubling).find("too large"), std::string::npos);
}

// A toy vocabulary: single characters, a few merges, two special tokens and a stop token.
std::shared_ptr<const Vocabulary> toy_vocabulary() {
    std::vector<std::string> bytes = {"<eos>", "<special>", "{", "}", "\"", "a", "b", "ab", "\"a", "{\"", ":", " ",
                                      "1", "12", "\": ", "é", "\xC3", "\xA9", ""};
    std::vector<bool> special(bytes.size(), false);
    special[0] = special[1] = true;
    return std::make_shared<Vocabulary>(bytes, special);
}

std::vector<std::int32_t> allowed(GrammarMatcher& m) {
    auto mask = m.allowed_tokens();
    EXPECT_TRUE(mask.ok()) << mask.status().to_string();
    std::vector<std::int32_t> ids;
    if (!mask.ok()) return ids;
    for (std::int32_t t = 0; t < 32 * static_cast<std::int32_t>(mask.value()->size()); ++t)
        if (bitmask_allows(*mask.value(), t)) ids.push_back(t);
    return ids;
}

TEST(TokenGrammarTest, MasksFollowTheMatch) {
    auto grammar = std::make_shared<CompiledGrammar>(compile_regex(R"((ab)+1?)").value(), toy_vocabulary());
    GrammarMatcher m(grammar, /*stop_tokens=*/{0});
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{5, 7}));  // "a", "ab"
    EXPECT_FALSE(m.accept(6));                                 // "b" cannot start
    EXPECT_FALSE(m.accept(0));                                 // nor can the stop token
    ASSERT_TRUE(m.accept(7));
    EXPECT_TRUE(m.can_stop());
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{0, 5, 7, 12}));  // stop, "a", "ab", "1"
    ASSERT_TRUE(m.accept(12));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{0}));  // only the stop token is left
    EXPECT_FALSE(m.terminated());
    ASSERT_TRUE(m.accept(0));
    EXPECT_TRUE(m.terminated());
}

TEST(TokenGrammarTest, MultiByteCharactersSplitOverTokens) {
    auto grammar = std::make_shared<CompiledGrammar>(compile_regex("é+").value(), toy_vocabulary());
    GrammarMatcher m(grammar, {0});
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{15, 16}));  // "é" and its first byte
    ASSERT_TRUE(m.accept(16));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{17}));  // the second byte, no stop mid-character
    ASSERT_TRUE(m.accept(17));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{0, 15, 16}));
}

TEST(TokenGrammarTest, JsonSchemaOverTheVocabulary) {
    auto grammar = std::make_shared<CompiledGrammar>(
        compile_regex(schema_regex(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                                      "required": ["a"]})",
                                   {.mode = JsonWhitespace::Mode::kCompact}))
            .value(),
        toy_vocabulary());
    GrammarMatcher m(grammar, {0});
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{2, 9}));  // "{", "{\""
    for (std::int32_t t : {9, 5, 14, 13}) ASSERT_TRUE(m.accept(t)) << t;  // {"  a  ":   12
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{3, 12, 13}));
    ASSERT_TRUE(m.accept(3));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{0}));
}

// SentencePiece's Strip decoder drops the output's first space: the grammar sees the text
// without it, so " a" may open "ab", and a lone " " leaves the start as it is, once.
TEST(TokenGrammarTest, TheDetokenizersStrippedSpaceIsNotSeen) {
    const std::vector<std::string> bytes = {"<eos>", " ", " a", "a", "b", " b", "  a"};
    auto vocabulary = std::make_shared<Vocabulary>(bytes, std::vector<bool>{true}, /*leading_spaces_stripped=*/1);
    auto grammar = std::make_shared<CompiledGrammar>(compile_regex("a b?").value(), vocabulary);
    GrammarMatcher m(grammar, {0});
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{1, 2, 3}));  // " ", " a", "a"; not "  a"
    GrammarMatcher after_space(grammar, {0});
    ASSERT_TRUE(after_space.accept(1));
    EXPECT_EQ(allowed(after_space), (std::vector<std::int32_t>{3}));  // the space is spent
    ASSERT_TRUE(m.accept(2));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{1, 5}));  // spaces count again inside
    ASSERT_TRUE(m.accept(5));
    EXPECT_EQ(allowed(m), (std::vector<std::int32_t>{0}));
}

TEST(TokenGrammarTest, AVocabularyThatCannotSpellThePatternIsAnError) {
    // "xyz" has no tokens; [^\s\S] matches nothing at all (found by the fuzzer: a DFA with no state).
    for (const char* pattern : {"xyz", "[^\\s\\S]", "a[^\\s\\S]"}) {
        auto grammar = std::make_shared<CompiledGrammar>(compile_regex(pattern).value(), toy_vocabulary());
        GrammarMatcher m(grammar, {0});
        auto mask = m.allowed_tokens();
        ASSERT_FALSE(mask.ok()) << pattern;
        EXPECT_NE(mask.status().message().find("no token of the vocabulary can continue"), std::string::npos);
        EXPECT_FALSE(m.accept(0)) << pattern;
    }
}

}  // namespace
}  // namespace tessera::grammar
