// tokenizer/jinja/filters.cpp — Jinja2 filters and tests of the supported subset
// (builtins.h). Semantics follow Jinja 3.1 with autoescape off.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace tessera::jinja {
namespace {

const std::set<std::string, std::less<>> kFilters = {
    "abs",    "attr",   "capitalize", "count",      "d",           "default", "dictsort",
    "e",      "escape", "first",      "float",      "forceescape", "indent",  "int",
    "items",  "join",   "last",       "length",     "list",        "lower",   "map",
    "max",    "min",    "reject",     "rejectattr", "replace",     "reverse", "round",
    "safe",   "select", "selectattr", "sort",       "string",      "sum",     "title",
    "tojson", "trim",   "unique",     "upper"};

const std::set<std::string, std::less<>> kTests = {
    "boolean", "callable", "defined",  "divisibleby", "eq",      "equalto",   "escaped", "even",
    "false",   "float",    "ge",       "greaterthan", "gt",      "in",        "integer", "iterable",
    "le",      "lessthan", "lower",    "lt",          "mapping", "ne",        "none",    "number",
    "odd",     "sameas",   "sequence", "string",      "true",    "undefined", "upper",   "==",
    "!=",      "<",        "<=",       ">",           ">="};

// The argument at `index` or named `name`; nullptr when absent.
const Value* arg(const std::vector<Value>& args, const KwArgs& kwargs, size_t index,
                 const char* name) {
    if (index < args.size()) return &args[index];
    for (const auto& [k, v] : kwargs) {
        if (k == name) return &v;
    }
    return nullptr;
}

bool arg_bool(const std::vector<Value>& args, const KwArgs& kwargs, size_t index, const char* name,
              bool fallback) {
    const Value* v = arg(args, kwargs, index, name);
    return v ? v->truthy() : fallback;
}

std::string arg_str(const std::vector<Value>& args, const KwArgs& kwargs, size_t index,
                    const char* name, const std::string& fallback) {
    const Value* v = arg(args, kwargs, index, name);
    return v && !v->is_undefined() && !v->is_null() ? v->str() : fallback;
}

[[noreturn]] void type_error(const std::string& filter, const Value& v) {
    throw_error("filter '" + filter + "' cannot be applied to a value of type '" + py_type_name(v) +
                "'");
}

bool integral_like(const Value& v) { return v.is_int() || v.is_bool(); }

void require_defined(const Value& v) {
    if (v.is_undefined()) throw_error("'" + v.undefined_name() + "' is undefined");
}

// Items of a list (refs), the keys of a dict, the characters of a string.
std::vector<Value> iterate(const Value& v, const std::string& who) {
    std::vector<Value> out;
    if (v.is_undefined()) return out;
    if (v.is_array()) {
        for (const Json& item : v.json()) out.push_back(v.element(item));
    } else if (v.is_object()) {
        for (auto it = v.json().begin(); it != v.json().end(); ++it)
            out.emplace_back(Json(it.key()));
    } else if (v.is_string()) {
        for (auto& c : utf8_chars(v.str_ref())) out.emplace_back(Json(c));
    } else {
        throw_error(str_cat({"'", py_type_name(v), "' object is not iterable (in ", who, ")"}));
    }
    return out;
}

Value make_list(const std::vector<Value>& items) {
    Json arr = Json::array();
    for (const Value& v : items) arr.push_back(v.to_json());
    return Value(std::move(arr));
}

// Follows a dotted attribute path ("a.b" or "0"), as Jinja's make_attrgetter does.
Value get_path(const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (start <= path.size()) {
        size_t dot = path.find('.', start);
        std::string part =
            path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (cur.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
            size_t i = std::stoul(part);
            cur = i < cur.json().size() ? cur.element(cur.json()[i]) : Value::undefined(part);
        } else if (cur.is_namespace()) {
            const Value* a = cur.ns().find(part);
            cur = a ? *a : Value::undefined(part);
        } else {
            cur = cur.member(part);
        }
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return cur;
}

// Sort key: lowercased strings unless case_sensitive (Jinja's ignore_case).
Json sort_key(const Value& v, bool case_sensitive) {
    Json j = v.to_json();
    if (!case_sensitive && j.is_string()) return py_lower(j.get_ref<const std::string&>());
    return j;
}

int64_t length_of(const Value& v) {
    if (v.is_undefined()) return 0;
    if (v.is_string()) return static_cast<int64_t>(utf8_length(v.str_ref()));
    if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.json().size());
    if (v.is_namespace()) return static_cast<int64_t>(v.ns().attrs.size());
    throw_error("object of type '" + py_type_name(v) + "' has no len()");
}

Value select_items(const std::string& name, const Value& value, const std::vector<Value>& args,
                   const KwArgs& kwargs) {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "select" || name == "selectattr";
    size_t next = 0;
    std::string attr;
    if (by_attr) {
        if (args.empty()) throw_error("filter '" + name + "' needs an attribute name");
        attr = args[0].str();
        next = 1;
    }
    std::string test;
    std::vector<Value> test_args;
    if (next < args.size()) {
        test = args[next].str();
        if (!is_test(test)) throw_unsupported("test '" + test + "'");
        test_args.assign(args.begin() + static_cast<long>(next) + 1, args.end());
    }
    std::vector<Value> out;
    for (const Value& item : iterate(value, name)) {
        Value probe = by_attr ? get_path(item, attr) : item;
        bool pass = test.empty() ? probe.truthy() : apply_test(test, probe, test_args);
        if (pass == keep) out.push_back(item);
    }
    return make_list(out);
}

Value map_items(const Value& value, const std::vector<Value>& args, const KwArgs& kwargs) {
    std::vector<Value> out;
    const Value* attribute = arg({}, kwargs, 0, "attribute");
    if (attribute) {
        const Value* def = arg({}, kwargs, 0, "default");
        for (const Value& item : iterate(value, "map")) {
            Value v = get_path(item, attribute->str());
            out.push_back(v.is_undefined() && def ? *def : v);
        }
        return make_list(out);
    }
    if (args.empty()) throw_error("filter 'map' needs a filter name or attribute=...");
    std::string filter = args[0].str();
    if (!is_filter(filter)) throw_unsupported("filter '" + filter + "'");
    std::vector<Value> rest(args.begin() + 1, args.end());
    for (const Value& item : iterate(value, "map")) {
        out.push_back(apply_filter(filter, item, rest, kwargs));
    }
    return make_list(out);
}

Value sort_items(const Value& value, const std::vector<Value>& args, const KwArgs& kwargs) {
    bool reverse = arg_bool(args, kwargs, 0, "reverse", false);
    bool case_sensitive = arg_bool(args, kwargs, 1, "case_sensitive", false);
    std::string attribute = arg_str(args, kwargs, 2, "attribute", "");
    std::vector<Value> items = iterate(value, "sort");
    std::vector<std::pair<Json, size_t>> keys;
    for (size_t i = 0; i < items.size(); ++i) {
        keys.emplace_back(
            sort_key(attribute.empty() ? items[i] : get_path(items[i], attribute), case_sensitive),
            i);
    }
    std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
        return reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
    });
    std::vector<Value> out;
    for (const auto& k : keys) out.push_back(items[k.second]);
    return make_list(out);
}

