// tokenizer/jinja/methods.cpp — Python methods on str / dict / list values and the global
// functions (namespace, range, raise_exception, strftime_now, dict) of the subset (builtins.h).
// Mutating list/dict methods (append, pop, update...) are left out: transformers renders in
// an ImmutableSandboxedEnvironment, which forbids them too.

#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace tessera::jinja {
namespace {

const std::set<std::string, std::less<>> kStrMethods = {
    "capitalize", "count",   "endswith",   "find",       "isalnum", "isalpha", "isdigit", "islower",
    "isspace",    "isupper", "join",       "lower",      "lstrip",  "replace", "rfind",   "rsplit",
    "rstrip",     "split",   "splitlines", "startswith", "strip",   "title",   "upper"};
const std::set<std::string, std::less<>> kDictMethods = {"get", "items", "keys", "values"};
const std::set<std::string, std::less<>> kListMethods = {"count", "index"};
const std::set<std::string, std::less<>> kGlobals = {"dict", "namespace", "raise_exception",
                                                     "range", "strftime_now"};

[[noreturn]] void no_method(const Value& v, const std::string& name) {
    if (v.is_undefined()) throw_error(str_cat({"'", v.undefined_name(), "' is undefined"}));
    throw_error(str_cat({"'", py_type_name(v), "' object has no method '", name, "'"}));
}

const Value& need(const std::vector<Value>& args, size_t i, const std::string& method) {
    if (i >= args.size())
        throw_error(method + "() takes at least " + std::to_string(i + 1) + " argument(s)");
    return args[i];
}

std::optional<std::string> opt_str(const std::vector<Value>& args, size_t i) {
    if (i >= args.size() || args[i].is_null() || args[i].is_undefined()) return std::nullopt;
    return args[i].str();
}

Value string_list(const std::vector<std::string>& parts) {
    Json arr = Json::array();
    for (const auto& p : parts) arr.push_back(p);
    return Value(std::move(arr));
}

bool all_chars(const std::string& s, int (*pred)(int)) {
    if (s.empty()) return false;
    for (unsigned char c : s) {
        if (!pred(c)) return false;
    }
    return true;
}

// startswith / endswith accept one prefix or a tuple of them.
bool affix_match(const std::string& s, const Value& affix, bool start) {
    auto one = [&](const std::string& a) {
        if (a.size() > s.size()) return false;
        return start ? s.compare(0, a.size(), a) == 0
                     : s.compare(s.size() - a.size(), a.size(), a) == 0;
    };
    if (affix.is_array()) {
        for (const Json& a : affix.json()) {
            if (a.is_string() && one(a.get_ref<const std::string&>())) return true;
        }
        return false;
    }
    if (!affix.is_string())
        throw_error("startswith/endswith argument must be str or a tuple of str");
    return one(affix.str_ref());
}

Value string_method(const std::string& s, const std::string& name, const std::vector<Value>& args) {
    if (name == "startswith" || name == "endswith") {
        return Value(Json(affix_match(s, need(args, 0, name), name == "startswith")));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        return Value(Json(py_strip(s, opt_str(args, 0), name != "rstrip", name != "lstrip")));
    }
    if (name == "split" || name == "rsplit") {
        int64_t maxsplit = args.size() > 1 ? to_int(args[1], name.c_str()) : -1;
        return string_list(py_split(s, opt_str(args, 0), maxsplit, name == "rsplit"));
    }
    if (name == "splitlines") {
        std::vector<std::string> lines = py_split(s, std::string("\n"), -1);
        if (!lines.empty() && lines.back().empty()) lines.pop_back();
        return string_list(lines);
    }
    if (name == "upper") return Value(Json(py_upper(s)));
    if (name == "lower") return Value(Json(py_lower(s)));
    if (name == "title") return Value(Json(py_title(s)));
    if (name == "capitalize") return Value(Json(py_capitalize(s)));
    if (name == "replace") {
        int64_t count = args.size() > 2 ? to_int(args[2], "replace") : -1;
        return Value(
            Json(py_replace(s, need(args, 0, name).str(), need(args, 1, name).str(), count)));
    }
    if (name == "count") return Value(Json(py_count(s, need(args, 0, name).str())));
    if (name == "find" || name == "rfind") {
        return Value(Json(py_find(s, need(args, 0, name).str(), name == "rfind")));
    }
    if (name == "join") {
        const Value& items = need(args, 0, name);
        std::string out;
        if (!items.is_array()) throw_error("str.join() needs a list");
        bool first = true;
        for (const Json& j : items.json()) {
            if (!j.is_string()) throw_error("str.join(): sequence item is not a str");
            if (!first) out += s;
            first = false;
            out += j.get_ref<const std::string&>();
        }
        return Value(Json(out));
    }
    if (name == "isdigit") return Value(Json(all_chars(s, ::isdigit)));
    if (name == "isalpha") return Value(Json(all_chars(s, ::isalpha)));
    if (name == "isalnum") return Value(Json(all_chars(s, ::isalnum)));
    if (name == "isspace") return Value(Json(all_chars(s, ::isspace)));
    if (name == "islower") return Value(Json(py_lower(s) == s && py_upper(s) != s));
    if (name == "isupper") return Value(Json(py_upper(s) == s && py_lower(s) != s));
    throw_error("'str' object has no method '" + name + "'");
}

Value range_of(const std::vector<Value>& args) {
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) {
        stop = to_int(args[0], "range");
    } else if (args.size() == 2 || args.size() == 3) {
        start = to_int(args[0], "range");
        stop = to_int(args[1], "range");
        if (args.size() == 3) step = to_int(args[2], "range");
    } else {
        throw_error("range() takes 1 to 3 arguments");
    }
    if (step == 0) throw_error("range() arg 3 must not be zero");
    Json arr = Json::array();
    // The sandbox caps ranges at 100000 items (MAX_RANGE), and so do we.
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (arr.size() >= 100000) throw_error("range too big (more than 100000 items)");
        arr.push_back(i);
    }
    return Value(std::move(arr));
}

}  // namespace

