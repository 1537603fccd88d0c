// grammar/structural_tag.cpp — see structural_tag.h. The formats' meanings and messages follow
// xgrammar's structural_tag.cc (ParseFormat, StructuralTagAnalyzer, StructuralTagConverter).

#include "grammar/structural_tag.h"

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "grammar/ebnf.h"
#include "grammar/nfa_builder.h"
#include "grammar/tag_dispatch.h"

namespace tessera::grammar {
namespace {

using Json = nlohmann::ordered_json;  // a schema's properties keep their order

Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

std::string clipped(const Json& j) {
    std::string text = j.dump();
    if (text.size() > 200) text = text.substr(0, 200) + "...";
    return text;
}

// A format's type: its "type", or, without one, the first shape its keys fit in xgrammar's
// order (ParseFormat tries tag, const_string, json_schema, any_text, sequence, or,
// triggered_tags, tags_with_separator, optional, plus, star, repeat, dispatch).
StatusOr<std::string> type_of(const Json& format) {
    if (!format.is_object()) return invalid("Format must be an object");
    if (const auto t = format.find("type"); t != format.end()) {
        if (!t->is_string()) return invalid("Format's type must be a string");
        return t->get<std::string>();
    }
    const auto has = [&](const char* key) { return format.contains(key); };
    if (has("begin") && has("content") && has("end")) return std::string("tag");
    if (has("value")) return std::string("const_string");
    if (has("json_schema")) return std::string("json_schema");
    if (has("excludes")) return std::string("any_text");
    if (has("elements")) return std::string("sequence");
    if (has("triggers") && has("tags")) return std::string("triggered_tags");
    if (has("tags") && has("separator")) return std::string("tags_with_separator");
    if (has("content")) return std::string("optional");
    if (has("rules")) return std::string("dispatch");
    return invalid("Invalid format: " + clipped(format));
}

bool has_excludes(const Json& format) {
    const auto e = format.find("excludes");
    return e != format.end() && e->is_array() && !e->empty();
}

// Whether a format may go on without bound, so that only what follows it can close it
// (StructuralTagAnalyzer IsUnlimited).
bool unlimited(const Json& format) {
    const auto type = type_of(format);
    if (!type.ok()) return false;
    const std::string& t = type.value();
    if (t == "any_text" || t == "triggered_tags" || t == "tags_with_separator" || t == "dispatch" || t == "star" ||
        t == "plus" || t == "token_triggered_tags" || t == "token_dispatch" || t == "any_tokens")
        return true;
    if (t == "optional") return format.contains("content") && unlimited(format["content"]);
    if (t == "repeat") {
        const auto max = format.find("max");
        return (max != format.end() && max->is_number_integer() && max->get<std::int64_t>() == -1) ||
               (format.contains("content") && unlimited(format["content"]));
    }
    if (t == "sequence" || t == "or") {
        const auto elements = format.find("elements");
        if (elements == format.end() || !elements->is_array()) return false;
        for (const Json& e : *elements)
            if (unlimited(e) && !has_excludes(e)) return true;
    }
    return false;
}

StatusOr<std::vector<std::string>> string_list(const Json& list, const std::string& what) {
    std::vector<std::string> out;
    for (const Json& s : list) {
        if (!s.is_string()) return invalid(what);
        out.push_back(s.get<std::string>());
    }
    return out;
}

StatusOr<bool> flag(const Json& format, const char* key) {
    const auto f = format.find(key);
    if (f == format.end() || f->is_null()) return false;
    if (!f->is_boolean()) return invalid(std::string(key) + " must be a boolean");
    return f->get<bool>();
}

class FormatCompiler {
 public:
    FormatCompiler(NfaBuilder& nfa, const JsonWhitespace& whitespace) : nfa_(nfa), whitespace_(whitespace) {}

