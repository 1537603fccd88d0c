#!/usr/bin/python3
"""Two builds of tessera side by side on one `tessera generate` workload, run alternately:
prefill and decode tokens/s, weights per rank, and what the MoE layers sent per token and layer
(rank 0's counters), with the medians of the rounds and their ratios (candidate / baseline).
Use it to measure a change: build the commit before it into another folder, pass that binary
as --baseline and the new one as --tessera. For a change behind an environment switch, pass
the same binary twice and the switch as --baseline-env (e.g. TSR_PP_OVER_GLOO=1). The summary
says whether every round gave the same greedy tokens from both (a change of summation order may
flip a near tie).

Usage: bench/ab_generate.py --tessera build/tessera --baseline OLD/tessera --model-path DIR
       [--baseline-env KEY=VALUE ...] [--repeats 3] [--prompt-len 512] [--new-tokens 64]
       -- [flags for both, e.g. --tp 2]
Prints one JSON line per run and one summary line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run(tessera, model, prompt_len, new_tokens, extra, env=None):
    prompt = ",".join(str(10 + i % 1000) for i in range(prompt_len))
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", prompt, "--max-new-tokens", str(new_tokens),
           "--ignore-eos", "--json"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:2])} ... exited {p.returncode}:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True, help="the candidate build")
    ap.add_argument("--baseline", required=True, help="the build to compare against")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--baseline-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of the baseline's runs only (repeatable)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("flags", nargs="*", help="tessera generate flags for both builds (after --)")
    a = ap.parse_args()
    builds = {"baseline": a.baseline, "candidate": a.tessera}
    baseline_env = dict(os.environ)
    for kv in a.baseline_env:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            ap.error(f"--baseline-env {kv!r}: expected KEY=VALUE")
        baseline_env[key] = value
    envs = {"baseline": baseline_env, "candidate": None}
    rows = {name: [] for name in builds}
    same_tokens = []
    for r in range(a.repeats):
        tokens = {}
        for name, binary in builds.items():
            j = run(binary, a.model_path, a.prompt_len, a.new_tokens, a.flags, envs[name])
            tokens[name] = j["output_ids"]
            row = {"ttft_s": j["ttft_s"], "prefill_tok_s": j["prefill_tokens_per_s"],
                   "decode_tok_s": j["decode_tokens_per_s"],
                   "weight_mb_per_rank": j["weight_mb_per_rank"]}
            rows[name].append(row)
            print(json.dumps({"bench": "ab_generate", "repeat": r, "build": name, **row,
                              "moe_bytes_per_token_layer": j.get("moe_bytes_per_token_layer")}), flush=True)
        same_tokens.append(tokens["baseline"] == tokens["candidate"])
    medians = {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for name, rs in rows.items()}
    print(json.dumps({"bench": "ab_generate_summary", "model": a.model_path, "flags": " ".join(a.flags),
                      "baseline_env": a.baseline_env,
                      "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "repeats": a.repeats,
                      "same_tokens": all(same_tokens), "medians": medians,
                      "candidate_over_baseline": {k: medians["candidate"][k] / medians["baseline"][k]
                                                  for k in medians["baseline"]}}))


if __name__ == "__main__":
    main()
