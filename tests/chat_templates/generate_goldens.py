#!/usr/bin/python3
"""Writes the chat-template goldens qwen3.json and llama3.json next to this script.

Each model's "chat_template" from its tokenizer_config.json is rendered with Debian's
python3-jinja2 exactly as transformers' apply_chat_template(tokenize=False) does it
(transformers is not needed): an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension, transformers' own `tojson` filter
(json.dumps, ensure_ascii=False), the raise_exception / strftime_now globals, and the
variables messages, tools, documents, add_generation_prompt, the special tokens of the
config and any extra request key (enable_thinking, ...).

Usage: /usr/bin/python3 tests/chat_templates/generate_goldens.py [ASSETS_DIR]
ASSETS_DIR holds <model>/tokenizer_config.json; default: ../shared/assets/tokenizers
relative to the repository root.
"""

import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_ASSETS = os.path.join(REPO, "..", "shared", "assets", "tokenizers")

SPECIAL_TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                      "cls_token", "mask_token", "additional_special_tokens"]


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers overrides Jinja's tojson: no HTML escaping, non-ASCII kept.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(token):
    # Configs store tokens as strings or as serialized AddedToken dicts.
    if isinstance(token, dict):
        return token.get("content")
    return token


def special_tokens_map(config):
    # Like transformers' special_tokens_map: only the tokens that are set.
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = config.get(key)
        if value is None:
            continue
        out[key] = [token_text(t) for t in value] if isinstance(value, list) else token_text(value)
    return out


def render(env, template, config, request):
    extra = {k: v for k, v in request.items()
             if k not in ("messages", "tools", "documents", "add_generation_prompt")}
    return env.from_string(template).render(
        messages=request["messages"],
        tools=request.get("tools"),
        documents=request.get("documents"),
        add_generation_prompt=request.get("add_generation_prompt", False),
        **special_tokens_map(config),
        **extra)


# ---- conversations -------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "safe": {"type": "boolean"},
                "score": {"type": "number", "default": 0.5},
            },
            "required": ["query"],
        },
    },
}


def common_cases():
    return [
        {"name": "system_user_generation", "request": {
            "messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"}],
            "add_generation_prompt": True}},
        {"name": "user_only_no_generation_prompt", "request": {
            "messages": [{"role": "user", "content": "Hello!"}],
            "add_generation_prompt": False}},
        {"name": "user_only_flag_absent", "request": {
            "messages": [{"role": "user", "content": "Hi there"}]}},
        {"name": "multi_turn", "request": {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "Name a prime number."},
                {"role": "assistant", "content": "7 is a prime number."},
                {"role": "user", "content": "And an even one?"},
            ],
            "add_generation_prompt": True}},
        {"name": "ends_with_assistant", "request": {
            "messages": [
                {"role": "user", "content": "Say hi."},
                {"role": "assistant", "content": "Hi!"},
            ],
            "add_generation_prompt": False}},
        {"name": "unicode_content", "request": {
            "messages": [
                {"role": "system", "content": "Réponds en français, s'il te plaît."},
                {"role": "user", "content": "你好，世界! 🌍 Ünïcödé \"quotes\" and 'single' \\ back"},
                {"role": "assistant", "content": "こんにちは 👋 — ça va?"},
                {"role": "user", "content": "Tab\there,\nnew line."},
            ],
            "add_generation_prompt": True}},
    ]