    // `ends`: the non-empty end strings of the nearest tag around `format`, which its free text
    // may not write (xgrammar's automatic end detection); the tag writes them after it.
    StatusOr<Fragment> compile(const Json& format, const std::vector<std::string>& ends, int depth) {
        if (depth > kMaxFormatDepth)
            return invalid("structural tag formats nest more than " + std::to_string(kMaxFormatDepth) + " deep");
        TSR_ASSIGN_OR_RETURN(const std::string type, type_of(format));
        StatusOr<Fragment> f = compile_typed(type, format, ends, depth + 1);
        if (f.ok()) TSR_RETURN_IF_ERROR(nfa_.check_size());
        return f;
    }

 private:
    StatusOr<Fragment> compile_typed(const std::string& type, const Json& f, const std::vector<std::string>& ends,
                                     int depth) {
        if (type == "const_string") {
            if (!f.contains("value") || !f["value"].is_string())
                return invalid("ConstString format must have a value field with a string");
            return nfa_.literal(f["value"].get<std::string>());
        }
        if (type == "json_schema") return json_schema(f);
        if (type == "qwen_xml_parameter")
            return invalid("the qwen_xml_parameter format (json_schema's qwen_xml style) is not supported: "
                           "tessera's grammar backend writes JSON only; use {\"type\": \"json_schema\"}");
        if (type == "grammar") {
            if (!f.contains("grammar") || !f["grammar"].is_string() || f["grammar"].get<std::string>().empty())
                return invalid("Grammar format must have a grammar field with a non-empty string");
            auto regex = ebnf_to_regex(f["grammar"].get<std::string>());
            if (!regex.ok()) return invalid("grammar: " + regex.status().message());
            return regex_fragment(*regex, "grammar");
        }
        if (type == "regex") {
            if (!f.contains("pattern") || !f["pattern"].is_string() || f["pattern"].get<std::string>().empty())
                return invalid("Regex format must have a pattern field with a non-empty string");
            return regex_fragment(f["pattern"].get<std::string>(), "regex");
        }
        if (type == "any_text") return any_text(f, ends);
        if (type == "sequence" || type == "or") return elements(type, f, ends, depth);
        if (type == "optional" || type == "star" || type == "plus" || type == "repeat")
            return repetition(type, f, ends, depth);
        if (type == "tag") return tag(f, 0, depth);
        if (type == "triggered_tags") return triggered_tags(f, ends, depth);
        if (type == "tags_with_separator") return tags_with_separator(f, depth);
        if (type == "dispatch") return dispatch(f, ends, depth);
        if (type == "token" || type == "exclude_token" || type == "any_tokens" || type == "token_triggered_tags" ||
            type == "token_dispatch")
            return invalid("the token-level format \"" + type + "\" is not supported: tessera's grammar backend "
                           "constrains the text the tokens spell, not token ids; use the string formats");
        return invalid("Format type not recognized: " + type);
    }

    StatusOr<Fragment> regex_fragment(const std::string& pattern, const char* what) {
        auto nfa = compile_regex(pattern);
        if (!nfa.ok()) return invalid(std::string(what) + ": " + nfa.status().message());
        return nfa_.embed(std::move(nfa.value()));
    }

    StatusOr<Fragment> json_schema(const Json& f) {
        // SGLang gives a missing or null schema as {} (_sanitize_structural_format).
        const Json any = Json::object();
        const Json* schema = &any;
        if (const auto s = f.find("json_schema"); s != f.end() && !s->is_null()) schema = &*s;
        if (!schema->is_object() && !schema->is_boolean())
            return invalid("JSON schema format must have a json_schema field with a object or boolean value");
        if (const auto style = f.find("style"); style != f.end() && style->is_string() && *style != "json")
            return invalid("json_schema style \"" + style->get<std::string>() + "\" is not supported: tessera's "
                           "grammar backend writes JSON only (style \"json\")");
        TSR_ASSIGN_OR_RETURN(const bool any_order, flag(f, "any_order"));
        if (any_order)
            return invalid("json_schema any_order is not supported: properties come in the schema's order");
        if (const auto w = f.find("max_whitespace_cnt"); w != f.end() && !w->is_null())
            return invalid("json_schema max_whitespace_cnt is not supported: the server's --constrained-json-* "
                           "whitespace settings apply");
        auto regex = json_schema_to_regex(schema->dump(), whitespace_);
        if (!regex.ok()) return regex.status();  // its messages name json_schema
        return regex_fragment(*regex, "json_schema");
    }

