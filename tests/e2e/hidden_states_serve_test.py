#!/usr/bin/env python3
"""`return_hidden_states` end to end, as a user runs it.

Tiny f32 models (Qwen3 dense, Qwen3-MoE under DP-attention, DeepSeek-V3's MLA) are served with
`--enable-return-hidden-states` in several layouts. A greedy /generate with
`"return_hidden_states": true` must answer, in `meta_info.hidden_states`, the rows of the
prompt's last prefill pass and then one row per output token but the last, each equal to the
PyTorch reference's hidden state after the final norm at that position. The script also checks
"last", the OpenAI routes (whole and streamed), and the refusals of servers launched without the
flag or with `--return-hidden-states-mode last`. Exit 0 when every check passes.
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from e2e_support import Checks, Server, call, make_tiny_model, script_args  # noqa: E402
from torch_reference import DecoderModel  # noqa: E402

TOLERANCE = 2e-4  # f32 on both sides: summation order only
CHUNK = 16  # --chunked-prefill-size: the 40-token prompt's last pass holds its last 8 tokens
NEW_TOKENS = 4
LAYOUTS = {
    "qwen3": [["--tp", "1"], ["--tp", "2"], ["--pp-size", "2"], ["--dp", "2"]],
    "qwen3-moe": [["--tp", "2", "--dp", "2", "--enable-dp-attention"]],
    "deepseek-v3": [["--tp", "2"]],
}
NOT_CONFIGURED = ("The server is not configured to return hidden states. Please set `--return-hidden-states-mode "
                  "last`, `--return-hidden-states-mode full`, or the legacy `--enable-return-hidden-states` flag.")
OVER_LAST = ("The requested return_hidden_states mode exceeds the server maximum `last`. Please launch with "
             "`--return-hidden-states-mode full` to allow return_hidden_states=True.")


def prompt_for(layout_index):
    """A prompt of its own per layout, so that no layout is served from another's cache."""
    return [(7 * i + 3 + 11 * layout_index) % 1000 for i in range(40)]


def max_diff(got, want):
    got = np.asarray(got, dtype=np.float64)
    return float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")


def serve(tessera, model, flags, workdir, name):
    return Server(tessera, model, ["--chunked-prefill-size", str(CHUNK), "--max-total-tokens", "4096", *flags],
                  os.path.join(workdir, name + ".log"))


def generate(server, ids, mode):
    return server.post("/generate", {"input_ids": ids, "return_hidden_states": mode,
                                     "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS,
                                                         "ignore_eos": True}})


def check_layout(check, tessera, model, ref, arch, flags, index, workdir):
    name = f"{arch} {' '.join(flags)}"
    server = serve(tessera, model, ["--enable-return-hidden-states", *flags], workdir,
                   "_".join([arch] + [f.strip("-") for f in flags]))
    try:
        if not check(f"{name}: server ready", server.ready()):
            return
        prompt = prompt_for(index)
        status, body = generate(server, prompt, True)
        if not check(f"{name}: /generate answers", status == 200, body):
            return
        out = body["output_ids"]
        states = body["meta_info"].get("hidden_states")
        want = ref.final_hidden(prompt + out[:-1]).numpy().astype(np.float64)
        n = len(prompt)
        tail = n - (n - 1) // CHUNK * CHUNK  # the last prefill pass's tokens
        check(f"{name}: one entry per output token", isinstance(states, list) and len(states) == len(out),
              f"{len(states) if isinstance(states, list) else states} entries for {len(out)} tokens")
        if not isinstance(states, list) or len(states) != len(out):
            return
        check(f"{name}: the first entry is the last prefill pass's {tail} rows",
              max_diff(states[0], want[n - tail:n]) < TOLERANCE, f"max |diff| {max_diff(states[0], want[n - tail:n])}")
        for k in range(1, len(out)):
            d = max_diff(states[k], want[n + k - 1])
            check(f"{name}: output token {k + 1}'s state matches the reference", d < TOLERANCE, f"max |diff| {d}")
        status, last = generate(server, prompt_for(index + 100), "last")
        if check(f"{name}: \"last\" answers", status == 200, last):
            want = ref.final_hidden(prompt_for(index + 100) + last["output_ids"][:-1]).numpy().astype(np.float64)
            got = last["meta_info"].get("hidden_states")
            check(f"{name}: \"last\" is the state that predicted the last token",
                  isinstance(got, list) and len(got) == 1 and max_diff(got[0], want[-1]) < TOLERANCE, got)
        if flags == ["--tp", "1"]:
            check_openai_routes(check, server, ref)
    finally:
        server.close()


