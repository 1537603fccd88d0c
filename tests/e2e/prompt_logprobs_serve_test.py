#!/usr/bin/env python3
"""Prompt log-probabilities end to end, checked against the independent PyTorch reference.

Tiny f32 models with the real Qwen3 tokenizer are served in several layouts: Qwen3 on one rank with
small prefill chunks, TP 2, PP 2 with small chunks and DP 2; Qwen3-MoE with DP-attention (TP 2,
DP 2, small chunks); DeepSeek-V3 (MLA) with TP 2. SGLang's /generate with
return_logprob and logprob_start_len must answer meta_info.input_token_logprobs: one
[logprob, token_id, text] entry per prompt token from logprob_start_len, the first without a
value, each other the log-softmax of the reference's logits at the position before it; with
top_logprobs_num the best ones of each row, and with token_ids_logprob those tokens' at every
prompt and output row. The same request served again from a warm prefix
cache answers the same; max_new_tokens 0 answers the prompt's log-probabilities and no output;
a logprob_start_len past the prompt is a 400 with SGLang's message. /v1/completions with echo
and logprobs (lm-eval-harness's loglikelihood request) puts the prompt's tokens first. /v1/score
answers each item's label probabilities after query + item (token ids, and text), and with
apply_softmax their softmax over the labels.
Exit 0 when every check passes.
"""

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, make_tiny_model, script_args  # noqa: E402

REFERENCE = os.path.join(HERE, "..", "reference", "torch_reference.py")
TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps on: 1, 2, 3."
PROMPT = []  # TEXT's ids, from `tessera tokenize`
NEW_TOKENS = 3
CHOSEN = [0, 13]  # token_ids_logprob
LAYOUTS = {
    "qwen3": [["--chunked-prefill-size", "8"], ["--tp", "2"], ["--pp-size", "2", "--chunked-prefill-size", "8"],
              ["--dp", "2"]],
    "qwen3-moe": [["--tp", "2", "--dp", "2", "--enable-dp-attention", "--chunked-prefill-size", "8"]],
    "deepseek-v3": [["--tp", "2"]],
}
TOLERANCE = 2e-3  # f32 compute in both; the server's GEMM order differs from PyTorch's


def reference_log_softmax(model, workdir):
    """log-softmax f32 [len(PROMPT) + NEW_TOKENS - 1, vocab] of the reference's logits, and its greedy ids."""
    logits_path = os.path.join(workdir, "reference.npy")
    json_path = os.path.join(workdir, "reference.json")
    subprocess.run(["/usr/bin/python3", REFERENCE, "--model-path", model, "--prompt-ids", ",".join(map(str, PROMPT)),
                    "--max-new-tokens", str(NEW_TOKENS), "--out-logits", logits_path, "--out-json", json_path],
                   check=True, capture_output=True)
    logits = np.load(logits_path).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return log_softmax, json.load(open(json_path))["output_ids"]


def worst_input_error(entries, start, log_softmax):
    """The largest difference from the reference over the entries after the first (inf if malformed)."""
    if len(entries) != len(PROMPT) - start or entries[0][0] is not None:
        return float("inf")
    worst = 0.0
    for i, (value, token, _) in enumerate(entries[1:], start=start + 1):
        if token != PROMPT[i] or value is None:
            return float("inf")
        worst = max(worst, abs(value - log_softmax[i - 1, PROMPT[i]]))
    return worst


def generate(server, start, max_new_tokens=NEW_TOKENS, top=0, **extra):
    body = {"input_ids": PROMPT, "return_logprob": True, "logprob_start_len": start, "top_logprobs_num": top,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}, **extra}
    return server.post("/generate", body)


def chosen_error(rows, first_row, log_softmax):
    """The largest difference of token_ids_logprob entries from the reference, row k at first_row + k."""
    worst = 0.0
    for k, row in enumerate(rows):
        if [entry[1] for entry in row] != CHOSEN:
            return float("inf")
        worst = max([worst] + [abs(v - log_softmax[first_row + k, t]) for v, t, _ in row])
    return worst if rows else float("inf")


