// grammar/json_schema.cpp — see json_schema.h. The building blocks follow outlines'
// json_schema.py (build_regex_from_schema, the regex SGLang's outlines backend constrains
// with); the whitespace choices follow xgrammar's json_schema_to_ebnf.

#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/json_text.h"
#include "grammar/regex.h"

namespace tessera::grammar {
namespace {

using Json = nlohmann::ordered_json;

// A JSON string's characters: anything but a quote, a backslash or a control character, or
// an escape.
constexpr std::string_view kStringChar = R"(([^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
constexpr std::string_view kInteger = R"(-?(0|[1-9][0-9]*))";
constexpr std::string_view kNumber = R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)";
constexpr std::string_view kBoolean = "(true|false)";
constexpr std::string_view kNull = "null";
constexpr std::string_view kNothing = R"([^\s\S])";  // matches no text

// outlines' FORMAT_TO_REGEX.
constexpr std::string_view kDate = R"((?:\d{4})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[1-2][0-9]|3[0-1]))";
constexpr std::string_view kTime = R"((2[0-3]|[01][0-9]):([0-5][0-9]):([0-5][0-9])(\.[0-9]+)?(Z)?)";
constexpr std::string_view kUuid =
    R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})";

std::int64_t pow10(int n) {
    std::int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= 10;
    return p;
}

int digits(std::int64_t v) { return v < 10 ? 1 : 1 + digits(v / 10); }

// The decimal numbers in [a, b] (0 <= a <= b), without leading zeros, as alternatives: each a
// run of numbers that share their leading digits, differ in one digit and take every value in
// the digits after it.
std::string natural_range(std::int64_t a, std::int64_t b) {
    std::string out;
    if (a == 0) {
        // Alone: a block from 0 would write the numbers after it with leading zeros.
        out = "0";
        a = 1;
    }
    while (a <= b) {
        int p = 0;  // trailing digits the block spans fully
        while (p + 1 < 19 && a % pow10(p + 1) == 0 && a + pow10(p + 1) - 1 <= b) ++p;
        const std::int64_t step = pow10(p);
        const std::int64_t digit = (a / step) % 10;
        const std::int64_t blocks = std::min<std::int64_t>(10 - digit, (b - a + 1) / step);
        const std::int64_t last = a + blocks * step - 1;
        std::string block = a / step / 10 > 0 ? std::to_string(a / step / 10) : "";
        block += blocks == 1 ? std::to_string(digit) : fmt::format("[{}-{}]", digit, digit + blocks - 1);
        if (p > 0) block += fmt::format("[0-9]{{{}}}", p);
        out += (out.empty() ? "" : "|") + block;
        a = last + 1;
    }
    return out;
}

// The naturals from a up, unbounded.
std::string natural_from(std::int64_t a) {
    const int n = digits(a);
    return natural_range(a, pow10(n) - 1) + fmt::format("|[1-9][0-9]{{{},}}", n);
}

}  // namespace

// Integers in [lo, hi]; an absent bound is open.
std::string integer_range_regex(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
    std::vector<std::string> parts;
    // Negative part: -n for n in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
        const std::int64_t n_lo = hi && *hi < 0 ? -*hi : 1;
        parts.push_back("-(" + (lo ? natural_range(n_lo, -*lo) : natural_from(n_lo)) + ")");
    }
    if (!hi || *hi >= 0) {
        const std::int64_t a = lo && *lo > 0 ? *lo : 0;
        parts.push_back(hi ? natural_range(a, *hi) : natural_from(a));
    }
    std::string out = "(";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? "|" : "") + parts[i];
    return out + ")";
}

namespace {

// Keywords that only describe (or that a regex here cannot enforce but does not need to).
bool is_annotation(const std::string& key) {
    static const char* const kAnnotations[] = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly", "$defs", "definitions", "strict", "name", "format", "contentMediaType",
        "contentEncoding"};
    for (const char* a : kAnnotations)
        if (key == a) return true;
    return false;
}