    StatusOr<Fragment> any_text(const Json& f, const std::vector<std::string>& ends) {
        std::vector<std::string> excludes;
        if (const auto e = f.find("excludes"); e != f.end()) {
            if (!e->is_array()) return invalid("AnyText format's excluded_strs field must be an array");
            TSR_ASSIGN_OR_RETURN(excludes,
                                 string_list(*e, "AnyText format's excluded_strs array must contain strings"));
        }
        for (const char* budget : {"max_tokens", "max_chars"})
            if (const auto b = f.find(budget); b != f.end() && !b->is_null())
                return invalid(std::string("any_text ") + budget + " is not supported");
        std::erase_if(excludes, [](const std::string& s) { return s.empty(); });
        excludes.insert(excludes.end(), ends.begin(), ends.end());
        if (excludes.empty()) {
            const Fragment byte = nfa_.empty();
            const std::int32_t after = nfa_.add_state();
            nfa_.edge(byte.start, 0x00, 0xFF, after);
            return nfa_.star({byte.start, after});
        }
        return tag_dispatch(nfa_, {}, /*loop=*/false, excludes);
    }

    StatusOr<Fragment> elements(const std::string& type, const Json& f, const std::vector<std::string>& ends,
                                int depth) {
        const std::string name = type == "or" ? "Or" : "Sequence";
        const auto list = f.find("elements");
        if (list == f.end() || !list->is_array())
            return invalid(name + " format must have an elements field with an array");
        if (list->empty()) return invalid(name + " format must have at least one element");
        std::optional<Fragment> whole;
        for (const Json& e : *list) {
            TSR_ASSIGN_OR_RETURN(const Fragment part, compile(e, ends, depth));
            whole = !whole ? part : type == "or" ? nfa_.alternative(*whole, part) : nfa_.sequence(*whole, part);
        }
        return *whole;
    }

    StatusOr<Fragment> repetition(const std::string& type, const Json& f, const std::vector<std::string>& ends,
                                  int depth) {
        if (!f.contains("content")) return invalid("The " + type + " format must have a content field");
        const Json& content = f["content"];
        if (type == "optional") {
            TSR_ASSIGN_OR_RETURN(const Fragment once, compile(content, ends, depth));
            return nfa_.alternative(once, nfa_.empty());
        }
        std::int64_t min = type == "plus" ? 1 : 0;
        std::int64_t max = -1;
        if (type == "repeat") {
            if (!f.contains("min") || !f["min"].is_number_integer())
                return invalid("Repeat format must have a min field (number)");
            if (!f.contains("max") || !f["max"].is_number_integer())
                return invalid("Repeat format must have a max field (number)");
            min = f["min"].get<std::int64_t>();
            max = f["max"].get<std::int64_t>();
            if (min < 0) return invalid("Repeat min must be >= 0");
            if (max < -1) return invalid("Repeat max must be -1 (unbounded) or >= 0");
            if (max >= 0 && min > max) return invalid("Repeat min must be <= max");
            if (min > kMaxFormatRepeat || max > kMaxFormatRepeat)
                return invalid("Repeat min and max may be at most " + std::to_string(kMaxFormatRepeat) +
                               " here (-1 for no bound)");
        }
        // Copies of the content: min required ones, then max - min optional ones (or a loop).
        Fragment whole = nfa_.empty();
        for (std::int64_t i = 0; i < min; ++i) {
            TSR_ASSIGN_OR_RETURN(const Fragment once, compile(content, ends, depth));
            whole = nfa_.sequence(whole, once);
            TSR_RETURN_IF_ERROR(nfa_.check_size());
        }
        if (max < 0) {
            TSR_ASSIGN_OR_RETURN(const Fragment once, compile(content, ends, depth));
            return nfa_.sequence(whole, nfa_.star(once));
        }
        for (std::int64_t i = min; i < max; ++i) {
            TSR_ASSIGN_OR_RETURN(const Fragment once, compile(content, ends, depth));
            whole = nfa_.sequence(whole, nfa_.alternative(once, nfa_.empty()));
            TSR_RETURN_IF_ERROR(nfa_.check_size());
        }
        return whole;
    }

