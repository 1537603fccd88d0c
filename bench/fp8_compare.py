#!/usr/bin/python3
"""FP8 against bf16 on the same random model: single-stream decode, prefill and KV capacity.

For each architecture (default: the `small` Qwen3 dense and Qwen3-MoE presets) the script
writes the bf16 model and its FP8 twin (`make-model --fp8-block 128`, the same seed: the FP8
checkpoint quantizes the same weights), then alternates bench_decode and bench_prefill
between them --repeats times, so a slow moment of a shared machine hits both. KV capacity is
`max_total_num_tokens` of `tessera generate` with --kv-cache-dtype auto and fp8_e4m3 on the
bf16 model. Prints one JSON line per run and one summary line per architecture with medians:

  decode_speedup         FP8 decode tokens/s over bf16 (median of the per-round ratios)
  fp8_ratio_to_read_limit  FP8 tokens/s over (read bandwidth / bytes the FP8 model reads per
                         token: fp8 codes and scales, plus the bf16 LM head, norms, router)
  prefill_fp8_over_bf16  FP8 prefill time over bf16 (the cost of widening; 1.0 = free)
  kv_capacity_ratio      fp8_e4m3 KV tokens over auto (bf16) KV tokens

Usage: bench/fp8_compare.py --tessera build/tessera [--arch qwen3 --arch qwen3-moe]
                            [--preset small] [--repeats 3] [--workdir build/bench-out/fp8]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def make(tessera, arch, preset, out, fp8):
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    cmd = [tessera, "make-model", "--arch", arch, "--preset", preset, "--tokenizer", "none", "--seed", "1",
           "--out", out] + (["--fp8-block", "128"] if fp8 else [])
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def kv_capacity(tessera, model, kv_dtype):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "1",
           "--kv-cache-dtype", kv_dtype]
    p = subprocess.run(cmd, capture_output=True, text=True)
    found = re.search(r"max_total_num_tokens=(\d+)", p.stderr)
    if p.returncode != 0 or not found:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return int(found.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--arch", action="append", help="make-model architecture (repeatable)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--workdir", default="build/bench-out/fp8")
    a = ap.parse_args()
    bench_dir = os.path.dirname(os.path.abspath(a.tessera))
    decode_bin = os.path.join(bench_dir, "bench", "bench_decode")
    prefill_bin = os.path.join(bench_dir, "bench", "bench_prefill")
    os.makedirs(a.workdir, exist_ok=True)
    for arch in a.arch or ["qwen3", "qwen3-moe"]:
        models = {kind: make(a.tessera, arch, a.preset, os.path.join(a.workdir, f"{arch}-{a.preset}-{kind}"), kind == "fp8")
                  for kind in ("bf16", "fp8")}
        speedups, read_ratios, prefill_ratios = [], [], []
        for r in range(a.repeats):
            decode = {k: run_json([decode_bin, "--model-path", m, "--threads", str(a.threads), "--steps", "32"])
                      for k, m in models.items()}
            prefill = {k: run_json([prefill_bin, "--model-path", m, "--threads", str(a.threads), "--prompt-len",
                                    str(a.prompt_len)]) for k, m in models.items()}
            speedups.append(decode["fp8"]["decode_tokens_per_s"] / decode["bf16"]["decode_tokens_per_s"])
            read_ratios.append(decode["fp8"]["ratio_to_read_limit"])
            prefill_ratios.append(prefill["fp8"]["prefill_s"] / prefill["bf16"]["prefill_s"])
            for kind in ("bf16", "fp8"):
                print(json.dumps({"bench": "fp8_compare_run", "arch": arch, "round": r, "weights": kind,
                                  "decode_tokens_per_s": decode[kind]["decode_tokens_per_s"],
                                  "weight_bytes_per_token": decode[kind]["weight_bytes_per_token"],
                                  "read_bandwidth_gb_per_s": decode[kind]["read_bandwidth_gb_per_s"],
                                  "ratio_to_read_limit": decode[kind]["ratio_to_read_limit"],
                                  "prefill_tokens_per_s": prefill[kind]["prefill_tokens_per_s"],
                                  "prefill_ratio_to_peak": prefill[kind]["ratio_to_peak"]}), flush=True)
        auto_tokens = kv_capacity(a.tessera, models["bf16"], "auto")
        fp8_tokens = kv_capacity(a.tessera, models["bf16"], "fp8_e4m3")
        print(json.dumps({"bench": "fp8_compare", "arch": arch, "preset": a.preset, "repeats": a.repeats,
                          "threads": a.threads, "decode_speedup": statistics.median(speedups),
                          "fp8_ratio_to_read_limit": statistics.median(read_ratios),
                          "prefill_fp8_over_bf16": statistics.median(prefill_ratios),
                          "kv_tokens_auto": auto_tokens, "kv_tokens_fp8_e4m3": fp8_tokens,
                          "kv_capacity_ratio": fp8_tokens / auto_tokens}), flush=True)


if __name__ == "__main__":
    main()
