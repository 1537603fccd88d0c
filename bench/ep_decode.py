#!/usr/bin/python3
"""Decode speed of expert parallelism on one host, as `tessera generate` runs it: EP2 (two rank
processes x 1 thread, --tp 2, each rank holding half of the experts) against EP1 (one process
x 2 threads), with each dispatcher (--moe-a2a-backend none and all_to_all), run alternately.
Also the bytes each dispatcher sent per token and MoE layer (rank 0's counters over the 16
prompt tokens and the decode steps) next to the formula for uniform routing, for a step of n
tokens of which rank r owns o_r = its share of ceil(n/p) rows (a decode step of one sequence:
rank 0 owns the token), with q = 1 - C(E - E/p, k) / C(E, k) the chance that a given other EP
rank holds one of a token's k experts:
  none:        all-reduce of the MoE output, payload 4H per token (a ring sends 2(p-1)/p of it)
  all_to_all:  dispatch (4H + 8k) o_0 (p-1) q, combine 4H q sum_{r>0} o_r (result rows for what
               the others sent), all-gather 4H ceil(n/p) (p-1) (owned rows, padded).
Prints one JSON line per run and a summary with the median ratios.

Usage: bench/ep_decode.py --tessera build/tessera --model-path DIR [--repeats 3] [--new-tokens 64]
"""

import argparse
import json
import math
import statistics
import subprocess
import sys


def run(tessera, model, extra, threads, new_tokens):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", ",".join(str(i) for i in range(1, 17)),
           "--max-new-tokens", str(new_tokens), "--ignore-eos", "--json", "--threads", str(threads)] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def formula(config, p, prompt_tokens, new_tokens):
    """Rank 0's bytes per token and MoE layer over a prefill and new_tokens - 1 decode steps."""
    H, E, k = config["hidden_size"], config["num_experts"], config["num_experts_per_tok"]
    q = 1 - math.comb(E - E // p, k) / math.comb(E, k)
    steps = [prompt_tokens] + [1] * (new_tokens - 1)
    dispatch = combine = gather = 0.0
    for n in steps:
        per = -(-n // p)
        owned = [max(0, min(n, (r + 1) * per) - min(n, r * per)) for r in range(p)]
        dispatch += (4 * H + 8 * k) * owned[0] * (p - 1) * q
        combine += 4 * H * q * sum(owned[1:])
        gather += 4 * H * per * (p - 1)
    tokens = sum(steps)
    return {"none_all_reduce_payload": 4 * H, "a2a_dispatch": dispatch / tokens, "a2a_combine": combine / tokens,
            "a2a_all_gather": gather / tokens}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    with open(f"{a.model_path}/config.json") as f:
        config = json.load(f)
    layouts = {"none": ["--tp", "2", "--ep", "2"], "all_to_all": ["--tp", "2", "--moe-a2a-backend", "all_to_all"]}
    ratios = {name: [] for name in layouts}
    for i in range(a.repeats):
        ep1 = run(a.tessera, a.model_path, [], 2, a.new_tokens)
        for name, extra in layouts.items():
            ep2 = run(a.tessera, a.model_path, extra, 1, a.new_tokens)
            ratio = ep2["decode_tokens_per_s"] / ep1["decode_tokens_per_s"]
            ratios[name].append(ratio)
            print(json.dumps({"bench": "ep_decode", "repeat": i, "dispatcher": name,
                              "ep1_2threads_decode_tok_s": ep1["decode_tokens_per_s"],
                              "ep2_1thread_decode_tok_s": ep2["decode_tokens_per_s"],
                              "ratio_ep2_over_ep1": ratio,
                              "ep1_weight_mb": ep1["weight_mb_per_rank"],
                              "ep2_weight_mb_per_rank": ep2["weight_mb_per_rank"],
                              "moe_bytes_per_token_layer": ep2.get("moe_bytes_per_token_layer"),
                              "same_tokens": ep1["output_ids"] == ep2["output_ids"]}))
    print(json.dumps({"bench": "ep_decode_summary", "repeats": a.repeats,
                      "median_ratio_ep2_over_ep1": {n: statistics.median(r) for n, r in ratios.items()},
                      "bytes_per_token_layer_formula_uniform_routing": formula(config, 2, 16, a.new_tokens)}))


if __name__ == "__main__":
    main()
