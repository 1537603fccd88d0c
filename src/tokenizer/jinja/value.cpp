// tokenizer/jinja/value.cpp — Python semantics of template values (see value.h).

#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tessera::jinja {

const Value* Namespace::find(std::string_view name) const {
    for (const auto& [k, v] : attrs) {
        if (k == name) return v.get();
    }
    return nullptr;
}

void Namespace::set(const std::string& name, Value v) {
    auto value = std::make_shared<const Value>(std::move(v));
    for (auto& [k, old] : attrs) {
        if (k == name) {
            old = std::move(value);
            return;
        }
    }
    attrs.emplace_back(name, std::move(value));
}

Value::Value(Json j) : kind_(Kind::kJson), owner_(std::make_shared<const Json>(std::move(j))) {
    node_ = owner_.get();
}

Value Value::ref(std::shared_ptr<const Json> owner, const Json* node) {
    Value v;
    v.kind_ = Kind::kJson;
    v.owner_ = std::move(owner);
    v.node_ = node;
    return v;
}

Value Value::undefined(std::string name) {
    Value v;
    v.undefined_name_ = std::move(name);
    return v;
}

Value Value::from_namespace(std::shared_ptr<Namespace> ns) {
    Value v;
    v.kind_ = Kind::kNamespace;
    v.ns_ = std::move(ns);
    return v;
}

Value Value::from_macro(const MacroNode* macro) {
    Value v;
    v.kind_ = Kind::kMacro;
    v.macro_ = macro;
    return v;
}

Value Value::member(const std::string& key) const {
    if (is_object()) {
        auto it = node_->find(key);
        if (it != node_->end()) return ref(owner_, &*it);
    }
    return undefined(key);
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::kUndefined:
            return false;
        case Kind::kNamespace:
        case Kind::kMacro:
            return true;
        case Kind::kJson:
            break;
    }
    const Json& j = *node_;
    if (j.is_null()) return false;
    if (j.is_boolean()) return j.get<bool>();
    if (j.is_number_integer()) return j.get<int64_t>() != 0;
    if (j.is_number_float()) return j.get<double>() != 0.0;
    if (j.is_string()) return !j.get_ref<const std::string&>().empty();
    return !j.empty();  // array / object
}

std::string Value::str() const {
    switch (kind_) {
        case Kind::kUndefined:
            return "";
        case Kind::kNamespace:
            return "<Namespace>";
        case Kind::kMacro:
            return "<Macro>";
        case Kind::kJson:
            break;
    }
    return py_str(*node_);
}

Json Value::to_json() const {
    if (is_json()) return *node_;
    if (is_undefined()) return nullptr;
    if (is_namespace()) {
        // Python would keep the object; JSON has no such thing, so snapshot its attributes.
        Json obj = Json::object();
        for (const auto& [k, v] : ns_->attrs) obj[k] = v->to_json();
        return obj;
    }
    throw_error("a macro cannot be stored in a list or dict");
}

std::string py_type_name(const Value& v) {
    if (v.is_undefined()) return "Undefined";
    if (v.is_namespace()) return "Namespace";
    if (v.is_macro()) return "Macro";
    const Json& j = v.json();
    if (j.is_null()) return "NoneType";
    if (j.is_boolean()) return "bool";
    if (j.is_number_integer()) return "int";
    if (j.is_number_float()) return "float";
    if (j.is_string()) return "str";
    if (j.is_array()) return "list";
    return "dict";
}

static bool is_numeric(const Json& j) { return j.is_number() || j.is_boolean(); }

static double as_double(const Json& j) {
    if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
    if (j.is_number_float()) return j.get<double>();
    return static_cast<double>(j.get<int64_t>());
}

bool py_equal(const Json& a, const Json& b) {
    if (is_numeric(a) && is_numeric(b)) {
        // True == 1 and 1 == 1.0 in Python.
        bool a_int = !a.is_number_float(), b_int = !b.is_number_float();
        if (a_int && b_int) {
            auto to_i = [](const Json& j) {
                return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>();
            };
            return to_i(a) == to_i(b);
        }
        return as_double(a) == as_double(b);
    }
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
            if (!py_equal(a[i], b[i])) return false;
        }
        return true;
    }
    if (a.is_object()) {
        // Python dict equality ignores insertion order.
        if (a.size() != b.size()) return false;
        for (auto it = a.begin(); it != a.end(); ++it) {
            auto other = b.find(it.key());
            if (other == b.end() || !py_equal(it.value(), *other)) return false;
        }
        return true;
    }
    return a == b;
}

