#pragma once
// tokenizer/jinja/template.h — a renderer for the subset of Jinja2 that Hugging Face chat
// templates use, rendering the way transformers does (trim_blocks, lstrip_blocks,
// keep_trailing_newline off, `raise_exception`, `strftime_now`, `tojson` as transformers'
// filter). A Template is immutable after compile(); render() is thread-safe.
// Values are JSON (nlohmann::json); include <nlohmann/json.hpp> where you build contexts.

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::jinja {

class Template {
 public:
    ~Template();
    Template(Template&&) noexcept;
    Template& operator=(Template&&) noexcept;

    // Parses `source`; an unsupported construct fails here with an error naming it and
    // its line, e.g. "unsupported filter 'wordwrap' at line 3".
    static StatusOr<Template> compile(const std::string& source);

    // Renders with `context` (a JSON object of top-level variables). raise_exception(msg)
    // in the template becomes an InvalidArgument status carrying msg.
    StatusOr<std::string> render(const nlohmann::json& context) const;
    // Same, keeping the caller's key order: `tojson` then prints dicts (e.g. tool schemas)
    // in insertion order as Python does, where nlohmann::json would sort the keys.
    StatusOr<std::string> render(const nlohmann::ordered_json& context) const;

 private:
    struct Impl;
    explicit Template(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::jinja