def check_openai_routes(check, server, ref):
    prompt = prompt_for(200)
    request = {"model": "tiny", "prompt": prompt, "max_tokens": 3, "temperature": 0, "return_hidden_states": True}
    status, body = server.post("/v1/completions", request)
    if not check("completions: answers", status == 200, body):
        return
    choice = body["choices"][0]
    status, native = generate(server, prompt, True)
    tokens = native["output_ids"][:3] if status == 200 else []
    want = ref.final_hidden(prompt + tokens[:2]).numpy().astype(np.float64)[-1] if tokens else np.zeros(1)
    check("completions: choices[0].hidden_states is the last output token's state",
          max_diff(choice.get("hidden_states"), want) < TOLERANCE, choice.get("hidden_states"))
    status, text = call(server.port, "POST", "/v1/completions", {**request, "stream": True})
    chunks = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]
    tail = chunks[-1]["choices"][0] if chunks else {}
    check("completions stream: a last chunk carries the hidden states after the finishing one",
          status == 200 and len(chunks) >= 2 and chunks[-2]["choices"][0]["finish_reason"] == "length" and
          max_diff(tail.get("hidden_states"), want) < TOLERANCE, tail)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "return_hidden_states": "last", "stream": True}
    status, text = call(server.port, "POST", "/v1/chat/completions", chat)
    chunks = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]
    delta = chunks[-1]["choices"][0]["delta"] if chunks else {}
    check("chat stream with \"last\": the last chunk's delta.hidden_states holds one vector",
          status == 200 and isinstance(delta.get("hidden_states"), list) and len(delta["hidden_states"]) == 1 and
          len(delta["hidden_states"][0]) == ref.config.hidden_size, delta)
    status, bad = server.post("/generate", {"text": "hi", "return_hidden_states": "all"})
    check("a value other than a boolean or \"last\" is refused",
          status == 400 and "must be a boolean or the string literal 'last'" in json.dumps(bad), bad)


def check_refusals(check, tessera, model, workdir):
    server = serve(tessera, model, [], workdir, "no_flag")
    try:
        if check("without the flag: server ready", server.ready()):
            status, body = generate(server, [1, 2, 3], True)
            check("without the flag: refused with SGLang's message", status == 400 and NOT_CONFIGURED in json.dumps(
                body), body)
            status, body = server.post("/v1/chat/completions", {"model": "tiny", "return_hidden_states": "last",
                                                                "messages": [{"role": "user", "content": "hi"}]})
            check("without the flag: chat refused too", status == 400 and NOT_CONFIGURED in json.dumps(body), body)
    finally:
        server.close()
    server = serve(tessera, model, ["--return-hidden-states-mode", "last"], workdir, "mode_last")
    try:
        if check("--return-hidden-states-mode last: server ready", server.ready()):
            status, body = generate(server, [1, 2, 3], True)
            check("mode last: true refused", status == 400 and OVER_LAST in json.dumps(body), body)
            status, body = generate(server, [1, 2, 3], "last")
            check("mode last: \"last\" served", status == 200 and len(body["meta_info"]["hidden_states"]) == 1, body)
    finally:
        server.close()


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    index = 0
    for arch, layouts in LAYOUTS.items():
        model = make_tiny_model(tessera, os.path.join(workdir, arch), arch)
        ref = DecoderModel(model)
        if arch == "qwen3":
            check_refusals(check, tessera, model, workdir)
        for flags in layouts:
            check_layout(check, tessera, model, ref, arch, flags, index, workdir)
            index += 1
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