bool py_equal(const Value& a, const Value& b) {
    if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
    if (a.is_namespace() || b.is_namespace()) {
        return a.is_namespace() && b.is_namespace() && &a.ns() == &b.ns();
    }
    if (a.is_macro() || b.is_macro()) return a.macro() == b.macro();
    return py_equal(a.json(), b.json());
}

static std::string json_type_name(const Json& j) {
    if (j.is_null()) return "NoneType";
    if (j.is_boolean()) return "bool";
    if (j.is_number_integer()) return "int";
    if (j.is_number_float()) return "float";
    if (j.is_string()) return "str";
    if (j.is_array()) return "list";
    return "dict";
}

bool py_less(const Json& a, const Json& b) {
    if (is_numeric(a) && is_numeric(b)) {
        if (!a.is_number_float() && !b.is_number_float() && !a.is_boolean() && !b.is_boolean()) {
            return a.get<int64_t>() < b.get<int64_t>();
        }
        return as_double(a) < as_double(b);
    }
    if (a.is_string() && b.is_string()) {
        // Byte order of UTF-8 equals code point order, which is Python's str order.
        return a.get_ref<const std::string&>() < b.get_ref<const std::string&>();
    }
    if (a.is_array() && b.is_array()) {
        size_t n = std::min(a.size(), b.size());
        for (size_t i = 0; i < n; ++i) {
            if (!py_equal(a[i], b[i])) return py_less(a[i], b[i]);
        }
        return a.size() < b.size();
    }
    throw_error("'<' not supported between instances of '" + json_type_name(a) + "' and '" +
                json_type_name(b) + "'");
}

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    size_t e_pos = sci.find('e');
    int exp = std::stoi(sci.substr(e_pos + 1));
    std::string digits = sci.substr(0, e_pos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    if (exp < -4 || exp >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char e[16];
        std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        return out + e;
    }
    std::string int_part, frac_part;
    if (exp < 0) {
        int_part = "0";
        frac_part = std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
        int_part = digits + std::string(exp + 1 - digits.size(), '0');
    } else {
        int_part = digits.substr(0, exp + 1);
        frac_part = digits.substr(exp + 1);
    }
    if (frac_part.empty()) frac_part = "0";
    return sign + int_part + "." + frac_part;
}

static std::string repr_string(const std::string& s) {
    // Python picks double quotes only when the text has a single quote and no double quote.
    bool has_single = s.find('\'') != std::string::npos;
    bool has_double = s.find('"') != std::string::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == static_cast<unsigned char>(q)) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "\\x%02x", c);
            out += hex;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += q;
    return out;
}

std::string py_repr(const Json& j) {
    if (j.is_string()) return repr_string(j.get_ref<const std::string&>());
    if (j.is_null()) return "None";
    if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
    if (j.is_number_float()) return py_float_repr(j.get<double>());
    if (j.is_number_integer()) {
        return j.is_number_unsigned() ? std::to_string(j.get<uint64_t>())
                                      : std::to_string(j.get<int64_t>());
    }
    std::string out;
    if (j.is_array()) {
        out = "[";
        for (size_t i = 0; i < j.size(); ++i) {
            if (i) out += ", ";
            out += py_repr(j[i]);
        }
        return out + "]";
    }
    out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(it.key()) + ": " + py_repr(it.value());
    }
    return out + "}";
}

std::string py_str(const Json& j) {
    if (j.is_string()) return j.get<std::string>();
    return py_repr(j);
}

namespace {

struct Dumper {
    const DumpOptions& opt;
    std::string item_sep;
    std::string key_sep;
    std::string out;