Value indent_text(const Value& value, const std::vector<Value>& args, const KwArgs& kwargs) {
    const Value* w = arg(args, kwargs, 0, "width");
    std::string pad =
        w && w->is_string() ? w->str() : std::string(w ? to_int(*w, "indent") : 4, ' ');
    bool first = arg_bool(args, kwargs, 1, "first", false);
    bool blank = arg_bool(args, kwargs, 2, "blank", false);
    // Jinja appends "\n" before splitlines(), so a trailing newline yields no extra line.
    std::vector<std::string> lines = py_split(value.str() + "\n", std::string("\n"), -1);
    lines.pop_back();
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) {
            out += "\n";
            if (blank || !lines[i].empty()) out += pad;
        }
        out += lines[i];
    }
    return Value(Json(first ? pad + out : out));
}

Value round_number(const Value& value, const std::vector<Value>& args, const KwArgs& kwargs) {
    const Value* p = arg(args, kwargs, 0, "precision");
    int64_t precision = p ? to_int(*p, "round") : 0;
    std::string method = arg_str(args, kwargs, 1, "method", "common");
    double x = to_double(value, "round");
    if ((value.is_int() || value.is_bool()) && method == "common") {
        // Python's round(int, n) stays an int.
        if (precision >= 0) return Value(Json(to_int(value, "round")));
        double step = std::pow(10.0, static_cast<double>(-precision));
        return Value(Json(static_cast<int64_t>(std::nearbyint(x / step) * step)));
    }
    double scale = std::pow(10.0, static_cast<double>(precision));
    double r;
    if (method == "common") {
        // Jinja calls Python's round(): correctly rounded, ties to even (2.5 → 2.0). printf
        // rounds the exact binary value the same way.
        if (precision >= 0) {
            char buf[512];
            std::snprintf(buf, sizeof(buf), "%.*f",
                          static_cast<int>(std::min<int64_t>(precision, 300)), x);
            r = std::strtod(buf, nullptr);
        } else {
            r = std::nearbyint(x / std::pow(10.0, static_cast<double>(-precision))) *
                std::pow(10.0, static_cast<double>(-precision));
        }
    } else if (method == "floor") {
        r = std::floor(x * scale) / scale;
    } else if (method == "ceil") {
        r = std::ceil(x * scale) / scale;
    } else {
        throw_error("round method must be 'common', 'ceil' or 'floor', got '" + method + "'");
    }
    return Value(Json(r));
}