    // A tag, its begin from byte `skip` on (a trigger already written holds the rest).
    StatusOr<Fragment> tag(const Json& f, std::size_t skip, int depth) {
        if (const auto t = f.find("type"); t != f.end() && *t != "tag")
            return invalid("Tag format's type must be a string \"tag\"");
        const auto begin = f.find("begin");
        if (begin == f.end() || !begin->is_string()) {
            if (begin != f.end() && begin->is_object())
                return invalid("a tag's token begin (a token-level format) is not supported; give the begin text");
            return invalid("Tag format's begin field must be a string");
        }
        if (!f.contains("content")) return invalid("Tag format must have a content field");
        const auto end = f.find("end");
        if (end == f.end()) return invalid("Tag format must have an end field");
        std::vector<std::string> end_strings;
        if (end->is_string()) {
            end_strings.push_back(end->get<std::string>());
        } else if (end->is_array()) {
            if (end->empty()) return invalid("Tag format's end array cannot be empty");
            TSR_ASSIGN_OR_RETURN(end_strings, string_list(*end, "Tag format's end array must contain only strings"));
        } else {
            return invalid("Tag format's end field must be a string or array of strings");
        }
        std::vector<std::string> closing;  // what the content's free text stops before
        for (const std::string& e : end_strings)
            if (!e.empty()) closing.push_back(e);
        const Json& content = f["content"];
        if (closing.empty() && unlimited(content) && !has_excludes(content))
            return invalid("When the content is unlimited, at least one end string must be non-empty");

        const Fragment head = nfa_.literal(std::string_view(begin->get_ref<const std::string&>()).substr(skip));
        TSR_ASSIGN_OR_RETURN(const Fragment body, compile(content, closing, depth));
        std::optional<Fragment> tail;
        for (const std::string& e : end_strings) {
            const Fragment one = nfa_.literal(e);
            tail = tail ? nfa_.alternative(*tail, one) : one;
        }
        return nfa_.sequence(nfa_.sequence(head, body), *tail);
    }

    StatusOr<std::vector<const Json*>> tag_list(const Json& f, const std::string& name) {
        const auto tags = f.find("tags");
        if (tags == f.end() || !tags->is_array()) return invalid(name + " format must have a tags field with an array");
        if (tags->empty()) return invalid(name + " format's tags must be non-empty");
        std::vector<const Json*> out;
        for (const Json& t : *tags) out.push_back(&t);
        return out;
    }

    // Any one of `tags`, whole.
    StatusOr<Fragment> any_tag(const std::vector<const Json*>& tags, int depth) {
        std::optional<Fragment> whole;
        for (const Json* t : tags) {
            TSR_ASSIGN_OR_RETURN(const Fragment one, tag(*t, 0, depth));
            whole = whole ? nfa_.alternative(*whole, one) : one;
        }
        return *whole;
    }