bool is_method(std::string_view name) {
    return kStrMethods.count(name) || kDictMethods.count(name) || kListMethods.count(name);
}

bool is_global_function(std::string_view name) { return kGlobals.count(name) > 0; }

int64_t to_int(const Value& v, const char* what) {
    if (v.is_bool()) return v.json().get<bool>() ? 1 : 0;
    if (v.is_int()) return v.json().get<int64_t>();
    if (v.is_number()) return static_cast<int64_t>(v.json().get<double>());
    if (v.is_undefined()) throw_error("'" + v.undefined_name() + "' is undefined");
    throw_error(std::string(what) + ": expected a number, got '" + py_type_name(v) + "'");
}

double to_double(const Value& v, const char* what) {
    if (v.is_bool()) return v.json().get<bool>() ? 1.0 : 0.0;
    if (v.is_number()) return v.json().get<double>();
    if (v.is_undefined()) throw_error("'" + v.undefined_name() + "' is undefined");
    throw_error(std::string(what) + ": expected a number, got '" + py_type_name(v) + "'");
}

Value call_method(const Value& object, const std::string& name, const std::vector<Value>& args,
                  const KwArgs& kwargs) {
    if (!kwargs.empty()) throw_unsupported("keyword arguments to method '" + name + "'");
    if (object.is_string()) return string_method(object.str_ref(), name, args);
    if (object.is_object() && kDictMethods.count(name)) {
        const Json& j = object.json();
        if (name == "get") {
            const Value& key = need(args, 0, name);
            Value found = key.is_string() ? object.member(key.str_ref()) : Value::undefined();
            if (!found.is_undefined()) return found;
            return args.size() > 1 ? args[1] : Value(Json(nullptr));
        }
        Json out = Json::array();
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (name == "items") {
                out.push_back(Json::array({it.key(), it.value()}));
            } else if (name == "keys") {
                out.push_back(it.key());
            } else {
                out.push_back(it.value());
            }
        }
        return Value(std::move(out));
    }
    if (object.is_array() && kListMethods.count(name)) {
        const Value& x = need(args, 0, name);
        int64_t count = 0;
        for (size_t i = 0; i < object.json().size(); ++i) {
            if (py_equal(object.element(object.json()[i]), x)) {
                if (name == "index") return Value(Json(static_cast<int64_t>(i)));
                ++count;
            }
        }
        if (name == "index") throw_error("list.index(x): x not in list");
        return Value(Json(count));
    }
    no_method(object, name);
}

Value call_global(const std::string& name, const std::vector<Value>& args, const KwArgs& kwargs) {
    if (name == "raise_exception") {
        throw_error(args.empty() ? std::string("raise_exception() called") : args[0].str());
    }
    if (name == "namespace" || name == "dict") {
        auto ns = std::make_shared<Namespace>();
        // namespace({...}) / dict({...}) copy a mapping, then keyword arguments override.
        if (!args.empty()) {
            if (!args[0].is_object()) throw_error(name + "() positional argument must be a dict");
            for (auto it = args[0].json().begin(); it != args[0].json().end(); ++it) {
                ns->set(it.key(), Value(it.value()));
            }
        }
        for (const auto& [k, v] : kwargs) ns->set(k, v);
        if (name == "namespace") return Value::from_namespace(ns);
        Json obj = Json::object();
        for (const auto& [k, v] : ns->attrs) obj[k] = v->to_json();
        return Value(std::move(obj));
    }
    if (name == "range") return range_of(args);
    if (name == "strftime_now") {
        if (args.empty() || !args[0].is_string()) throw_error("strftime_now(format) needs a str");
        std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[256];
        size_t n = std::strftime(buf, sizeof(buf), args[0].str_ref().c_str(), &local);
        return Value(Json(std::string(buf, n)));
    }
    throw_unsupported("function '" + name + "'");
}

}  // namespace tessera::jinja
