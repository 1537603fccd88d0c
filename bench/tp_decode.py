#!/usr/bin/python3
"""Decode speed of tensor parallelism on one host, as `tessera generate` runs it: TP2 (two
rank processes x 1 thread) against TP1 (one process x 2 threads), plus resident memory per
rank. Prints one JSON line per run and a summary line with the median ratio.

Usage: bench/tp_decode.py --tessera build/tessera --model-path DIR [--repeats 3] [--new-tokens 64]
"""

import argparse
import json
import statistics
import subprocess
import sys


def run(tessera, model, tp, threads, new_tokens):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", ",".join(str(i) for i in range(1, 17)),
           "--max-new-tokens", str(new_tokens), "--ignore-eos", "--json", "--tp", str(tp), "--threads", str(threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    ratios = []
    for i in range(a.repeats):
        tp1 = run(a.tessera, a.model_path, 1, 2, a.new_tokens)
        tp2 = run(a.tessera, a.model_path, 2, 1, a.new_tokens)
        ratio = tp2["decode_tokens_per_s"] / tp1["decode_tokens_per_s"]
        ratios.append(ratio)
        print(json.dumps({"bench": "tp_decode", "repeat": i,
                          "tp1_2threads_decode_tok_s": tp1["decode_tokens_per_s"],
                          "tp2_1thread_decode_tok_s": tp2["decode_tokens_per_s"],
                          "ratio_tp2_over_tp1": ratio,
                          "tp1_weight_mb": tp1["weight_mb_per_rank"], "tp2_weight_mb_per_rank": tp2["weight_mb_per_rank"],
                          "tp1_rss_mb": tp1["rss_mb"], "tp2_rank0_rss_mb": tp2["rss_mb"],
                          "same_tokens": tp1["output_ids"] == tp2["output_ids"]}))
    print(json.dumps({"bench": "tp_decode_summary", "repeats": a.repeats,
                      "median_ratio_tp2_over_tp1": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