class Converter {
 public:
    Converter(const Json& root, const JsonWhitespace& ws) : root_(root) {
        switch (ws.mode) {
            case JsonWhitespace::Mode::kAny:
                ws_ = R"([ \n\t]*)";
                item_sep_ = ws_ + "," + ws_;
                key_sep_ = ws_ + ":" + ws_;
                break;
            case JsonWhitespace::Mode::kCompact:
                item_sep_ = ", ";
                key_sep_ = ": ";
                break;
            case JsonWhitespace::Mode::kPattern:
                ws_ = "(" + ws.pattern + ")";
                item_sep_ = ws_ + "," + ws_;
                key_sep_ = ws_ + ":" + ws_;
                break;
        }
    }

    StatusOr<std::string> value(const Json& schema, int depth) {
        if (schema.is_boolean()) {
            if (!schema.get<bool>()) return Status::InvalidArgument("json_schema: the schema `false` admits no value");
            return any_value(depth);
        }
        if (!schema.is_object()) return Status::InvalidArgument("json_schema: a schema must be an object or a boolean");
        for (const auto& [key, unused] : schema.items()) {
            if (is_annotation(key)) continue;
            static const char* const kHandled[] = {
                "type", "properties", "required", "additionalProperties", "items", "prefixItems",
                "minItems", "maxItems", "minLength", "maxLength", "pattern", "enum", "const", "anyOf",
                "oneOf", "allOf", "$ref", "unevaluatedProperties", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum"};
            bool handled = false;
            for (const char* h : kHandled) handled = handled || key == h;
            if (!handled) {
                return Status::InvalidArgument(fmt::format(
                    "json_schema: the keyword '{}' is not supported by tessera's grammar backend (supported: type, "
                    "properties, required, additionalProperties, items, prefixItems, minItems, maxItems, minLength, "
                    "maxLength, pattern, format, enum, const, anyOf, oneOf, allOf with one member, $ref)",
                    key));
            }
        }
        if (schema.contains("$ref")) return ref(schema["$ref"], depth);
        if (schema.contains("const")) return literal(schema["const"]);
        if (schema.contains("enum")) {
            const Json& values = schema["enum"];
            if (!values.is_array() || values.empty())
                return Status::InvalidArgument("json_schema: enum must be a non-empty array");
            std::string out = "(";
            for (std::size_t i = 0; i < values.size(); ++i) {
                if (i > 0) out += "|";
                out += literal(values[i]);
            }
            return out + ")";
        }
        for (const char* combinator : {"anyOf", "oneOf"}) {
            if (!schema.contains(combinator)) continue;
            const Json& options = schema[combinator];
            if (!options.is_array() || options.empty())
                return Status::InvalidArgument(fmt::format("json_schema: {} must be a non-empty array", combinator));
            std::string out = "(";
            for (std::size_t i = 0; i < options.size(); ++i) {
                TSR_ASSIGN_OR_RETURN(std::string option, value(options[i], depth));
                out += (i > 0 ? "|" : "") + option;
            }
            return out + ")";
        }
        if (schema.contains("allOf")) {
            const Json& parts = schema["allOf"];
            if (!parts.is_array() || parts.size() != 1)
                return Status::InvalidArgument("json_schema: allOf is supported with exactly one member");
            return value(parts[0], depth);
        }
        if (!schema.contains("type")) {
            if (auto bound = number_bound(schema)) return *bound;
            if (schema.contains("properties")) return object(schema, depth);
            if (schema.contains("items") || schema.contains("prefixItems")) return array(schema, depth);
            return any_value(depth);
        }
        const Json& type = schema["type"];
        if (type.is_array()) {
            if (type.empty()) return Status::InvalidArgument("json_schema: type must not be an empty list");
            std::string out = "(";
            for (std::size_t i = 0; i < type.size(); ++i) {
                TSR_ASSIGN_OR_RETURN(std::string one, typed(schema, type[i], depth));
                out += (i > 0 ? "|" : "") + one;
            }
            return out + ")";
        }
        return typed(schema, type, depth);
    }

 private:
    StatusOr<std::string> typed(const Json& schema, const Json& type, int depth) {
        if (!type.is_string()) return Status::InvalidArgument("json_schema: type must be a string or a list of them");
        const std::string t = type.get<std::string>();
        if (t == "object") return object(schema, depth);
        if (t == "array") return array(schema, depth);
        if (t == "string") return string(schema);
        if (t == "integer") return integer(schema);
        if (t == "number") {
            if (auto bound = number_bound(schema)) return *bound;
            return std::string(kNumber);
        }
        if (t == "boolean") return std::string(kBoolean);
        if (t == "null") return std::string(kNull);
        return Status::InvalidArgument(fmt::format("json_schema: unknown type '{}'", t));
    }

    // The refusal of a bound on a value that may be a non-integer number.
    static std::optional<Status> number_bound(const Json& schema) {
        for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
            if (!schema.contains(bound)) continue;
            return Status::InvalidArgument(
                fmt::format("json_schema: '{}' on a number is not supported by tessera's grammar backend (it bounds "
                            "integers only: use \"type\": \"integer\", or drop the bound)",
                            bound));
        }
        return std::nullopt;
    }

