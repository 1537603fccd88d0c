#!/usr/bin/env python3
"""Constrained decoding end to end, as a user runs it.

A tiny f32 Qwen3 model with the real Qwen3 tokenizer is served in several layouts (one rank with
and without overlap scheduling, TP2, PP2, two DP replicas). Its random weights want anything but
the pattern, so every answer that matches shows the mask at work. Checked against Python's own
`re` and `json`:
- /generate with `regex`, greedy and sampled, matches as a whole and ends with "stop"; the greedy
  tokens are the same in every layout (one rank's);
- /generate with `json_schema`, and the OpenAI chat route with `response_format` json_schema and
  json_object, give JSON that fits the schema, spaced as the server's whitespace flags say;
- a streamed completion with `regex` matches once its chunks are joined;
- chat with tool_choice "required" or a named function answers tool_calls whose arguments fit
  the tools' parameters, whole and streamed; with --tool-call-parser and a strict tool, the calls
  the model writes under tool_choice "auto" fit too;
- with --reasoning-parser, a require_reasoning request thinks unconstrained until </think> and is
  constrained after it; with --enable-strict-thinking its reasoning holds no end of turn (nor
  tool-call marker), custom_params.thinking_budget ends it with </think>, and a request without
  reasoning is not filtered; with --grammar-backend none the flag is refused;
- an `ebnf` grammar (rules, literals, classes, repetition) gives a sentence of its root rule;
- a `structural_tag` (in /generate and as the chat route's response_format) leaves the text free
  but makes every trigger open one of its structures;
- bad patterns and grammars, two constraints at once and --grammar-backend none are refused with 400.
Exit 0 when every check passes.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, make_tiny_model, script_args, with_server  # noqa: E402

THINK_END = 151668  # Qwen3's </think>
IM_END = 151645  # Qwen3's <|im_end|>, its end of turn (an eos)
TOOL_CALL = 151657  # Qwen3's <tool_call>
LAYOUTS = [[], ["--disable-overlap-schedule"], ["--tp", "2"], ["--pp-size", "2"], ["--dp", "2"]]
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
WORDS = r"(red|green|blue)( (and|or) (red|green|blue)){0,2}\."
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "size": {"enum": ["S", "M", "L"]},
    "count": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "required": ["name", "size"]}


def fits_schema(value):
    """Whether `value` is an instance of SCHEMA (written out: no jsonschema package here)."""
    if not isinstance(value, dict) or not {"name", "size"} <= value.keys() <= set(SCHEMA["properties"]):
        return False
    if not isinstance(value["name"], str) or len(value["name"]) > 8 or value["size"] not in ("S", "M", "L"):
        return False
    if "count" in value and (not isinstance(value["count"], int) or isinstance(value["count"], bool)):
        return False
    tags = value.get("tags", [])
    return isinstance(tags, list) and len(tags) <= 3 and all(isinstance(t, bool) for t in tags)


def generate(server, constraint, temperature=0.0, max_new_tokens=64, seed=None, **extra):
    params = {"temperature": temperature, "max_new_tokens": max_new_tokens, **constraint}
    if seed is not None:
        params["sampling_seed"] = seed
    return server.post("/generate", {"text": "Answer:", "sampling_params": params, **extra})


def finish(body):
    return body.get("meta_info", {}).get("finish_reason", {}).get("type")


def check_regexes(check, server, name):
    """Returns the greedy output ids of PHONE (compared across layouts)."""
    greedy = None
    for pattern in (PHONE, WORDS):
        status, body = generate(server, {"regex": pattern})
        ok = status == 200 and re.fullmatch(pattern, body.get("text", "")) is not None and finish(body) == "stop"
        check(f"{name}: greedy regex {pattern} matches", ok, body)
        if pattern == PHONE and status == 200:
            greedy = body["output_ids"]
        for seed in (1, 2):
            status, body = generate(server, {"regex": pattern}, temperature=1.0, seed=seed)
            ok = status == 200 and re.fullmatch(pattern, body.get("text", "")) is not None and finish(body) == "stop"
            check(f"{name}: sampled regex {pattern} (seed {seed}) matches", ok, body)
    return greedy


# GBNF as xgrammar reads it: a greeting, then one to three items, each a word and a number.
EBNF = r'''
root   ::= greet ": " item (", " item){0,2} "."
greet  ::= "hello" | "hi"   # either word
item   ::= [a-z]{2,5} " " [1-9] [0-9]?
'''
EBNF_RE = r"(hello|hi): [a-z]{2,5} [1-9][0-9]?(, [a-z]{2,5} [1-9][0-9]?){0,2}\."


def check_ebnf(check, server, name):
    for seed in (None, 5):
        status, body = generate(server, {"ebnf": EBNF}, temperature=1.0 if seed else 0.0, seed=seed)
        ok = status == 200 and re.fullmatch(EBNF_RE, body.get("text", "")) is not None and finish(body) == "stop"
        check(f"{name}: ebnf output is a sentence of root (seed {seed})", ok, body)


# Every space opens a structure: ' "S".' or ' "M".' (half of the vocabulary's tokens start with
# a space, so sampled text hits the trigger again and again).
STRUCTURAL_TAG = {"type": "structural_tag", "triggers": [" "],
                  "structures": [{"begin": " ", "schema": {"enum": ["S", "M"]}, "end": "."}]}
# The same in xgrammar's structural-tag format (SGLang's docs send this one), and with
# at_least_one and stop_after_first: exactly one structure, after which the grammar ends.
SPACE_TAG = {"type": "tag", "begin": " ", "content": {"type": "json_schema", "json_schema": {"enum": ["S", "M"]}},
             "end": "."}
TRIGGERED_TAGS = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [" "],
                                                       "tags": [SPACE_TAG]}}
ONE_TAG = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [" "], "tags": [SPACE_TAG],
                                                "at_least_one": True, "stop_after_first": True}}


def fits_structural_tag(text):
    """Whether `text` is free text whose every space begins ' "S".' or ' "M".' (the last one may
    be cut short by max_new_tokens); the number of structures."""
    i, found = 0, 0
    while i < len(text):
        if text[i] != " ":
            i += 1
            continue
        piece = text[i:i + 5]
        if piece in (' "S".', ' "M".'):
            found, i = found + 1, i + 5
        elif i + len(piece) == len(text) and any(s.startswith(piece) for s in (' "S".', ' "M".')):
            return found
        else:
            return -1
    return found


def check_structural_tag(check, server, name):
    # The random model would rather not write a space; a bias towards the token ' "' makes it
    # open structures (without the constraint the token would repeat; with it, each one must
    # be finished before the next).
    status, body = server.post("/generate", {"text": ' "', "return_logprob": True, "logprob_start_len": 0,
                                             "sampling_params": {"max_new_tokens": 0}})
    ids = [e[1] for e in body["meta_info"]["input_token_logprobs"]] if status == 200 else []
    bias = {str(ids[-1]): 30.0} if ids else {}
    status, body = generate(server, {"structural_tag": json.dumps(STRUCTURAL_TAG), "ignore_eos": True,
                                     "logit_bias": bias}, max_new_tokens=24) if bias else (0, {})
    found = fits_structural_tag(body.get("text", "")) if status == 200 else -1
    check(f"{name}: structural_tag: free text, each trigger opening a structure", found >= 2, body)
    status, chat = server.post("/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, "temperature": 0,
        "logit_bias": bias, "ignore_eos": True, "response_format": STRUCTURAL_TAG})
    text = chat["choices"][0]["message"]["content"] if status == 200 else ""
    check(f"{name}: response_format structural_tag", status == 200 and fits_structural_tag(text) >= 2, chat)
    status, body = generate(server, {"structural_tag": TRIGGERED_TAGS, "ignore_eos": True, "logit_bias": bias},
                            max_new_tokens=24)
    found = fits_structural_tag(body.get("text", "")) if status == 200 else -1
    check(f"{name}: xgrammar's structural_tag format: triggered_tags", found >= 2, body)
    status, chat = server.post("/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, "temperature": 0,
        "response_format": ONE_TAG})
    text = chat["choices"][0]["message"]["content"] if status == 200 else ""
    check(f"{name}: at_least_one + stop_after_first: one structure, then the grammar ends the answer",
          status == 200 and text in (' "S".', ' "M".') and chat["choices"][0]["finish_reason"] == "stop", chat)
    status, free = generate(server, {"ignore_eos": True, "logit_bias": bias}, max_new_tokens=24)
    check(f"{name}: without the tag the biased token repeats (the tag is what shaped the answers)",
          status == 200 and fits_structural_tag(free.get("text", "")) < 0, free)


def check_json(check, server, name, compact):
    for seed in (None, 3):
        status, body = generate(server, {"json_schema": json.dumps(SCHEMA)}, temperature=1.0 if seed else 0.0,
                                seed=seed, max_new_tokens=120)
        text = body.get("text", "") if status == 200 else ""
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        check(f"{name}: json_schema output fits (seed {seed})", fits_schema(value) and finish(body) == "stop", body)
        if compact and value is not None:
            check(f"{name}: compact JSON is json.dumps' spacing", text == json.dumps(value, ensure_ascii=False), text)
    status, body = server.post("/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "a shirt?"}], "max_tokens": 120,
        "response_format": {"type": "json_schema", "json_schema": {"name": "shirt", "schema": SCHEMA}}})
    content = body["choices"][0]["message"]["content"] if status == 200 else ""
    try:
        ok = fits_schema(json.loads(content)) and body["choices"][0]["finish_reason"] == "stop"
    except ValueError:
        ok = False
    check(f"{name}: chat response_format json_schema fits", ok, body)
    status, body = server.post("/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "json"}], "max_tokens": 60, "temperature": 0,
        "response_format": {"type": "json_object"}})
    content = body["choices"][0]["message"]["content"] if status == 200 else ""
    try:
        ok = isinstance(json.loads(content), dict)
    except ValueError:
        ok = body.get("choices", [{}])[0].get("finish_reason") == "length" and content.startswith("{")
    check(f"{name}: chat json_object is an object (or its start, cut by max_tokens)", ok, body)


def check_stream(check, server, name):
    status, chunks = server.stream("/v1/completions", {"model": "tiny", "prompt": "Colours:", "max_tokens": 40,
                                                       "temperature": 0.8, "seed": 7, "regex": WORDS})
    text = "".join(chunk["choices"][0]["text"] for chunk in chunks)
    check(f"{name}: streamed completion matches once joined", status == 200 and re.fullmatch(WORDS, text), text)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
              "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                              "days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["city", "days"]}}},
         {"type": "function", "function": {"name": "get_time"}}]


def check_tool_choice(check, server, name):
    """tool_choice "required" and a named function: the answer is tool_calls that fit the tools."""
    for choice, parallel in (("required", True), ({"type": "function", "function": {"name": "get_weather"}}, False)):
        for stream in (False, True):
            body = {"model": "tiny", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS,
                    "tool_choice": choice, "parallel_tool_calls": parallel, "max_tokens": 200, "temperature": 0.7,
                    "seed": 11, "stream": stream}
            status, calls, finish = chat_tool_calls(server, body)
            ok = status == 200 and finish == "tool_calls" and len(calls) >= 1 and (parallel or len(calls) == 1)
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                if call["function"]["name"] == "get_weather":
                    ok = ok and set(args) == {"city", "days"} and 1 <= args["days"] <= 7 and len(args["city"]) <= 12
                else:
                    ok = ok and call["function"]["name"] == "get_time" and choice == "required" and args == {}
                ok = ok and call["id"].startswith("call_")
            check(f"{name}: tool_choice {json.dumps(choice)} (stream {stream}) answers fitting tool_calls", ok,
                  (status, calls, finish))


def check_strict_tools(check, server):
    """--tool-call-parser qwen25 and a strict tool with tool_choice "auto": every call the model
    writes is held to the tool's schema (a bias makes the random model open calls)."""
    tool = {"type": "function", "function": {"name": "unit_of", "strict": True, "parameters": {
        "type": "object", "properties": {"unit": {"enum": ["C", "F"]}}, "required": ["unit"],
        "additionalProperties": False}}}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "unit?"}], "tools": [tool], "max_tokens": 60,
            "temperature": 0, "ignore_eos": True, "logit_bias": {str(TOOL_CALL): 30.0}, "stream": False}
    status, calls, finish = chat_tool_calls(server, body)
    ok = status == 200 and len(calls) >= 1 and all(
        c["function"]["name"] == "unit_of" and json.loads(c["function"]["arguments"]) in ({"unit": "C"}, {"unit": "F"})
        for c in calls)
    check("strict tool, tool_choice auto: the calls fit the tool's schema", ok, (status, calls, finish))
    status, calls, _ = chat_tool_calls(server, {**body, "tools": [{"type": "function", "function": {
        **tool["function"], "strict": False}}]})
    check("not strict: the same bias writes no call that parses", status == 200 and not calls, calls)


