#pragma once
// tokenizer/jinja/builtins.h — the filters, tests, methods and global functions of the
// supported subset. The is_* predicates let the parser reject anything else at compile
// time; the apply_* functions implement them with Jinja2/Python semantics. Stateless.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace tessera::jinja {

using KwArgs = std::vector<std::pair<std::string, Value>>;

bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);           // str / dict / list methods, e.g. startswith
bool is_global_function(std::string_view name);  // namespace, range, raise_exception, ...

// `value | name(args, kwargs)`.
Value apply_filter(const std::string& name, const Value& value, const std::vector<Value>& args,
                   const KwArgs& kwargs);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args);
// `object.name(args, kwargs)`.
Value call_method(const Value& object, const std::string& name, const std::vector<Value>& args,
                  const KwArgs& kwargs);
// Global functions other than macros. raise_exception throws JinjaError(InvalidArgument).
Value call_global(const std::string& name, const std::vector<Value>& args, const KwArgs& kwargs);

// Python-style number coercions used by filters and arithmetic; throw on non-numbers.
int64_t to_int(const Value& v, const char* what);
double to_double(const Value& v, const char* what);

}  // namespace tessera::jinja