def check_layout(check, server, name, log_softmax, greedy):
    status, body = generate(server, 0, top=2, token_ids_logprob=CHOSEN)
    meta = body.get("meta_info", {}) if status == 200 else {}
    entries = meta.get("input_token_logprobs", [])
    error = worst_input_error(entries, 0, log_softmax)
    check(f"{name}: input_token_logprobs from 0 match the reference", error < TOLERANCE, (status, error, body))
    check(f"{name}: the greedy output is the reference's", body.get("output_ids") == greedy, (body, greedy))
    tops = meta.get("input_top_logprobs", [])
    want_tops = [None] + [list(np.argsort(-log_softmax[i])[:2]) for i in range(len(PROMPT) - 1)]
    got_tops = [None if row is None else [t[1] for t in row] for row in tops]
    check(f"{name}: input_top_logprobs are the reference's best two of each row",
          got_tops == [None if w is None else [int(x) for x in w] for w in want_tops], (got_tops, want_tops))
    outputs = meta.get("output_token_logprobs", [])
    output_error = max((abs(v - log_softmax[len(PROMPT) - 1 + i, t]) for i, (v, t, _) in enumerate(outputs)),
                       default=float("inf"))
    check(f"{name}: output_token_logprobs continue the prompt's", output_error < TOLERANCE, (outputs, output_error))
    chosen_in = meta.get("input_token_ids_logprobs", [None])
    chosen_out = meta.get("output_token_ids_logprobs", [])
    check(f"{name}: token_ids_logprob at every prompt and output row match the reference",
          chosen_in[0] is None and len(chosen_in) == len(PROMPT) and len(chosen_out) == NEW_TOKENS and
          chosen_error(chosen_in[1:], 0, log_softmax) < TOLERANCE and
          chosen_error(chosen_out, len(PROMPT) - 1, log_softmax) < TOLERANCE, (chosen_in, chosen_out))

    status, chunks = server.stream("/generate", {"input_ids": PROMPT, "return_logprob": True, "logprob_start_len": 0,
                                                 "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS,
                                                                     "ignore_eos": True}})
    last = chunks[-1].get("meta_info", {}) if status == 200 and chunks else {}
    check(f"{name}: streamed, the last chunk repeats the prompt's and holds every output token's",
          worst_input_error(last.get("input_token_logprobs", []), 0, log_softmax) < TOLERANCE and
          [e[1] for e in last.get("output_token_logprobs", [])] == greedy, (status, chunks[-1:] if chunks else None))

    # Again: the prompt is in the prefix cache now, and positions from 11 on are computed again.
    status, again = generate(server, 11)
    entries = again.get("meta_info", {}).get("input_token_logprobs", []) if status == 200 else []
    check(f"{name}: from 11 with the prompt cached", worst_input_error(entries, 11, log_softmax) < TOLERANCE,
          (status, again))
    check(f"{name}: no top lists without top_logprobs_num", "input_top_logprobs" not in again.get("meta_info", {}),
          again)

    status, scored = generate(server, 0, max_new_tokens=0, top=2, return_text_in_logprobs=True,
                              token_ids_logprob=CHOSEN)
    meta = scored.get("meta_info", {}) if status == 200 else {}
    entries = meta.get("input_token_logprobs", [])
    check(f"{name}: max_new_tokens 0 scores the prompt and generates nothing",
          worst_input_error(entries, 0, log_softmax) < TOLERANCE and scored.get("output_ids") == [] and
          meta.get("completion_tokens") == 0 and meta.get("finish_reason", {}).get("type") == "length" and
          all(isinstance(e[2], str) for e in entries) and meta.get("output_token_logprobs") == [], (status, scored))
    # As SGLang: one row of the best tokens and of token_ids_logprob at the prompt's end.
    last = len(PROMPT) - 1
    tops = meta.get("output_top_logprobs", [])
    check(f"{name}: max_new_tokens 0 answers one row of the best tokens after the prompt",
          len(tops) == 1 and [t[1] for t in tops[0]] == [int(x) for x in np.argsort(-log_softmax[last])[:2]] and
          max(abs(v - log_softmax[last, t]) for v, t, _ in tops[0]) < TOLERANCE, tops)
    check(f"{name}: max_new_tokens 0 answers one row of token_ids_logprob after the prompt",
          chosen_error(meta.get("output_token_ids_logprobs", []), last, log_softmax) < TOLERANCE and
          len(meta.get("output_token_ids_logprobs", [])) == 1, meta.get("output_token_ids_logprobs"))


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    for arch, layouts in LAYOUTS.items():
        model = make_tiny_model(tessera, os.path.join(workdir, arch), arch)
        if not PROMPT:
            tokenized = subprocess.run([tessera, "tokenize", "--model-path", model], input=json.dumps(TEXT) + "\n",
                                       check=True, capture_output=True, text=True)
            PROMPT.extend(json.loads(tokenized.stdout))
        log_softmax, greedy = reference_log_softmax(model, os.path.join(workdir, arch))
        for index, flags in enumerate(layouts):
            check_server(check, tessera, model, arch, flags, os.path.join(workdir, arch, f"layout{index}.log"),
                         log_softmax, greedy, first=arch == "qwen3" and index == 0)
    return check.report()


