#pragma once
// tokenizer/jinja/error.h — the error the Jinja lexer, parser and interpreter throw inside
// this folder. It never leaves it: Template::compile/render catch it and return a Status.
// An exception (not StatusOr) because every expression evaluation can fail and threading a
// Status through each of them would double the interpreter's size for the rare error path.

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::jinja {

class JinjaError : public std::runtime_error {
 public:
    // line 0: not known yet; the interpreter fills in the line of the enclosing node.
    JinjaError(StatusCode code, const std::string& message, int line = 0)
        : std::runtime_error(message), code_(code), line_(line) {}

    StatusCode code() const { return code_; }
    int line() const { return line_; }
    void set_line(int line) { line_ = line; }
    // "message at line N" (the line only once known).
    std::string describe() const {
        std::string m = what();
        if (line_ > 0) m += " at line " + std::to_string(line_);
        return m;
    }

 private:
    StatusCode code_;
    int line_;
};

// Concatenation for messages. (GCC 12 warns falsely, -Wrestrict, on some inlined
// "literal" + std::string expressions; appending avoids them.)
inline std::string str_cat(std::initializer_list<std::string_view> parts) {
    std::string out;
    for (std::string_view p : parts) out.append(p);
    return out;
}

// A template uses a construct outside the supported subset ("unsupported filter 'x'").
[[noreturn]] inline void throw_unsupported(const std::string& what, int line = 0) {
    throw JinjaError(StatusCode::kUnimplemented, "unsupported " + what, line);
}
// A template is malformed or fails at run time (type errors, raise_exception).
[[noreturn]] inline void throw_error(const std::string& what, int line = 0) {
    throw JinjaError(StatusCode::kInvalidArgument, what, line);
}

}  // namespace tessera::jinja
