#pragma once
// tokenizer/jinja/pystr.h — Python str methods on UTF-8 text, as templates call them
// (strip, split, replace, case changes...). Positions and lengths are in code points, as
// in Python. Case mapping covers ASCII only: other letters are left unchanged.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

// Python str.isspace() for one code point given as UTF-8.
bool py_isspace(std::string_view ch);
// str.strip / lstrip / rstrip; chars unset → whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split(sep, maxsplit) and str.rsplit; sep unset → runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right = false);
// str.replace(old, new, count); count < 0 → all.
std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first upper, rest lower
std::string py_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);    // the |title filter (splits at -, space, ([{<)
std::string html_escape(std::string_view s);    // markupsafe.escape: & < > " '
// str.find / str.count in code points; -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right = false);
int64_t py_count(std::string_view s, std::string_view sub);

}  // namespace tessera::jinja
