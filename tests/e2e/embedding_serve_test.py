#!/usr/bin/env python3
"""`tessera serve --is-embedding` end to end, as a user runs it.

A tiny f32 model (Qwen3 dense, and Qwen3-MoE for DP-attention) is served as an embedding model
in several layouts. Each layout's embeddings of token-id inputs must equal the PyTorch
reference's last hidden state after the final norm, scaled to unit length (SGLang's Pooler with
LAST pooling), for a prompt longer than the prefill chunk too. The script also checks what the
routes promise: text and token inputs, /encode, a cached prompt, Matryoshka `dimensions`,
base64, and the generation routes refused. Exit 0 when every check passes.
"""

import base64
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from e2e_support import Checks, call, free_port, make_tiny_model, script_args, stop_server, wait_ready  # noqa: E402
from torch_reference import DecoderModel  # noqa: E402

TOLERANCE = 2e-4  # f32 on both sides: summation order only (observed ~1e-6)
PROMPTS = [[11, 12, 13, 14, 15], [(7 * i + 3) % 1000 for i in range(40)], [42]]
LAYOUTS = {
    "qwen3": [["--tp", "1"], ["--tp", "2"], ["--pp-size", "2"], ["--dp", "2"]],
    "qwen3-moe": [["--tp", "2", "--dp", "2", "--enable-dp-attention"]],
}


def make_model(tessera, arch, workdir):
    """The tiny f32 model with Qwen3's tokenizer, declared Matryoshka (any size)."""
    out = make_tiny_model(tessera, os.path.join(workdir, arch), arch)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["is_matryoshka"] = True
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return out


def reference_embeddings(model):
    ref = DecoderModel(model)
    rows = []
    for ids in PROMPTS:
        last = ref.final_hidden(ids)[-1].numpy().astype(np.float64)
        rows.append(last / max(np.linalg.norm(last), 1e-12))
    return rows


def embed(port, inputs, **extra):
    status, body = call(port, "POST", "/v1/embeddings", {"model": "tiny", "input": inputs, **extra})
    return status, json.loads(body)


def check_layout(check, tessera, model, arch, flags, expected, workdir):
    name = f"{arch} {' '.join(flags)}"
    port = free_port()
    log_path = os.path.join(workdir, "_".join([arch] + [f.strip("-") for f in flags]) + ".log")
    log = open(log_path, "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny", "--is-embedding",
                               "--port", str(port), "--threads", "1", "--chunked-prefill-size", "16",
                               "--max-total-tokens", "4096", *flags], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(port, server):
            print(open(log_path).read()[-3000:])
            return check(f"{name}: server ready", False)
        status, body = embed(port, PROMPTS)
        if not check(f"{name}: /v1/embeddings answers", status == 200, body):
            return False
        got = [np.array(item["embedding"], dtype=np.float64) for item in body["data"]]
        check(f"{name}: one vector per input, in order", [item["index"] for item in body["data"]] == [0, 1, 2])
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = float(np.max(np.abs(g - e))) if g.shape == e.shape else float("inf")
            check(f"{name}: prompt {i} ({len(PROMPTS[i])} tokens) matches the reference", diff < TOLERANCE,
                  f"max |diff| {diff}")
        check(f"{name}: usage counts the prompts",
              body["usage"]["prompt_tokens"] == sum(map(len, PROMPTS)) == body["usage"]["total_tokens"], body["usage"])
        if flags != ["--tp", "1"]:
            return True

        # The routes, on one layout.
        status, again = embed(port, PROMPTS[1])
        check("a cached prompt gives the same vector",
              status == 200 and np.max(np.abs(np.array(again["data"][0]["embedding"]) - got[1])) < 1e-6)
        status, text = embed(port, "hello world")
        status2, enc = call(port, "POST", "/encode", {"text": "hello world"})
        enc = json.loads(enc)
        check("text input: /v1/embeddings and /encode agree",
              status == 200 and status2 == 200 and
              np.max(np.abs(np.array(text["data"][0]["embedding"]) - np.array(enc["embedding"]))) < 1e-6, enc)
        check("/encode: meta_info", enc.get("meta_info", {}).get("finish_reason") == {"type": "length", "length": 0}
              and enc["meta_info"]["prompt_tokens"] == text["usage"]["prompt_tokens"] > 0, enc.get("meta_info"))
        status, cached = call(port, "POST", "/encode", {"input_ids": [PROMPTS[1]]})
        cached = json.loads(cached)
        check("/encode of a list answers a list, from the cache", status == 200 and isinstance(cached, list) and
              cached[0]["meta_info"]["cached_tokens"] > 0, cached)
        status, short = embed(port, [PROMPTS[1]], dimensions=8)
        vec = np.array(short["data"][0]["embedding"]) if status == 200 else np.zeros(1)
        want = expected[1][:8] / np.linalg.norm(expected[1][:8])
        check("dimensions: the first entries at unit length",
              vec.shape == (8,) and np.max(np.abs(vec - want)) < TOLERANCE, short)
        status, packed = embed(port, [PROMPTS[0]], encoding_format="base64")
        raw = base64.b64decode(packed["data"][0]["embedding"]) if status == 200 else b""
        floats = np.array(struct.unpack(f"<{len(raw) // 4}f", raw))
        _, plain = embed(port, [PROMPTS[0]])  # the same batch shape: the same arithmetic
        plain = np.array(plain["data"][0]["embedding"])
        check("base64: the f32 bytes of the vector", floats.shape == plain.shape and np.array_equal(floats, plain),
              f"max |diff| {np.max(np.abs(floats - plain)) if floats.shape == plain.shape else 'shape'}")
        status, refused = call(port, "POST", "/v1/chat/completions",
                               {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        check("chat is refused on an embedding server", status == 400 and "--is-embedding" in refused, refused)
        status, empty = embed(port, "")
        check("an empty input is refused",
              status == 400 and empty["error"]["message"] == "Input cannot be empty", empty)
        status, info = call(port, "GET", "/model_info")
        check("/model_info: is_generation false", status == 200 and json.loads(info)["is_generation"] is False, info)
        return True
    finally:
        stop_server(server)
        log.close()


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    for arch, layouts in LAYOUTS.items():
        model = make_model(tessera, arch, workdir)
        expected = reference_embeddings(model)
        for flags in layouts:
            check_layout(check, tessera, model, arch, flags, expected, workdir)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