    StatusOr<Fragment> triggered_tags(const Json& f, const std::vector<std::string>& ends, int depth) {
        const auto trigger_list = f.find("triggers");
        if (trigger_list == f.end() || !trigger_list->is_array())
            return invalid("Triggered tags format must have a triggers field with an array");
        TSR_ASSIGN_OR_RETURN(const std::vector<std::string> triggers,
                             string_list(*trigger_list, "Triggered tags format's triggers must be non-empty strings"));
        if (triggers.empty()) return invalid("Triggered tags format's triggers must be non-empty");
        for (const std::string& t : triggers)
            if (t.empty()) return invalid("Triggered tags format's triggers must be non-empty strings");
        TSR_ASSIGN_OR_RETURN(const std::vector<const Json*> tags, tag_list(f, "Triggered tags"));
        std::vector<std::string> excludes;
        if (const auto e = f.find("excludes"); e != f.end()) {
            if (!e->is_array()) return invalid("Triggered tags format should have a excludes field with an array");
            TSR_ASSIGN_OR_RETURN(excludes,
                                 string_list(*e, "Triggered tags format's excluded_strs must be non-empty strings"));
        }
        excludes.insert(excludes.end(), ends.begin(), ends.end());
        TSR_ASSIGN_OR_RETURN(const bool at_least_one, flag(f, "at_least_one"));
        TSR_ASSIGN_OR_RETURN(const bool stop_after_first, flag(f, "stop_after_first"));

        // Each tag belongs to the one trigger its begin starts with; after the trigger, the rest.
        std::vector<DispatchRule> rules;
        for (const std::string& t : triggers) rules.push_back({t, std::nullopt});
        for (const Json* t : tags) {
            const auto begin = t->find("begin");
            if (!t->is_object() || begin == t->end() || !begin->is_string())
                return invalid("Tags in triggered_tags must have a string begin, not a token format");
            const std::string& text = begin->get_ref<const std::string&>();
            std::size_t owner = triggers.size();
            for (std::size_t i = 0; i < triggers.size(); ++i) {
                if (!text.starts_with(triggers[i])) continue;
                if (owner != triggers.size())
                    return invalid("One tag matches multiple triggers in a triggered tags format: the begin \"" +
                                   text + "\" starts with \"" + triggers[owner] + "\" and \"" + triggers[i] + "\"");
                owner = i;
            }
            if (owner == triggers.size())
                return invalid("One tag does not match any trigger in a triggered tags format: the begin \"" + text +
                               "\" starts with none of the triggers");
            TSR_ASSIGN_OR_RETURN(const Fragment rest, tag(*t, triggers[owner].size(), depth));
            auto& continuation = rules[owner].continuation;
            continuation = continuation ? nfa_.alternative(*continuation, rest) : rest;
        }
        if (at_least_one && stop_after_first) return any_tag(tags, depth);
        TSR_ASSIGN_OR_RETURN(const Fragment text, tag_dispatch(nfa_, rules, /*loop=*/!stop_after_first, excludes));
        if (!at_least_one) return text;
        // At least one: a tag first, no text before it (xgrammar's first_tag_with_full_begin).
        TSR_ASSIGN_OR_RETURN(const Fragment first, any_tag(tags, depth));
        return nfa_.sequence(first, text);
    }

    StatusOr<Fragment> tags_with_separator(const Json& f, int depth) {
        TSR_ASSIGN_OR_RETURN(const std::vector<const Json*> tags, tag_list(f, "Tags with separator"));
        const auto separator = f.find("separator");
        if (separator == f.end() || !separator->is_string())
            return invalid("Tags with separator format's separator field must be a string");
        TSR_ASSIGN_OR_RETURN(const bool at_least_one, flag(f, "at_least_one"));
        TSR_ASSIGN_OR_RETURN(const bool stop_after_first, flag(f, "stop_after_first"));
        // No text besides the tags: T, then (separator T)* unless only the first is wanted.
        TSR_ASSIGN_OR_RETURN(Fragment whole, any_tag(tags, depth));
        if (!stop_after_first) {
            TSR_ASSIGN_OR_RETURN(const Fragment next, any_tag(tags, depth));
            whole = nfa_.sequence(whole, nfa_.star(nfa_.sequence(nfa_.literal(separator->get<std::string>()), next)));
        }
        return at_least_one ? whole : nfa_.alternative(whole, nfa_.empty());
    }

