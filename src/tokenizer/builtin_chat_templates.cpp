#include "tokenizer/builtin_chat_templates.h"

#include <array>
#include <utility>

namespace tessera::tokenizer {
namespace {

// SeparatorStyle.CHATML: the system block always (default "You are a helpful assistant."), each
// user / assistant message as "<|im_start|>ROLE\nTEXT<|im_end|>\n", then the open assistant turn.
// generate_chat_conv takes the last system message and always adds the assistant turn.
constexpr const char* kChatml = R"JINJA(
{%- set ns = namespace(system="You are a helpful assistant.") -%}
{%- for m in messages -%}{%- if m['role'] == 'system' -%}{%- set ns.system = m['content'] -%}{%- endif -%}{%- endfor -%}
{{- '<|im_start|>system\n' + ns.system + '<|im_end|>\n' -}}
{%- for m in messages -%}
  {%- if m['role'] == 'user' or m['role'] == 'assistant' -%}
    {{- '<|im_start|>' + m['role'] + '\n' -}}
    {%- if m['content'] -%}{{- m['content'] + '<|im_end|>\n' -}}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{{- '<|im_start|>assistant\n' -}}
)JINJA";

// SeparatorStyle.LLAMA2 with `system_open` / `system_close` around the system message (or
// "[INST] " without one): the first message bare, then "[/INST] TEXT </s><s>" and
// "[INST] TEXT " by position, and the open turn's tag last.
std::string llama2_style(const std::string& system_open, const std::string& system_close) {
    return R"JINJA(
{%- set ns = namespace(system="", i=0) -%}
{%- for m in messages -%}{%- if m['role'] == 'system' -%}{%- set ns.system = m['content'] -%}{%- endif -%}{%- endfor -%}
{%- if ns.system -%}{{- ')JINJA" + system_open + R"JINJA(' + ns.system + ')JINJA" + system_close + R"JINJA(' -}}
{%- else -%}{{- '[INST] ' -}}{%- endif -%}
{%- for m in messages -%}
  {%- if m['role'] == 'user' or m['role'] == 'assistant' -%}
    {%- if m['content'] -%}
      {%- if ns.i == 0 -%}{{- m['content'] + ' ' -}}
      {%- elif ns.i % 2 == 0 -%}{{- '[INST] ' + m['content'] + ' ' -}}
      {%- else -%}{{- '[/INST] ' + m['content'] + ' </s><s>' -}}{%- endif -%}
    {%- else -%}{{- '[INST]' if ns.i % 2 == 0 else '[/INST]' -}}{%- endif -%}
    {%- set ns.i = ns.i + 1 -%}
  {%- endif -%}
{%- endfor -%}
{{- '[INST]' if ns.i % 2 == 0 else '[/INST]' -}}
)JINJA";
}

}  // namespace

std::optional<std::string> builtin_chat_template(std::string_view name) {
    if (name == "chatml") return std::string(kChatml);
    if (name == "llama-2") return llama2_style("[INST] <<SYS>>\\n", "\\n<</SYS>>\\n\\n");
    if (name == "mistral") return llama2_style("[SYSTEM_PROMPT]\\n", "\\n[/SYSTEM_PROMPT]\\n\\n");
    return std::nullopt;
}

std::string builtin_chat_template_names() { return "chatml, llama-2, mistral"; }

}  // namespace tessera::tokenizer