Value to_json_filter(const Value& value, const std::vector<Value>& args, const KwArgs& kwargs) {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False) = json.dumps with those arguments.
    DumpOptions opt;
    opt.ensure_ascii = arg_bool(args, kwargs, 0, "ensure_ascii", false);
    const Value* indent = arg(args, kwargs, 1, "indent");
    if (indent && !indent->is_null() && !indent->is_undefined()) {
        opt.indent = static_cast<int>(to_int(*indent, "tojson indent"));
    }
    const Value* seps = arg(args, kwargs, 2, "separators");
    if (seps && seps->is_array() && seps->json().size() == 2) {
        opt.separators = std::make_pair(py_str(seps->json()[0]), py_str(seps->json()[1]));
    }
    opt.sort_keys = arg_bool(args, kwargs, 3, "sort_keys", false);
    return Value(Json(py_json_dumps(value.to_json(), opt)));
}

Value min_max(bool want_max, const Value& value, const std::vector<Value>& args,
              const KwArgs& kwargs) {
    bool case_sensitive = arg_bool(args, kwargs, 0, "case_sensitive", false);
    std::string attribute = arg_str(args, kwargs, 1, "attribute", "");
    std::vector<Value> items = iterate(value, want_max ? "max" : "min");
    if (items.empty()) return Value::undefined("empty sequence");
    size_t best = 0;
    Json best_key =
        sort_key(attribute.empty() ? items[0] : get_path(items[0], attribute), case_sensitive);
    for (size_t i = 1; i < items.size(); ++i) {
        Json k =
            sort_key(attribute.empty() ? items[i] : get_path(items[i], attribute), case_sensitive);
        if (want_max ? py_less(best_key, k) : py_less(k, best_key)) {
            best = i;
            best_key = std::move(k);
        }
    }
    return items[best];
}

}  // namespace

bool is_filter(std::string_view name) { return kFilters.count(name) > 0; }
bool is_test(std::string_view name) { return kTests.count(name) > 0; }