def check_server(check, tessera, model, arch, flags, log_path, log_softmax, greedy, first):
    """One layout's checks; the first server also checks refusals and /v1/completions."""
    name = arch + " " + " ".join(flags)
    server = Server(tessera, model, flags, log_path)
    try:
        if not check(f"{name}: server ready", server.ready()):
            return
        check_layout(check, server, name, log_softmax, greedy)
        if first:
            check_first_server(check, server, log_softmax)
    finally:
        server.close()


def check_first_server(check, server, log_softmax):
    """Refusals and defaults of logprob_start_len, and /v1/completions with echo."""
    status, body = generate(server, len(PROMPT) + 1)
    check("a logprob_start_len past the prompt is a 400 with SGLang's message",
          status == 400 and "is higher than the number of input tokens" in json.dumps(body), (status, body))
    status, body = generate(server, len(PROMPT))
    check("logprob_start_len at the prompt's end answers no prompt entries",
          status == 200 and body["meta_info"]["input_token_logprobs"] == [], (status, body))
    status, body = generate(server, -1)
    check("the default (-1) answers no prompt entries",
          status == 200 and body["meta_info"]["input_token_logprobs"] == [], (status, body))

    request = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 1,
               "echo": True}
    status, body = server.post("/v1/completions", request)
    choice = body["choices"][0] if status == 200 else {}
    lps = choice.get("logprobs") or {}
    values = lps.get("token_logprobs", [])
    prompt_error = max((abs(values[i] - log_softmax[i - 1, PROMPT[i]]) for i in range(1, len(PROMPT))),
                       default=float("inf")) if len(values) == len(PROMPT) + 1 else float("inf")
    check("/v1/completions echo + logprobs: the prompt's tokens first, the first null, as the reference",
          values[:1] == [None] and prompt_error < TOLERANCE and len(lps.get("tokens", [])) == len(values) and
          lps.get("top_logprobs", [0])[0] is None, (status, body))
    status, batch = server.post("/generate", {"input_ids": [PROMPT, PROMPT[:10]], "return_logprob": [True, False],
                                              "logprob_start_len": [0, -1],
                                              "sampling_params": {"temperature": 0, "max_new_tokens": 1}})
    first = batch[0]["meta_info"] if status == 200 and isinstance(batch, list) else {}
    check("a batch with return_logprob and logprob_start_len per input",
          worst_input_error(first.get("input_token_logprobs", []), 0, log_softmax) < TOLERANCE and
          "input_token_logprobs" not in batch[1]["meta_info"], (status, batch))
    # /v1/score: the labels' probabilities after query + item, one prefill per item.
    query, items = PROMPT[:-3], [PROMPT[-3:], PROMPT[-3:-1]]
    rows = [len(PROMPT) - 1, len(PROMPT) - 2]
    for softmax in (False, True):
        status, body = server.post("/v1/score", {"query": query, "items": items, "label_token_ids": CHOSEN,
                                                 "apply_softmax": softmax})
        want = [np.exp(log_softmax[row, CHOSEN]) for row in rows]
        want = [w / w.sum() for w in want] if softmax else want
        got = body.get("scores", []) if status == 200 else []
        error = max((abs(np.log(g) - np.log(w)).max() for g, w in zip(np.array(got), want)), default=float("inf")) \
            if len(got) == 2 else float("inf")
        check(f"/v1/score (apply_softmax {softmax}): each item's label probabilities as the reference",
              error < TOLERANCE and body.get("object") == "scoring" and
              body.get("usage", {}).get("prompt_tokens") == 2 * len(PROMPT) - 1, (status, body, error))
    status, body = server.post("/v1/score", {"query": TEXT[:20], "items": [TEXT[20:]], "label_token_ids": CHOSEN})
    status2, same = generate(server, -1, max_new_tokens=0, token_ids_logprob=CHOSEN)
    chosen = same.get("meta_info", {}).get("output_token_ids_logprobs", [[]])[0] if status2 == 200 else []
    check("/v1/score with text: the joined text's distribution, as /generate answers it",
          status == 200 and len(chosen) == 2 and
          max(abs(np.log(s) - c[0]) for s, c in zip(body["scores"][0], chosen)) < TOLERANCE, (status, body, chosen))
    status, plain = server.post("/v1/completions", {**request, "logprobs": None})
    check("/v1/completions echo: the text starts with the prompt's text",
          status == 200 and plain["choices"][0]["text"].startswith("".join(lps.get("tokens", [])[:-1])) and
          plain["choices"][0]["logprobs"] is None, (status, plain, lps))


if __name__ == "__main__":
    sys.exit(main())