    StatusOr<Fragment> dispatch(const Json& f, const std::vector<std::string>& ends, int depth) {
        const auto rules_json = f.find("rules");
        if (rules_json == f.end() || !rules_json->is_array() || rules_json->empty())
            return invalid("TagDispatch format rules must be non-empty");
        std::vector<DispatchRule> rules;
        for (const Json& pair : *rules_json) {
            if (!pair.is_array() || pair.size() != 2) return invalid("TagDispatch pair must be a 2-element array");
            if (!pair[0].is_string()) return invalid("TagDispatch trigger must be a string");
            TSR_ASSIGN_OR_RETURN(const Fragment then, compile(pair[1], ends, depth));
            rules.push_back({pair[0].get<std::string>(), then});
        }
        TSR_ASSIGN_OR_RETURN(const bool loop_flag, flag(f, "loop"));
        const bool loop = !f.contains("loop") || loop_flag;  // default true
        std::vector<std::string> excludes;  // its own only: the enclosing tag's end is not taken
        if (const auto e = f.find("excludes"); e != f.end()) {
            if (!e->is_array()) return invalid("TagDispatch excludes must be an array");
            TSR_ASSIGN_OR_RETURN(excludes, string_list(*e, "TagDispatch excludes must be non-empty strings"));
        }
        return tag_dispatch(nfa_, rules, loop, excludes);
    }

    NfaBuilder& nfa_;
    const JsonWhitespace& whitespace_;
};

// The legacy shape as xgrammar's StructuralTag.from_legacy_structural_tag writes it, with SGLang's
// at_least_one (LegacyStructuralTagResponseFormat) and a missing schema as {}.
StatusOr<Json> from_legacy(const Json& spec) {
    const auto structures = spec.find("structures");
    if (!structures->is_array() || structures->empty())
        return invalid("structural_tag needs \"structures\": a non-empty list of "
                       "{\"begin\": ..., \"schema\": {...}, \"end\": ...}");
    Json tags = Json::array();
    for (std::size_t i = 0; i < structures->size(); ++i) {
        const Json& s = (*structures)[i];
        const std::string where = "structural_tag.structures[" + std::to_string(i) + "]";
        if (!s.is_object() || !s.contains("begin") || !s["begin"].is_string() || !s.contains("end") ||
            !s["end"].is_string())
            return invalid(where + " needs \"begin\" and \"end\" strings");
        Json schema = s.contains("schema") ? s["schema"] : Json();
        if (schema.is_null()) schema = Json::object();
        if (!schema.is_object() && !schema.is_boolean())
            return invalid(where + ".schema: give the JSON schema of what goes between begin and end");
        tags.push_back({{"type", "tag"},
                        {"begin", s["begin"]},
                        {"content", {{"type", "json_schema"}, {"json_schema", schema}}},
                        {"end", s["end"]}});
    }
    const auto triggers = spec.find("triggers");
    if (triggers == spec.end() || !triggers->is_array() || triggers->empty())
        return invalid("structural_tag needs \"triggers\": a non-empty list of strings");
    Json at_least_one = spec.contains("at_least_one") ? spec["at_least_one"] : Json(false);
    return Json{{"type", "triggered_tags"},
                {"triggers", *triggers},
                {"tags", std::move(tags)},
                {"at_least_one", std::move(at_least_one)}};
}

}  // namespace

StatusOr<ByteNfa> structural_tag_nfa(std::string_view spec_text, const JsonWhitespace& whitespace) {
    TSR_ASSIGN_OR_RETURN(const Json spec, parse_json_text(spec_text, kMaxConstraintJsonDepth, "structural_tag"));
    if (!spec.is_object())
        return invalid("structural_tag must be a JSON object: {\"type\": \"structural_tag\", \"format\": {...}}, or "
                       "the legacy {\"structures\": [...], \"triggers\": [...]}");
    Json format;
    if (spec.contains("structures")) {  // SGLang's is_legacy_structural_tag
        TSR_ASSIGN_OR_RETURN(format, from_legacy(spec));
    } else {
        if (const auto t = spec.find("type"); t != spec.end() && *t != "structural_tag")
            return invalid("Structural tag's type must be a string \"structural_tag\"");
        if (!spec.contains("format")) return invalid("Structural tag must have a format field");
        format = spec["format"];
    }
    NfaBuilder nfa;
    FormatCompiler compiler(nfa, whitespace);
    TSR_ASSIGN_OR_RETURN(const Fragment root, compiler.compile(format, {}, 0));
    return std::move(nfa).finish(root);
}

}  // namespace tessera::grammar