def chat_tool_calls(server, body):
    """(status, the choice's tool_calls, finish_reason), joining a stream's deltas."""
    if not body["stream"]:
        status, answer = server.post("/v1/chat/completions", body)
        if status != 200:
            return status, [], answer
        choice = answer["choices"][0]
        return status, choice["message"].get("tool_calls") or [], choice["finish_reason"]
    status, chunks = server.stream("/v1/chat/completions", body)
    calls, finish = {}, None
    for chunk in chunks:
        choice = chunk["choices"][0]
        finish = choice.get("finish_reason") or finish
        for piece in choice["delta"].get("tool_calls") or []:
            call = calls.setdefault(piece["index"], {"id": "", "function": {"name": "", "arguments": ""}})
            call["id"] = piece.get("id") or call["id"]
            call["function"]["name"] += piece.get("function", {}).get("name") or ""
            call["function"]["arguments"] += piece.get("function", {}).get("arguments") or ""
    return status, [calls[i] for i in sorted(calls)], finish


def check_refusals(check, server, name):
    cases = [({"regex": "(?=a)b"}, "lookaround"), ({"regex": "(ab"}, "missing )"),
             ({"json_schema": "{\"type\": \"number\", \"minimum\": 1}"}, "'minimum' on a number is not supported"),
             ({"json_schema": "{not json"}, "not valid JSON"),
             ({"ebnf": "root ::= item\nitem ::= \"a\" missing"}, "rule 'missing' is used but not defined"),
             ({"regex": "a", "json_schema": "{}"}, "Only one of regex, json_schema, or ebnf can be set."),
             ({"structural_tag": json.dumps({"triggers": ["<f"], "structures": [
                 {"begin": "<g>", "schema": {}, "end": ""}]})}, "starts with none of the triggers"),
             ({"structural_tag": {"type": "structural_tag", "format": {
                 "type": "tag", "begin": "<", "content": {"type": "any_text"}, "end": ""}}},
              "When the content is unlimited, at least one end string must be non-empty"),
             ({"structural_tag": {"type": "structural_tag", "format": {"type": "token", "token": 3}}},
              "token-level format")]
    for constraint, words in cases:
        status, body = generate(server, constraint)
        message = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
        check(f"{name}: {constraint} refused", status == 400 and words in message, (status, body))


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    model = make_tiny_model(tessera, workdir)
    greedy = {}
    for index, flags in enumerate(LAYOUTS):
        name = " ".join(flags) or "TP1"
        # One layout writes JSON compactly, the others with at most one space between tokens (the
        # random model would otherwise fill the default "any whitespace" with newlines).
        compact = index == 0
        ws = ["--constrained-json-disable-any-whitespace"] if compact else \
            ["--constrained-json-whitespace-pattern", "[ ]?"]
        server = Server(tessera, model, [*flags, *ws], os.path.join(workdir, f"layout{index}.log"))
        try:
            if not check(f"{name}: server ready", server.ready()):
                continue
            greedy[name] = check_regexes(check, server, name)
            check_ebnf(check, server, name)
            check_json(check, server, name, compact)
            if index == 0:
                check_structural_tag(check, server, name)
                check_stream(check, server, name)
                check_tool_choice(check, server, name)
                check_refusals(check, server, name)
        finally:
            server.close()
    first = greedy.get("TP1")
    for name, ids in greedy.items():
        check(f"{name}: greedy constrained tokens are one rank's", ids == first and ids is not None, (ids, first))

    with_server(check, "strict tools", tessera, model,
                ["--tool-call-parser", "qwen25", "--constrained-json-disable-any-whitespace"],
                os.path.join(workdir, "strict_tools.log"), lambda server: check_strict_tools(check, server))

    server = Server(tessera, model, ["--reasoning-parser", "qwen3"], os.path.join(workdir, "reasoning.log"))
    try:
        if check("reasoning: server ready", server.ready()):
            status, body = generate(server, {"regex": r"\d{3}", "logit_bias": {str(THINK_END): 100.0}},
                                    require_reasoning=True)
            ids = body.get("output_ids", []) if status == 200 else []
            text = body.get("text", "") if status == 200 else ""
            check("reasoning: the think-end token comes unconstrained, then the pattern",
                  ids[:1] == [THINK_END] and re.fullmatch(r"</think>\d{3}", text) is not None, body)
            status, body = generate(server, {"regex": r"\d{3}", "logit_bias": {str(THINK_END): 100.0}})
            check("reasoning: without require_reasoning the pattern applies from the first token",
                  status == 200 and re.fullmatch(r"\d{3}", body.get("text", "")) is not None, body)
    finally:
        server.close()

    server = Server(tessera, model, ["--reasoning-parser", "qwen3", "--enable-strict-thinking"],
                    os.path.join(workdir, "strict_thinking.log"))
    try:
        if check("strict thinking: server ready", server.ready()):
            ends_turn = {"logit_bias": {str(IM_END): 100.0}, "ignore_eos": False}
            status, body = generate(server, {**ends_turn, "custom_params": {"thinking_budget": 4}}, max_new_tokens=12,
                                    require_reasoning=True)
            ids = body.get("output_ids", []) if status == 200 else []
            check("strict thinking: no end of turn inside the reasoning, the think-end token at the budget, then the "
                  "end of turn", ids[:4] and IM_END not in ids[:4] and ids[4:6] == [THINK_END, IM_END] and
                  finish(body) == "stop" and body["meta_info"].get("reasoning_tokens") == 5, body)
            status, body = generate(server, ends_turn, max_new_tokens=10, require_reasoning=True)
            ids = body.get("output_ids", []) if status == 200 else []
            check("strict thinking: without a budget the reasoning runs to max_new_tokens without an end of turn",
                  len(ids) == 10 and IM_END not in ids and finish(body) == "length", body)
            status, body = generate(server, ends_turn, max_new_tokens=10)
            check("strict thinking: a request without reasoning is not filtered (the end of turn comes first)",
                  status == 200 and finish(body) == "stop" and body["meta_info"]["completion_tokens"] <= 1, body)
    finally:
        server.close()
    refused = subprocess.run([tessera, "serve", "--model-path", model, "--port", "1", "--enable-strict-thinking",
                              "--grammar-backend", "none"], capture_output=True, text=True, timeout=60)
    check("--enable-strict-thinking with --grammar-backend none is refused with SGLang's message",
          refused.returncode != 0 and "requires a grammar backend that supports token filtering" in
          refused.stdout + refused.stderr, refused.stderr[-500:])

    server = Server(tessera, model, ["--grammar-backend", "none"], os.path.join(workdir, "none.log"))
    try:
        if check("--grammar-backend none: server ready", server.ready()):
            status, body = generate(server, {"regex": "a"})
            check("--grammar-backend none refuses constrained requests",
                  status == 400 and "--grammar-backend none" in body.get("error", {}).get("message", ""), body)
            status, body = generate(server, {})
            check("--grammar-backend none still serves the rest", status == 200, body)
    finally:
        server.close()
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