Value apply_filter(const std::string& name, const Value& value, const std::vector<Value>& args,
                   const KwArgs& kwargs) {
    if (name == "default" || name == "d") {
        bool boolean = arg_bool(args, kwargs, 1, "boolean", false);
        bool use_default = value.is_undefined() || (boolean && !value.truthy());
        if (!use_default) return value;
        const Value* def = arg(args, kwargs, 0, "default_value");
        return def ? *def : Value(Json(""));
    }
    if (name == "length" || name == "count") return Value(Json(length_of(value)));
    if (name == "safe") return value;
    if (name == "string") return Value(Json(value.str()));
    if (name == "e" || name == "escape" || name == "forceescape") {
        return Value(Json(html_escape(value.str())));
    }
    if (name == "tojson") return to_json_filter(value, args, kwargs);
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        return select_items(name, value, args, kwargs);
    }
    if (name == "map") return map_items(value, args, kwargs);
    if (name == "sort") return sort_items(value, args, kwargs);
    if (name == "list") return make_list(iterate(value, name));
    if (name == "attr") {
        std::string a = arg_str(args, kwargs, 0, "name", "");
        return value.is_namespace()
                   ? (value.ns().find(a) ? *value.ns().find(a) : Value::undefined(a))
                   : value.member(a);
    }
    if (name == "int" || name == "float") {
        const Value* def = arg(args, kwargs, 0, "default");
        try {
            if (value.is_string()) {
                std::string s = py_strip(value.str_ref(), std::nullopt, true, true);
                size_t used = 0;
                double d = std::stod(s, &used);
                if (used != s.size()) throw std::invalid_argument(s);
                return name == "int" ? Value(Json(static_cast<int64_t>(d))) : Value(Json(d));
            }
            if (name == "int") return Value(Json(to_int(value, "int")));
            return Value(Json(to_double(value, "float")));
        } catch (const std::exception&) {
            if (def) return *def;
            return name == "int" ? Value(Json(0)) : Value(Json(0.0));
        }
    }
    if (name == "abs") {
        if (value.is_int() || value.is_bool()) return Value(Json(std::llabs(to_int(value, "abs"))));
        return Value(Json(std::fabs(to_double(value, "abs"))));
    }
    if (name == "round") return round_number(value, args, kwargs);
    if (name == "indent") return indent_text(value, args, kwargs);
    if (name == "max" || name == "min") return min_max(name == "max", value, args, kwargs);
    if (name == "first" || name == "last") {
        std::vector<Value> items = iterate(value, name);
        if (items.empty()) return Value::undefined(name + " of an empty sequence");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
        std::vector<Value> items = iterate(value, name);
        std::reverse(items.begin(), items.end());
        if (value.is_string()) {
            std::string s;
            for (const Value& c : items) s += c.str_ref();
            return Value(Json(s));
        }
        return make_list(items);
    }
    if (name == "join") {
        std::string sep = arg_str(args, kwargs, 0, "d", "");
        std::string attribute = arg_str(args, kwargs, 1, "attribute", "");
        std::string out;
        bool first = true;
        for (const Value& item : iterate(value, name)) {
            if (!first) out += sep;
            first = false;
            out += (attribute.empty() ? item : get_path(item, attribute)).str();
        }
        return Value(Json(out));
    }
    if (name == "unique") {
        bool case_sensitive = arg_bool(args, kwargs, 0, "case_sensitive", false);
        std::string attribute = arg_str(args, kwargs, 1, "attribute", "");
        std::vector<Value> out;
        std::vector<Json> seen;
        for (const Value& item : iterate(value, name)) {
            Json k = sort_key(attribute.empty() ? item : get_path(item, attribute), case_sensitive);
            bool dup = std::any_of(seen.begin(), seen.end(),
                                   [&](const Json& s) { return py_equal(s, k); });
            if (!dup) {
                seen.push_back(std::move(k));
                out.push_back(item);
            }
        }
        return make_list(out);
    }
    if (name == "sum") {
        std::string attribute = arg_str(args, kwargs, 0, "attribute", "");
        const Value* start = arg(args, kwargs, 1, "start");
        bool is_float = start && start->json().is_number_float();
        double fsum = start ? to_double(*start, "sum") : 0.0;
        int64_t isum = start && !is_float ? to_int(*start, "sum") : 0;
        for (const Value& item : iterate(value, name)) {
            Value v = attribute.empty() ? item : get_path(item, attribute);
            if (v.is_json() && v.json().is_number_float()) is_float = true;
            fsum += to_double(v, "sum");
            if (!is_float) isum += to_int(v, "sum");
        }
        return is_float ? Value(Json(fsum)) : Value(Json(isum));
    }
    if (name == "items" || name == "dictsort") {
        if (value.is_undefined() && name == "items") return Value(Json::array());
        require_defined(value);
        if (!value.is_object()) type_error(name, value);
        std::vector<std::pair<Json, Json>> pairs;
        for (auto it = value.json().begin(); it != value.json().end(); ++it) {
            pairs.emplace_back(it.key(), it.value());
        }
        if (name == "dictsort") {
            bool case_sensitive = arg_bool(args, kwargs, 0, "case_sensitive", false);
            std::string by = arg_str(args, kwargs, 1, "by", "key");
            bool reverse = arg_bool(args, kwargs, 2, "reverse", false);
            auto key = [&](const std::pair<Json, Json>& p) {
                return sort_key(Value(by == "value" ? p.second : p.first), case_sensitive);
            };
            std::stable_sort(pairs.begin(), pairs.end(), [&](const auto& a, const auto& b) {
                return reverse ? py_less(key(b), key(a)) : py_less(key(a), key(b));
            });
        }
        Json out = Json::array();
        for (auto& [k, v] : pairs) out.push_back(Json::array({k, v}));
        return Value(std::move(out));
    }
    // String filters: Jinja applies them to str(value), and str(Undefined) is "".
    std::string s = value.str();
    if (name == "trim") {
        const Value* chars = arg(args, kwargs, 0, "chars");
        std::optional<std::string> c;
        if (chars && !chars->is_null()) c = chars->str();
        return Value(Json(py_strip(s, c, true, true)));
    }
    if (name == "upper") return Value(Json(py_upper(s)));
    if (name == "lower") return Value(Json(py_lower(s)));
    if (name == "capitalize") return Value(Json(py_capitalize(s)));
    if (name == "title") return Value(Json(jinja_title(s)));
    if (name == "replace") {
        if (args.size() < 2) throw_error("filter 'replace' needs old and new strings");
        const Value* count = arg(args, kwargs, 2, "count");
        return Value(Json(py_replace(s, args[0].str(), args[1].str(),
                                     count && !count->is_null() ? to_int(*count, "replace") : -1)));
    }
    throw_unsupported("filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args) {
    auto need_arg = [&]() -> const Value& {
        if (args.empty()) throw_error("test '" + name + "' needs an argument");
        return args[0];
    };
    if (name == "defined") return !value.is_undefined();
    if (name == "undefined") return value.is_undefined();
    if (name == "none") return value.is_null();
    if (name == "true") return value.is_bool() && value.json().get<bool>();
    if (name == "false") return value.is_bool() && !value.json().get<bool>();
    if (name == "boolean") return value.is_bool();
    if (name == "string") return value.is_string();
    if (name == "mapping") return value.is_object();
    // bool is an int subclass in Python, so `True is number` holds; `is integer` excludes it.
    if (name == "number") return value.is_number() || value.is_bool();
    if (name == "integer") return value.is_int();
    if (name == "float") return value.is_json() && value.json().is_number_float();
    if (name == "iterable") {
        return value.is_undefined() || value.is_string() || value.is_array() || value.is_object();
    }
    if (name == "sequence") {
        return value.is_undefined() || value.is_string() || value.is_array() || value.is_object();
    }
    if (name == "callable") return value.is_macro();
    if (name == "escaped") return false;
    if (name == "odd" || name == "even" || name == "divisibleby") {
        // Python `value % n`, in floats when either side is one (2.5 is not even).
        const Value two(Json(2));
        const Value& divisor = name == "divisibleby" ? need_arg() : two;
        if (integral_like(value) && integral_like(divisor)) {
            int64_t d = to_int(divisor, name.c_str());
            if (d == 0) throw_error("integer division or modulo by zero");
            int64_t r = to_int(value, name.c_str()) % d;
            return name == "odd" ? r != 0 : r == 0;
        }
        double d = to_double(divisor, name.c_str());
        if (d == 0.0) throw_error("float modulo by zero");
        double r = std::fmod(to_double(value, name.c_str()), d);
        return name == "odd" ? r == 1.0 || r == -1.0 : r == 0.0;
    }
    if (name == "lower" || name == "upper") {
        // str(value).islower() / isupper(): some cased letter, none of the other case.
        std::string text = value.str();
        bool lower = py_lower(text) == text, upper = py_upper(text) == text;
        bool cased = !(lower && upper);
        return cased && (name == "lower" ? lower : upper);
    }
    if (name == "eq" || name == "equalto" || name == "==") return py_equal(value, need_arg());
    if (name == "ne" || name == "!=") return !py_equal(value, need_arg());
    if (name == "sameas") {
        const Value& other = need_arg();
        // Only singletons (None, True, False) and namespaces have a usable identity here.
        if (value.is_namespace() || other.is_namespace()) return py_equal(value, other);
        return value.is_json() && other.is_json() &&
               (value.json().is_null() || value.json().is_boolean()) &&
               value.json() == other.json();
    }
    if (name == "lt" || name == "lessthan" || name == "<" || name == "gt" ||
        name == "greaterthan" || name == ">" || name == "le" || name == "<=" || name == "ge" ||
        name == ">=") {
        const Value& other = need_arg();
        require_defined(value);
        require_defined(other);
        const Json a = value.to_json(), b = other.to_json();
        if (name == "lt" || name == "lessthan" || name == "<") return py_less(a, b);
        if (name == "gt" || name == "greaterthan" || name == ">") return py_less(b, a);
        if (name == "le" || name == "<=") return !py_less(b, a);
        return !py_less(a, b);
    }
    if (name == "in") {
        const Value& seq = need_arg();
        for (const Value& item : iterate(seq, "in")) {
            if (seq.is_string()
                    ? value.is_string() && seq.str_ref().find(value.str_ref()) != std::string::npos
                    : py_equal(item, value)) {
                return true;
            }
        }
        return false;
    }
    throw_unsupported("test '" + name + "'");
}

}  // namespace tessera::jinja
