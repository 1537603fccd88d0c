#!/usr/bin/env python3
"""`return_routed_experts` end to end, as a user runs it.

Tiny f32 MoE models (Qwen3-MoE; DeepSeek-V3 with its dense first layer and biased, grouped
routing) are served with `--enable-return-routed-experts` in several layouts. A greedy /generate
with `"return_routed_experts": true` must answer, in `meta_info.routed_experts`, base64 of int32
[prompt + output - 1, num_hidden_layers, top_k]: the logical experts the PyTorch reference's
router picks for every position (0 in dense layers), also for a prompt served from the prefix
cache. The script also checks `routed_experts_start_len`, the OpenAI routes, and that a dense
model's launch stops. Exit 0 when every check passes.
"""

import base64
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from e2e_support import Checks, Server, call, make_tiny_model, script_args  # noqa: E402
from torch_reference import DecoderModel  # noqa: E402

CHUNK = 16
NEW_TOKENS = 4
LAYOUTS = {
    "qwen3-moe": [["--tp", "1"], ["--tp", "2", "--ep", "2"], ["--tp", "2", "--ep", "2", "--moe-a2a-backend",
                                                                  "all_to_all"],
                  ["--tp", "2", "--dp", "2", "--enable-dp-attention"], ["--dp", "2"], ["--pp-size", "2"],
                  ["--pp-size", "2", "--tp", "2", "--dp", "2", "--enable-dp-attention"]],
    "deepseek-v3": [["--tp", "2"], ["--tp", "2", "--dp", "2", "--enable-dp-attention", "--moe-a2a-backend",
                                    "all_to_all"], ["--pp-size", "3"]],
}


def reference_routing(ref, ids):
    """int32 [len(ids), layers, top_k]: the reference router's choices, 0 in dense layers."""
    ref.routing = {}
    ref.final_hidden(ids)
    c = ref.config
    out = np.zeros((len(ids), c.num_layers, c.top_k), dtype=np.int32)
    for layer, experts in ref.routing.items():
        out[:, layer, :] = experts.numpy()
    return out


def decode(b64, ref):
    c = ref.config
    return np.frombuffer(base64.b64decode(b64), dtype="<i4").reshape(-1, c.num_layers, c.top_k)


def same_choices(got, want):
    """Equal per token and layer as sets of experts (an order between equal scores is not defined)."""
    return got.shape == want.shape and np.array_equal(np.sort(got, axis=-1), np.sort(want, axis=-1))


def serve(tessera, model, flags, workdir, name):
    return Server(tessera, model, ["--enable-return-routed-experts", "--chunked-prefill-size", str(CHUNK),
                                   "--max-total-tokens", "4096", *flags], os.path.join(workdir, name + ".log"))


def generate(server, ids, **extra):
    return server.post("/generate", {"input_ids": ids, "return_routed_experts": True, **extra,
                                    "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS,
                                                        "ignore_eos": True}})


def check_layout(check, tessera, model, ref, arch, flags, index, workdir):
    name = f"{arch} {' '.join(flags)}"
    server = serve(tessera, model, flags, workdir, "_".join([arch] + [f.strip("-") for f in flags]))
    try:
        if not check(f"{name}: server ready", server.ready()):
            return
        prompt = [(5 * i + 7 + 13 * index) % 1000 for i in range(40)]
        status, body = generate(server, prompt)
        if not check(f"{name}: /generate answers", status == 200 and "routed_experts" in body.get("meta_info", {}),
                     body):
            return
        ids = prompt + body["output_ids"][:-1]
        got = decode(body["meta_info"]["routed_experts"], ref)
        want = reference_routing(ref, ids)
        check(f"{name}: every position's experts equal the reference's", same_choices(got, want),
              f"shape {got.shape} vs {want.shape}; first difference at "
              f"{np.argwhere(np.sort(got, -1) != np.sort(want, -1))[:1].tolist() if got.shape == want.shape else '-'}")
        # The same first 32 tokens again: served from the cache, their rows from the slots. Sent
        # twice, so that one of two DP replicas or groups (round robin) has the prompt cached.
        again = prompt[:32] + [(3 * i + 1) % 1000 for i in range(6)]
        for _ in range(2):
            status, body = generate(server, again)
            if status != 200 or body["meta_info"]["cached_tokens"] > 0:
                break
        if check(f"{name}: a cached prompt answers", status == 200 and body["meta_info"]["cached_tokens"] > 0,
                 body.get("meta_info")):
            want = reference_routing(ref, again + body["output_ids"][:-1])
            check(f"{name}: ... with the cached positions' experts too",
                  same_choices(decode(body["meta_info"]["routed_experts"], ref), want))
        if index > 0:
            return
        status, body = generate(server, prompt, routed_experts_start_len=10)
        got = decode(body["meta_info"]["routed_experts"], ref) if status == 200 else np.zeros(0)
        want = reference_routing(ref, prompt + body["output_ids"][:-1])[10:] if status == 200 else None
        check("routed_experts_start_len 10: the positions from 10 on", status == 200 and same_choices(got, want))
        status, body = generate(server, [1, 2, 3], routed_experts_start_len=4)
        check("routed_experts_start_len past the prompt: refused",
              status == 400 and "routed_experts_start_len (4) must be in [0, 3]" in json.dumps(body), body)
        status, body = server.post("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}})
        check("a request that does not ask gets no routed_experts",
              status == 200 and "routed_experts" not in body["meta_info"], body.get("meta_info"))
        request = {"model": "tiny", "prompt": prompt, "max_tokens": 3, "temperature": 0, "return_routed_experts": True}
        status, body = server.post("/v1/completions", request)
        ok = status == 200 and "sglext" in body
        check("completions: sglext.routed_experts covers prompt + output - 1 positions",
              ok and decode(body["sglext"]["routed_experts"], ref).shape[0] == len(prompt) + 2, body)
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                "return_routed_experts": True, "stream": True}
        status, text = call(server.port, "POST", "/v1/chat/completions", chat)
        chunks = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]
        last = chunks[-1] if chunks else {}
        check("chat stream: a last chunk with no choices carries sglext.routed_experts",
              status == 200 and last.get("choices") == [] and "routed_experts" in last.get("sglext", {}), last)
    finally:
        server.close()


def check_refused_launch(check, tessera, model, flags, message, workdir, name):
    server = serve(tessera, model, flags, workdir, name)
    try:
        server.proc.wait(timeout=120)
        text = open(server.log_path).read()
        check(f"{name}: the launch stops, saying why", server.proc.returncode != 0 and message in text, text[-1500:])
    except subprocess.TimeoutExpired:
        check(f"{name}: the launch stops", False, "still running after 120 s")
    finally:
        server.close()


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    index = 0
    for arch, layouts in LAYOUTS.items():
        model = make_tiny_model(tessera, os.path.join(workdir, arch), arch)
        ref = DecoderModel(model)
        for flags in layouts:
            check_layout(check, tessera, model, ref, arch, flags, index, workdir)
            index += 1
    check_refused_launch(check, tessera, make_tiny_model(tessera, os.path.join(workdir, "qwen3"), "qwen3"), [],
                         "--enable-return-routed-experts needs a MoE model; Qwen3ForCausalLM has no routed experts",
                         workdir, "dense")
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
