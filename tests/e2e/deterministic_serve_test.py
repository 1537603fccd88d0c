#!/usr/bin/env python3
"""Deterministic inference (--enable-deterministic-inference) end to end, as SGLang's
test_deterministic.py checks it.

Tiny bf16 models with the real Qwen3 tokenizer are served with the flag in several layouts:
Qwen3 on one rank (overlap scheduling, 16-token prefill chunks), TP 2, PP 2, with mixed chunks,
and with FP8 weights and KV cache on two threads; Qwen3-MoE with EP 2 and with DP-attention;
DeepSeek-V3 (MLA) on one rank. In each, a
request's output ids and log-probabilities must be the same bits however it was served:
- single: the same prompt alone and as every item of batches of 3 and 6;
- mixed: beside other requests of other lengths (a long prompt prefilling, others decoding);
- prefix: prefixes of one long prompt, first from an empty cache, then again in another order
  with the cache holding the others;
- radix_cache: served from an empty cache, then again from the cache;
- p_vs_d: the log-probabilities of the decoded tokens equal those of the same tokens scored as a
  prompt (max_new_tokens 0, logprob_start_len);
- sampling: with temperature 1 and no sampling_seed (42 by default), the same text alone and in
  a batch; an explicit sampling_seed gives the same text twice.
The launch rewrites and refusals of SGLang's _handle_deterministic_inference are checked too.
Exit 0 when every check passes.
"""

import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, script_args  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog, and then"
OTHERS = ["Hello " * 3 + "world", "Numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13",
          "A much longer prompt that keeps the prefill busy: " + "tiles, stones and glass; " * 12]
LONG = "Deterministic inference means the same answer every time: " + "one two three four five six " * 8
PREFIX_WORDS = [3, 11, 25, 40]
NEW_TOKENS = 12
LAYOUTS = {
    "qwen3": [["--chunked-prefill-size", "16"], ["--tp", "2"], ["--pp-size", "2"],
              ["--chunked-prefill-size", "16", "--enable-mixed-chunk"],
              ["--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3", "--chunked-prefill-size", "8", "--threads", "2"]],
    "qwen3-moe": [["--tp", "2", "--ep-size", "2"], ["--tp", "2", "--dp", "2", "--enable-dp-attention"]],
    "deepseek-v3": [[]],
}


def make_model(tessera, workdir, arch):
    model = os.path.join(workdir, arch, "model")
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--tokenizer", "qwen3",
                    "--dtype", "bf16", "--seed", "5", "--out", model], check=True, capture_output=True)
    return model


def request(text, temperature=0.0, **extra):
    return {"text": text, "return_logprob": True,
            "sampling_params": {"temperature": temperature, "max_new_tokens": NEW_TOKENS, "ignore_eos": True,
                                **extra}}


def outcome(body):
    """What must not change: the output ids and every output log-probability (exact floats)."""
    if not isinstance(body, dict) or "output_ids" not in body:
        return ("error", json.dumps(body)[:300])
    return (tuple(body["output_ids"]), tuple(e[0] for e in body["meta_info"]["output_token_logprobs"]))


def generate(server, body):
    status, answer = server.post("/generate", body)
    if status != 200:
        return [("error", status, json.dumps(answer)[:300])] if isinstance(body["text"], list) else ("error", status)
    return [outcome(a) for a in answer] if isinstance(answer, list) else outcome(answer)


def concurrently(server, bodies):
    """Posts every body at once, each from its own thread; their outcomes in order."""
    results = [None] * len(bodies)

    def post(i):
        results[i] = generate(server, bodies[i])

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def flush(server):
    status, _ = server.post("/flush_cache", {})
    return status == 200


