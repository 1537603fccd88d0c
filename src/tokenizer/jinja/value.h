#pragma once
// tokenizer/jinja/value.h — the runtime value of the Jinja subset: a JSON value (shared,
// immutable, so walking `messages` never copies it), Jinja's Undefined, a namespace()
// object or a macro; plus the Python semantics templates rely on: truthiness, str(),
// repr(), ==, ordering and json.dumps as transformers' `tojson` does it.
// Values are immutable except a Namespace's attributes; one render owns its values.

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/error.h"

namespace tessera::jinja {

// Ordered so that tojson prints keys in the order the request gave them, as Python dicts do.
using Json = nlohmann::ordered_json;

struct MacroNode;
class Value;

// namespace(...): the one mutable object; `set ns.x = ...` writes through every copy.
struct Namespace {
    std::vector<std::pair<std::string, std::shared_ptr<const Value>>> attrs;  // insertion order
    const Value* find(std::string_view name) const;
    void set(const std::string& name, Value v);
};

class Value {
 public:
    enum class Kind { kUndefined, kJson, kNamespace, kMacro };

    Value() = default;       // Undefined
    explicit Value(Json j);  // takes ownership of a fresh JSON value
    static Value ref(std::shared_ptr<const Json> owner, const Json* node);  // node in owner
    static Value undefined(std::string name = {});
    static Value from_namespace(std::shared_ptr<Namespace> ns);
    static Value from_macro(const MacroNode* macro);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::kUndefined; }
    bool is_json() const { return kind_ == Kind::kJson; }
    bool is_namespace() const { return kind_ == Kind::kNamespace; }
    bool is_macro() const { return kind_ == Kind::kMacro; }
    // Valid only when is_json().
    const Json& json() const { return *node_; }
    bool is_null() const { return is_json() && node_->is_null(); }
    bool is_string() const { return is_json() && node_->is_string(); }
    bool is_bool() const { return is_json() && node_->is_boolean(); }
    bool is_int() const { return is_json() && node_->is_number_integer(); }
    bool is_number() const { return is_json() && node_->is_number(); }  // bool excluded
    bool is_array() const { return is_json() && node_->is_array(); }
    bool is_object() const { return is_json() && node_->is_object(); }
    const std::string& str_ref() const { return node_->get_ref<const std::string&>(); }
    Namespace& ns() const { return *ns_; }
    const MacroNode* macro() const { return macro_; }
    // The variable name an Undefined came from, for error messages ("'x' is undefined").
    const std::string& undefined_name() const { return undefined_name_; }

    // Element / member views sharing this value's storage (no copy). Missing → Undefined.
    Value member(const std::string& key) const;
    Value element(const Json& node) const { return ref(owner_, &node); }

    // Python bool(x); Undefined is false.
    bool truthy() const;
    // Python str(x) as Jinja prints it: True/None, "['a', 1]", "{'a': 1}"; Undefined → "".
    std::string str() const;
    // The JSON form when a value is stored in a list/dict or dumped; Undefined → null.
    Json to_json() const;

 private:
    Kind kind_ = Kind::kUndefined;
    std::shared_ptr<const Json> owner_;
    const Json* node_ = nullptr;
    std::shared_ptr<Namespace> ns_;
    const MacroNode* macro_ = nullptr;
    std::string undefined_name_;
};

// Python semantics on JSON values.
bool py_equal(const Value& a, const Value& b);
bool py_equal(const Json& a, const Json& b);
// a < b for numbers, strings and lists; anything else is a TypeError (thrown).
bool py_less(const Json& a, const Json& b);
std::string py_repr(const Json& j);
std::string py_str(const Json& j);
std::string py_float_repr(double d);
// Python json.dumps options. separators default as in Python: (", ", ": ") without indent,
// ("," , ": ") with one.
struct DumpOptions {
    int indent = -1;  // < 0: None (single line)
    bool sort_keys = false;
    bool ensure_ascii = false;
    std::optional<std::pair<std::string, std::string>> separators;  // item, key
};
std::string py_json_dumps(const Json& j, const DumpOptions& options);
// Python type name for error messages: str, int, float, bool, NoneType, list, dict.
std::string py_type_name(const Value& v);

// UTF-8 helpers: Python indexes strings by code point.
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

}  // namespace tessera::jinja
