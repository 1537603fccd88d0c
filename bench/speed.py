#!/usr/bin/python3
"""The speed issue's model benchmarks in one alternating run: single-stream decode of the
dense and Qwen3-MoE `small` presets at contexts 16, 512 and 4096 (bench_decode), and a
512-token prefill of each (bench_prefill), --repeats rounds, every benchmark once
per round, so a slow moment of a shared machine hits all of them. Each run measures the
machine's read bandwidth and bf16 peak itself, so its ratio is against its own moment.

Prints one JSON line per run and a summary line per benchmark with medians:
  decode   ratio_to_read_limit_with_kv: (weight + KV bytes a step reads) · tokens/s over the
           read bandwidth. Target ≥ 0.85.
  prefill  ratio_to_peak: model FLOPs per second over the bf16 multiply-add peak. Target ≥ 0.8.

The models are written once with `make-model` (random weights) under --workdir.

Usage: bench/speed.py --tessera build/tessera [--repeats 3] [--threads 2]
                      [--workdir build/models] [--contexts 16,512,4096]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def model(tessera, arch, workdir):
    out = os.path.join(workdir, f"{arch}-small-bf16")
    if not os.path.exists(os.path.join(out, "config.json")):
        # With the family's tokenizer, so that serve_bound.py and startup_rss.py can serve it.
        subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "small",
                        "--seed", "0", "--dtype", "bf16", "--out", out], check=True, capture_output=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="build/models")
    ap.add_argument("--contexts", default="16,512,4096")
    a = ap.parse_args()
    bench_dir = os.path.join(os.path.dirname(os.path.abspath(a.tessera)), "bench")
    contexts = [int(c) for c in a.contexts.split(",")]
    models = {arch: model(a.tessera, arch, a.workdir) for arch in ("qwen3", "qwen3-moe")}
    benches = [("decode", arch, c) for arch in models for c in contexts] + [("prefill", arch, 512) for arch in models]
    results = {b: [] for b in benches}
    for r in range(a.repeats):
        for b in benches:
            kind, arch, n = b
            if kind == "decode":
                j = run_json([os.path.join(bench_dir, "bench_decode"), "--model-path", models[arch], "--threads",
                              str(a.threads), "--context", str(n)])
                row = {"tokens_per_s": j["decode_tokens_per_s"], "ratio": j["ratio_to_read_limit_with_kv"],
                       "read_bandwidth_gb_per_s": j["read_bandwidth_gb_per_s"]}
            else:
                j = run_json([os.path.join(bench_dir, "bench_prefill"), "--model-path", models[arch], "--threads",
                              str(a.threads), "--prompt-len", str(n)])
                row = {"tokens_per_s": j["prefill_tokens_per_s"], "ratio": j["ratio_to_peak"],
                       "peak_gflops": j["peak_gflops"]}
                if "ratio_to_l1_tile_loop" in j:  # AMX: against the loop a tiled GEMM runs at best
                    row["ratio_to_l1_tile_loop"] = j["ratio_to_l1_tile_loop"]
            results[b].append(row)
            print(json.dumps({"bench": f"speed_{kind}", "repeat": r, "arch": arch,
                              "context" if kind == "decode" else "prompt_len": n,
                              **{k: round(v, 3) for k, v in row.items()}}), flush=True)
    for (kind, arch, n), rows in results.items():
        print(json.dumps({"bench": f"speed_{kind}_summary", "arch": arch,
                          "context" if kind == "decode" else "prompt_len": n, "repeats": a.repeats,
                          "tokens_per_s_median": round(statistics.median(x["tokens_per_s"] for x in rows), 2),
                          "ratio_per_repeat": [round(x["ratio"], 3) for x in rows],
                          "ratio_median": round(statistics.median(x["ratio"] for x in rows), 3),
                          "target": 0.85 if kind == "decode" else 0.8}), flush=True)


if __name__ == "__main__":
    main()