def qwen3_cases():
    cases = common_cases()
    cases += [
        {"name": "think_in_history", "request": {
            "messages": [
                {"role": "user", "content": "What is 3 * 4?"},
                {"role": "assistant",
                 "content": "<think>\nMultiply 3 by 4.\n</think>\n\n3 * 4 = 12."},
                {"role": "user", "content": "And 5 * 6?"},
            ],
            "add_generation_prompt": True}},
        {"name": "reasoning_content_last_turn", "request": {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "Is 91 prime?"},
                {"role": "assistant", "content": "No: 91 = 7 * 13.",
                 "reasoning_content": "\nTry small divisors: 7 * 13 = 91.\n"},
            ],
            "add_generation_prompt": False}},
        {"name": "think_tags_last_turn", "request": {
            "messages": [
                {"role": "user", "content": "Pick a color."},
                {"role": "assistant", "content": "<think>\nAny will do.\n</think>\n\nBlue."},
            ],
            "add_generation_prompt": False}},
        {"name": "enable_thinking_false", "request": {
            "messages": [SYSTEM, {"role": "user", "content": "Quick answer: capital of Italy?"}],
            "add_generation_prompt": True, "enable_thinking": False}},
        {"name": "enable_thinking_true", "request": {
            "messages": [{"role": "user", "content": "Think about it: 17 * 23?"}],
            "add_generation_prompt": True, "enable_thinking": True}},
        {"name": "tools_with_system", "request": {
            "messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}],
            "tools": [WEATHER_TOOL, SEARCH_TOOL],
            "add_generation_prompt": True}},
        {"name": "tools_without_system", "request": {
            "messages": [{"role": "user", "content": "Search for jinja2 docs."}],
            "tools": [SEARCH_TOOL],
            "add_generation_prompt": True, "enable_thinking": False}},
        {"name": "tool_calls_and_responses", "request": {
            "messages": [
                SYSTEM,
                {"role": "user", "content": "Weather in Paris and Tokyo, in celsius?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [
                     {"type": "function", "function": {
                         "name": "get_weather",
                         "arguments": {"city": "Paris", "unit": "celsius"}}},
                     {"type": "function", "function": {
                         "name": "get_weather",
                         "arguments": "{\"city\": \"Tokyo\", \"unit\": \"celsius\"}"}},
                 ]},
                {"role": "tool", "content": "{\"temperature\": 18, \"sky\": \"cloudy\"}"},
                {"role": "tool", "content": "{\"temperature\": 24.5, \"sky\": \"clear\"}"},
                {"role": "assistant", "content": "Paris: 18 °C, cloudy. Tokyo: 24.5 °C, clear."},
                {"role": "user", "content": "Thanks! Anything for tomorrow?"},
            ],
            "tools": [WEATHER_TOOL],
            "add_generation_prompt": True}},
        {"name": "tool_call_with_content_multi_step", "request": {
            "messages": [
                {"role": "user", "content": "Find the weather in Oslo."},
                {"role": "assistant", "content": "Let me check.",
                 "reasoning_content": "The user wants Oslo weather; call the tool.",
                 "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                {"role": "tool", "content": "{\"temperature\": -3}"},
            ],
            "tools": [WEATHER_TOOL],
            "add_generation_prompt": True}},
        {"name": "system_not_first", "request": {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Explain gravity."},
            ],
            "add_generation_prompt": True}},
    ]
    return cases


def llama3_cases():
    cases = common_cases()
    cases += [
        {"name": "content_needing_trim", "request": {
            "messages": [
                {"role": "system", "content": "  \n  Be concise.  \n"},
                {"role": "user", "content": "\n\n  What is the speed of light?\t \n"},
                {"role": "assistant", "content": "   About 3e8 m/s.\n\n"},
                {"role": "user", "content": " Thanks "},
            ],
            "add_generation_prompt": True}},
        {"name": "empty_and_blank_content", "request": {
            "messages": [
                {"role": "user", "content": ""},
                {"role": "assistant", "content": " \n\t "},
                {"role": "user", "content": "ok"},
            ],
            "add_generation_prompt": True}},
        {"name": "long_multi_turn", "request": {
            "messages": [SYSTEM] + [
                m for i in range(4) for m in (
                    {"role": "user", "content": f"Question {i}?"},
                    {"role": "assistant", "content": f"Answer {i}."})
            ] + [{"role": "user", "content": "Last question?"}],
            "add_generation_prompt": True}},
        {"name": "other_role", "request": {
            "messages": [
                {"role": "user", "content": "Run the tool."},
                {"role": "ipython", "content": "{\"result\": 42}"},
            ],
            "add_generation_prompt": True}},
    ]
    return cases


def main():
    assets = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_ASSETS
    env = make_environment()
    for model, cases in (("qwen3", qwen3_cases()), ("llama3", llama3_cases())):
        with open(os.path.join(assets, model, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        template = config["chat_template"]
        for case in cases:
            case["expected"] = render(env, template, config, case["request"])
        out = {
            "model": model,
            "generator": "tests/chat_templates/generate_goldens.py (python3-jinja2 %s)"
                         % jinja2.__version__,
            "cases": cases,
        }
        path = os.path.join(HERE, model + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print("wrote %s (%d cases)" % (path, len(cases)))


if __name__ == "__main__":
    main()