    void string(const std::string& s) {
        out += '"';
        for (size_t i = 0; i < s.size(); ++i) {
            unsigned char c = static_cast<unsigned char>(s[i]);
            switch (c) {
                case '"':
                    out += "\\\"";
                    break;
                case '\\':
                    out += "\\\\";
                    break;
                case '\n':
                    out += "\\n";
                    break;
                case '\r':
                    out += "\\r";
                    break;
                case '\t':
                    out += "\\t";
                    break;
                case '\b':
                    out += "\\b";
                    break;
                case '\f':
                    out += "\\f";
                    break;
                default:
                    if (c < 0x20) {
                        hex4(c);
                    } else if (c >= 0x80 && opt.ensure_ascii) {
                        i += non_ascii(s, i) - 1;
                    } else {
                        out += static_cast<char>(c);  // ensure_ascii=False keeps UTF-8
                    }
            }
        }
        out += '"';
    }

    void hex4(uint32_t v) {
        char hex[16];
        std::snprintf(hex, sizeof(hex), "\\u%04x", v);
        out += hex;
    }

    // Writes the code point starting at s[i] as \uXXXX (a surrogate pair above the BMP);
    // returns its length in bytes.
    size_t non_ascii(const std::string& s, size_t i) {
        std::vector<std::string> one = utf8_chars(std::string_view(s).substr(i, 4));
        const std::string& ch = one.front();
        uint32_t cp = static_cast<unsigned char>(ch[0]);
        if (ch.size() == 2) cp &= 0x1f;
        if (ch.size() == 3) cp &= 0x0f;
        if (ch.size() == 4) cp &= 0x07;
        for (size_t k = 1; k < ch.size(); ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3f);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            hex4(0xd800 + (cp >> 10));
            hex4(0xdc00 + (cp & 0x3ff));
        } else {
            hex4(cp);
        }
        return ch.size();
    }

    void newline(int level) {
        if (opt.indent < 0) return;
        out += '\n';
        out.append(static_cast<size_t>(opt.indent * level), ' ');
    }

    void value(const Json& j, int level) {
        if (j.is_string()) {
            string(j.get_ref<const std::string&>());
        } else if (j.is_null()) {
            out += "null";
        } else if (j.is_boolean()) {
            out += j.get<bool>() ? "true" : "false";
        } else if (j.is_number_float()) {
            double d = j.get<double>();
            if (std::isnan(d)) {
                out += "NaN";
            } else if (std::isinf(d)) {
                out += d < 0 ? "-Infinity" : "Infinity";
            } else {
                out += py_float_repr(d);
            }
        } else if (j.is_number()) {
            out += py_repr(j);
        } else if (j.is_array()) {
            if (j.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t i = 0; i < j.size(); ++i) {
                if (i) out += item_sep;
                newline(level + 1);
                value(j[i], level + 1);
            }
            newline(level);
            out += ']';
        } else {
            if (j.empty()) {
                out += "{}";
                return;
            }
            std::vector<std::pair<std::string, const Json*>> items;
            for (auto it = j.begin(); it != j.end(); ++it)
                items.emplace_back(it.key(), &it.value());
            if (opt.sort_keys) {
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            }
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += item_sep;
                newline(level + 1);
                string(items[i].first);
                out += key_sep;
                value(*items[i].second, level + 1);
            }
            newline(level);
            out += '}';
        }
    }
};

}  // namespace

std::string py_json_dumps(const Json& j, const DumpOptions& options) {
    Dumper d{options, options.indent >= 0 ? "," : ", ", ": ", {}};
    if (options.separators) {
        d.item_sep = options.separators->first;
        d.key_sep = options.separators->second;
    }
    d.value(j, 0);
    return std::move(d.out);
}

static size_t utf8_seq_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead >> 5) == 0x6) return 2;
    if ((lead >> 4) == 0xe) return 3;
    if ((lead >> 3) == 0x1e) return 4;
    return 1;  // stray continuation byte: count it alone rather than fail
}

std::vector<std::string> utf8_chars(std::string_view s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = std::min(utf8_seq_len(static_cast<unsigned char>(s[i])), s.size() - i);
        out.emplace_back(s.substr(i, n));
        i += n;
    }
    return out;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size(); ++n) {
        i += utf8_seq_len(static_cast<unsigned char>(s[i]));
    }
    return n;
}

}  // namespace tessera::jinja