    // An integer, within minimum / maximum / exclusiveMinimum / exclusiveMaximum when given
    // (a boolean exclusive* is draft 4's form of the same).
    static StatusOr<std::string> integer(const Json& schema) {
        constexpr double kLimit = 1e15;
        std::optional<std::int64_t> lo;
        std::optional<std::int64_t> hi;
        for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
            if (!schema.contains(key)) continue;
            const Json& v = schema[key];
            const std::string_view name = key;
            const bool lower = name == "minimum" || name == "exclusiveMinimum";
            const bool exclusive = name.starts_with("exclusive");
            if (v.is_boolean()) continue;  // draft 4: applied with minimum / maximum below
            if (!v.is_number() || std::abs(v.get<double>()) > kLimit)
                return Status::InvalidArgument(fmt::format("json_schema: {} must be a number within ±1e15", key));
            const double d = v.get<double>();
            const bool draft4_exclusive =
                !exclusive && schema.contains(lower ? "exclusiveMinimum" : "exclusiveMaximum") &&
                schema[lower ? "exclusiveMinimum" : "exclusiveMaximum"].is_boolean() &&
                schema[lower ? "exclusiveMinimum" : "exclusiveMaximum"].get<bool>();
            const bool strict = exclusive || draft4_exclusive;
            if (lower) {
                auto b = static_cast<std::int64_t>(std::ceil(d));
                if (strict && static_cast<double>(b) == d) ++b;
                lo = lo ? std::max(*lo, b) : b;
            } else {
                auto b = static_cast<std::int64_t>(std::floor(d));
                if (strict && static_cast<double>(b) == d) --b;
                hi = hi ? std::min(*hi, b) : b;
            }
        }
        if (!lo && !hi) return std::string(kInteger);
        if (lo && hi && *lo > *hi)
            return Status::InvalidArgument("json_schema: no integer lies within the integer's minimum and maximum");
        return integer_range_regex(lo, hi);
    }

    static StatusOr<int> count(const Json& schema, const char* key) {
        if (!schema.contains(key)) return -1;
        const Json& v = schema[key];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 100000)
            return Status::InvalidArgument(fmt::format("json_schema: {} must be an integer from 0 to 100000", key));
        return static_cast<int>(v.get<std::int64_t>());
    }

    static std::string bounds(int min, int max) {
        if (min <= 0 && max < 0) return "*";
        if (max < 0) return fmt::format("{{{},}}", min);
        return fmt::format("{{{},{}}}", std::max(min, 0), max);
    }

    StatusOr<std::string> string(const Json& schema) {
        if (schema.contains("pattern")) {
            if (!schema["pattern"].is_string()) return Status::InvalidArgument("json_schema: pattern must be a string");
            std::string pattern = schema["pattern"].get<std::string>();
            if (pattern.starts_with("^")) pattern.erase(0, 1);
            if (pattern.ends_with("$") && !pattern.ends_with("\\$")) pattern.pop_back();
            TSR_RETURN_IF_ERROR(parse_regex(pattern).status());
            return "\"(" + pattern + ")\"";
        }
        if (schema.contains("format") && schema["format"].is_string()) {
            const std::string format = schema["format"].get<std::string>();
            if (format == "date") return "\"" + std::string(kDate) + "\"";
            if (format == "time") return "\"" + std::string(kTime) + "\"";
            if (format == "date-time") return "\"" + std::string(kDate) + "T" + std::string(kTime) + "\"";
            if (format == "uuid") return "\"" + std::string(kUuid) + "\"";
        }
        TSR_ASSIGN_OR_RETURN(const int min, count(schema, "minLength"));
        TSR_ASSIGN_OR_RETURN(const int max, count(schema, "maxLength"));
        if (max >= 0 && min > max) return Status::InvalidArgument("json_schema: minLength is greater than maxLength");
        return "\"" + std::string(kStringChar) + bounds(min, max) + "\"";
    }

    // Items in order, separated by item_sep_; each required, optional or (the undeclared
    // properties) repeated. `from`: the index of the first item that may still come.
    struct Item {
        std::string regex;
        enum class Count { kOne, kOptional, kMany } count;
    };
    std::string continuation(const std::vector<Item>& items, std::size_t from) {
        std::string out;
        for (std::size_t j = from; j < items.size(); ++j) {
            const std::string sep_item = "(" + item_sep_ + items[j].regex + ")";
            switch (items[j].count) {
                case Item::Count::kOne: out += item_sep_ + items[j].regex; break;
                case Item::Count::kOptional: out += sep_item + "?"; break;
                case Item::Count::kMany: out += sep_item + "*"; break;
            }
        }
        return out;
    }
    std::string sequence(const std::vector<Item>& items, std::size_t from) {
        if (from == items.size()) return "";
        const Item& first = items[from];
        std::string present = first.regex;
        if (first.count == Item::Count::kMany) present += "(" + item_sep_ + first.regex + ")*";
        present += continuation(items, from + 1);
        if (first.count == Item::Count::kOne) return present;
        return "(" + present + "|" + sequence(items, from + 1) + ")";
    }

    StatusOr<std::string> object(const Json& schema, int depth) {
        if (depth >= kMaxNesting) return std::string(kNothing);
        const Json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
        if (properties && !properties->is_object())
            return Status::InvalidArgument("json_schema: properties must be an object");
        std::vector<std::string> required;
        if (schema.contains("required")) {
            if (!schema["required"].is_array()) return Status::InvalidArgument("json_schema: required must be a list");
            for (const Json& name : schema["required"]) {
                if (!name.is_string()) return Status::InvalidArgument("json_schema: required must list strings");
                required.push_back(name.get<std::string>());
                if (!properties || !properties->contains(required.back())) {
                    return Status::InvalidArgument(fmt::format(
                        "json_schema: required property '{}' is not among the properties", required.back()));
                }
            }
        }
        std::vector<Item> items;
        if (properties) {
            for (const auto& [name, sub] : properties->items()) {
                TSR_ASSIGN_OR_RETURN(std::string v, value(sub, depth + 1));
                const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
                items.push_back({regex_escape(Json(name).dump()) + key_sep_ + v,
                                 is_required ? Item::Count::kOne : Item::Count::kOptional});
            }
        }
        // Undeclared properties: only where the schema asks for them, or where it declares
        // none (an object of any shape, as {"type": "object"} means to xgrammar).
        const Json* additional = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
        const bool extras = additional ? !(additional->is_boolean() && !additional->get<bool>()) : !properties;
        if (extras) {
            std::string v = any_value(depth + 1);
            if (additional && additional->is_object()) {
                TSR_ASSIGN_OR_RETURN(v, value(*additional, depth + 1));
            }
            items.push_back({"\"" + std::string(kStringChar) + "*\"" + key_sep_ + v, Item::Count::kMany});
        }
        const std::string open = items.empty() ? "" : ws_;
        return "\\{" + open + sequence(items, 0) + open + "\\}";
    }

    StatusOr<std::string> array(const Json& schema, int depth) {
        if (depth >= kMaxNesting) return std::string(kNothing);
        TSR_ASSIGN_OR_RETURN(int min, count(schema, "minItems"));
        TSR_ASSIGN_OR_RETURN(const int max, count(schema, "maxItems"));
        if (max >= 0 && min > max) return Status::InvalidArgument("json_schema: minItems is greater than maxItems");
        if (schema.contains("prefixItems")) {
            const Json& prefix = schema["prefixItems"];
            if (!prefix.is_array()) return Status::InvalidArgument("json_schema: prefixItems must be a list");
            if (schema.contains("items") && !(schema["items"].is_boolean() && !schema["items"].get<bool>())) {
                return Status::InvalidArgument("json_schema: prefixItems with further items is not supported; "
                                               "set \"items\": false");
            }
            std::vector<Item> items;
            for (std::size_t i = 0; i < prefix.size(); ++i) {
                TSR_ASSIGN_OR_RETURN(std::string v, value(prefix[i], depth + 1));
                const bool needed = static_cast<int>(i) < std::max(min, 0) || min < 0;
                items.push_back({v, needed ? Item::Count::kOne : Item::Count::kOptional});
            }
            // Optional trailing tuple members may only be left out from the end.
            std::string body;
            for (std::size_t i = items.size(); i-- > 0;) {
                const std::string tail = i + 1 < items.size() ? body : "";
                if (items[i].count == Item::Count::kOne) {
                    body = (i > 0 ? item_sep_ : "") + items[i].regex + tail;
                } else {
                    body = "(" + (i > 0 ? item_sep_ : "") + items[i].regex + tail + ")?";
                }
            }
            const std::string open = prefix.empty() ? "" : ws_;
            return "\\[" + open + body + open + "\\]";
        }
        std::string item;
        if (schema.contains("items")) {
            TSR_ASSIGN_OR_RETURN(item, value(schema["items"], depth + 1));
        } else {
            item = any_value(depth + 1);
        }
        if (max == 0) return "\\[" + ws_ + "\\]";
        min = std::max(min, 0);
        const std::string rest = "(" + item_sep_ + item + ")" + bounds(std::max(min - 1, 0), max < 0 ? -1 : max - 1);
        std::string elements = "(" + item + ")" + rest;
        if (min == 0) elements = "(" + elements + ")?";
        return "\\[" + ws_ + elements + ws_ + "\\]";
    }

    StatusOr<std::string> ref(const Json& target, int depth) {
        if (!target.is_string()) return Status::InvalidArgument("json_schema: $ref must be a string");
        const std::string path = target.get<std::string>();
        if (!path.starts_with("#")) {
            return Status::InvalidArgument(
                fmt::format("json_schema: $ref '{}' is not local; only references into the schema (#/...) work", path));
        }
        if (depth >= kMaxNesting) return std::string(kNothing);  // a recursive schema, cut
        const Json* at = &root_;
        try {
            at = &root_.at(Json::json_pointer(path.substr(1)));
        } catch (const std::exception&) {
            return Status::InvalidArgument(fmt::format("json_schema: $ref '{}' names nothing in the schema", path));
        }
        return value(*at, depth + 1);
    }

    std::string literal(const Json& v) const { return "(" + regex_escape(v.dump()) + ")"; }

    // Any JSON value, nested at most kMaxNesting - depth more levels.
    std::string any_value(int depth) {
        std::string out = "(\"" + std::string(kStringChar) + "*\"|" + std::string(kNumber) + "|" +
                          std::string(kBoolean) + "|" + std::string(kNull);
        if (depth < kMaxNesting) {
            const std::string inner = any_value(depth + 1);
            const std::string pair = "\"" + std::string(kStringChar) + "*\"" + key_sep_ + inner;
            out += "|\\{" + ws_ + "(" + pair + "(" + item_sep_ + pair + ")*)?" + ws_ + "\\}";
            out += "|\\[" + ws_ + "(" + inner + "(" + item_sep_ + inner + ")*)?" + ws_ + "\\]";
        }
        return out + ")";
    }

    const Json& root_;
    std::string ws_;
    std::string item_sep_;
    std::string key_sep_;
};

}  // namespace

StatusOr<std::string> json_schema_to_regex(std::string_view schema, const JsonWhitespace& whitespace) {
    TSR_ASSIGN_OR_RETURN(const Json root, parse_json_text(schema, kMaxConstraintJsonDepth, "json_schema"));
    if (whitespace.mode == JsonWhitespace::Mode::kPattern) {
        TSR_RETURN_IF_ERROR(parse_regex(whitespace.pattern).status());
    }
    Converter converter(root, whitespace);
    return converter.value(root, 0);
}

}  // namespace tessera::grammar