def check_layout(check, server, name):
    flush(server)
    alone = generate(server, request(PROMPT))
    check(f"{name}: the prompt is served", alone[0] != "error", alone)

    for n in (3, 6):
        batch = generate(server, {**request(PROMPT), "text": [PROMPT] * n})
        check(f"single: {name}: a batch of {n} copies, each as alone", batch == [alone] * n, (batch, alone))

    bodies = [request(PROMPT)] + [request(t) for t in OTHERS] + [request(OTHERS[2], max_new_tokens=2)]
    for trial in range(2):
        mixed = concurrently(server, bodies)
        check(f"mixed: {name}: beside other prompts and decodes (trial {trial})", mixed[0] == alone,
              (mixed[0], alone))

    words = LONG.split(" ")
    prefixes = [" ".join(words[:n]) for n in PREFIX_WORDS]
    flush(server)
    first = [generate(server, request(p)) for p in prefixes]
    again = concurrently(server, [request(p) for p in reversed(prefixes)])[::-1]
    check(f"prefix: {name}: each prefix of a long prompt the same from an empty and a warm cache",
          first == again and all(f[0] != "error" for f in first), (first, again))

    flush(server)
    cold = generate(server, request(LONG))
    warm = generate(server, request(LONG))
    check(f"radix_cache: {name}: the same from an empty cache and from the cache", cold == warm, (cold, warm))

    check_prefill_vs_decode(check, server, name, alone)

    seeded = generate(server, request(PROMPT, temperature=1.0))
    batch = generate(server, {**request(PROMPT, temperature=1.0), "text": [PROMPT, OTHERS[0], PROMPT]})
    check(f"sampling: {name}: temperature 1 without sampling_seed (42), alone and in a batch",
          isinstance(batch, list) and batch[0] == seeded and batch[2] == seeded, (seeded, batch))
    chosen = [generate(server, request(PROMPT, temperature=1.0, sampling_seed=7)) for _ in range(2)]
    check(f"sampling: {name}: sampling_seed 7 twice", chosen[0] == chosen[1] and chosen[0][0] != "error", chosen)


def check_prefill_vs_decode(check, server, name, alone):
    """p_vs_d: the decoded tokens scored again as a prompt give the decode's log-probabilities."""
    status, tokenized = server.post("/generate", {"text": PROMPT, "return_logprob": True, "logprob_start_len": 0,
                                                  "sampling_params": {"max_new_tokens": 0}})
    prompt = [e[1] for e in tokenized["meta_info"]["input_token_logprobs"]] if status == 200 else []
    n_prompt = len(prompt)
    output_ids, output_logprobs = alone if alone[0] != "error" else ((), ())
    scored_ids = prompt + list(output_ids[:-1])
    status, scored = server.post("/generate", {"input_ids": scored_ids, "return_logprob": True,
                                               "logprob_start_len": n_prompt - 1,
                                               "sampling_params": {"max_new_tokens": 0}})
    entries = scored.get("meta_info", {}).get("input_token_logprobs", []) if status == 200 else []
    rescored = tuple(e[0] for e in entries[1:])
    check(f"p_vs_d: {name}: decoded tokens scored as a prompt give the same log-probabilities",
          len(prompt) == n_prompt > 0 and len(output_ids) == NEW_TOKENS and
          rescored == tuple(output_logprobs[:-1]) and [e[1] for e in entries[1:]] == list(output_ids[:-1]),
          (n_prompt, rescored, output_logprobs))


def check_launch_rules(check, tessera, model, workdir):
    """SGLang's rewrites and refusals for the flag's attention backend."""
    def launch(flags):
        return subprocess.run([tessera, "serve", "--model-path", model, "--port", "1",
                               "--enable-deterministic-inference", "--attention-backend", *flags],
                              capture_output=True, text=True, timeout=60)

    refused = launch(["torch_native"])
    check("--attention-backend torch_native is refused with SGLang's message",
          refused.returncode != 0 and "Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', 'triton'] "
          "attention backends are supported for deterministic inference, but you explicitly specified "
          "'torch_native'." in refused.stderr + refused.stdout, refused.stderr[-2000:])
    server = Server(tessera, model, ["--enable-deterministic-inference", "--attention-backend", "flashinfer"],
                    os.path.join(workdir, "flashinfer.log"))
    try:
        ready = server.ready()
        log = open(server.log_path).read()
        check("--attention-backend flashinfer turns the radix cache off, with SGLang's warning",
              ready and "Currently radix cache is not compatible with flashinfer attention backend for deterministic "
              "inference" in log and "Sampling backend is set to pytorch for deterministic inference." in log and
              "batch-invariant" in log, log[-2000:])
    finally:
        server.close()


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    for arch, layouts in LAYOUTS.items():
        model = make_model(tessera, workdir, arch)
        for index, flags in enumerate(layouts):
            name = arch + " " + " ".join(flags)
            server = Server(tessera, model, ["--enable-deterministic-inference", *flags],
                            os.path.join(workdir, arch, f"layout{index}.log"))
            try:
                if check(f"{name}: server ready", server.ready()):
                    check_layout(check, server, name)
            finally:
                server.close()
        if arch == "qwen3":
            check_launch_rules(check, tessera, model, workdir)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
