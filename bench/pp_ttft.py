#!/usr/bin/python3
"""Time to first token of one long prompt under pipeline parallelism, as `tessera generate`
runs it (each rank one thread): PP1, PP2 with fixed chunks, PP2 with dynamic chunking. For
the PP runs the pipeline trace gives every rank's bubble ratio over the prefill (the part of
the window from stage 0's first chunk to the last stage's last chunk in which the rank does
not compute), next to the theory (P-1)/(P-1+M) for the M chunks the run used.
Prints one JSON line per run and a summary line; the traces are kept in --out-dir.

Usage: bench/pp_ttft.py --tessera build/tessera --model-path DIR [--prompt-len 16384]
       [--chunk 2048] [--dynamic-chunk 2048] [--pp 2] [--repeats 1] [--out-dir build/bench-out]
       [--kinds fixed,dynamic] [--skip-pp1] [--smooth-factor F]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys


def prompt_ids(n, vocab_limit=150000, seed=0):
    rng = random.Random(seed)
    return ",".join(str(rng.randrange(1000, vocab_limit)) for _ in range(n))


def run(a, prompt, pp, chunk, dynamic, trace):
    cmd = [a.tessera, "generate", "--model-path", a.model_path, "--prompt-ids", prompt, "--max-new-tokens", "1",
           "--ignore-eos", "--json", "--threads-per-rank", "1", "--pp-size", str(pp),
           "--chunked-prefill-size", str(chunk), "--max-prefill-tokens", str(max(chunk, 16384)),
           "--max-total-tokens", str(a.prompt_len + 4096)]
    if dynamic:
        cmd.append("--enable-dynamic-chunking")
    if trace:
        cmd += ["--enable-pipeline-trace", trace]
    env = dict(os.environ)
    if a.smooth_factor is not None:
        env["SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR"] = str(a.smooth_factor)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"generate (pp {pp}, chunk {chunk}, dynamic {dynamic}) failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout)
    out["log"] = [line for line in p.stderr.splitlines() if "Dynamic Chunk" in line]
    return out


def bubbles(trace_path, n_chunks):
    """Per-rank bubble ratio over the prefill window, from the trace's compute spans."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    compute = {}
    for e in events:
        if e.get("ph") == "X" and e["name"] == "compute" and 0 <= e["args"]["step"] < n_chunks:
            compute.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
    ranks = sorted(compute)
    begin = min(s for s, _ in compute[ranks[0]])
    end = max(t for _, t in compute[ranks[-1]])
    window = end - begin
    ratios = {}
    for r in ranks:
        busy = sum(max(0.0, min(t, end) - max(s, begin)) for s, t in compute[r])
        ratios[r] = 1.0 - busy / window
    return ratios, window / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--prompt-len", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=2048, help="fixed chunk size (PP1 and PP2 fixed)")
    ap.add_argument("--dynamic-chunk", type=int, default=2048, help="initial chunk of dynamic chunking")
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out-dir", default="build/bench-out")
    ap.add_argument("--skip-pp1", action="store_true", help="only the PP runs (bubble ratios)")
    ap.add_argument("--kinds", default="fixed,dynamic", help="PP runs: fixed, dynamic or both")
    ap.add_argument("--smooth-factor", type=float, help="SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR (default: unset, 0.75)")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    prompt = prompt_ids(a.prompt_len)
    results = {"pp1": [], "fixed": [], "dynamic": []}
    for i in range(a.repeats):
        if not a.skip_pp1:
            r = run(a, prompt, 1, a.chunk, False, None)
            results["pp1"].append(r["ttft_s"])
            print(json.dumps({"bench": "pp_ttft", "repeat": i, "pp": 1, "chunking": "fixed", "chunk": a.chunk,
                              "prompt_len": a.prompt_len, "ttft_s": r["ttft_s"], "chunks": len(r["prefill_chunks"])}),
                  flush=True)
        for kind, chunk in (("fixed", a.chunk), ("dynamic", a.dynamic_chunk)):
            if kind not in a.kinds.split(","):
                continue
            suffix = f"_smooth{a.smooth_factor:g}" if kind == "dynamic" and a.smooth_factor is not None else ""
            trace = os.path.join(a.out_dir, f"pp{a.pp}_{kind}{suffix}_trace.json")
            r = run(a, prompt, a.pp, chunk, kind == "dynamic", trace)
            m = len(r["prefill_chunks"])
            per_rank, window_s = bubbles(trace, m)
            theory = (a.pp - 1) / (a.pp - 1 + m)
            results[kind].append((r["ttft_s"], max(per_rank.values()), theory))
            line = {"bench": "pp_ttft", "repeat": i, "pp": a.pp, "chunking": kind, "chunk": chunk,
                    "smooth_factor": a.smooth_factor if a.smooth_factor is not None else 0.75,
                    "dynamic_chunking_active": r["dynamic_chunking"], "prompt_len": a.prompt_len,
                    "ttft_s": r["ttft_s"], "chunks": m, "chunk_sizes": r["prefill_chunks"],
                    "prefill_window_s": window_s,
                    "bubble_ratio_per_rank": {str(k): round(v, 4) for k, v in per_rank.items()},
                    "bubble_ratio_theory": round(theory, 4),
                    "bubble_vs_theory": round(max(per_rank.values()) / theory, 3), "trace": trace}
            if results["pp1"]:
                line["ttft_ratio_vs_pp1"] = round(r["ttft_s"] / results["pp1"][-1], 4)
            if r["log"]:
                line["dynamic_chunking_log"] = r["log"]
            print(json.dumps(line), flush=True)
    summary = {"bench": "pp_ttft_summary", "pp": a.pp, "prompt_len": a.prompt_len, "repeats": a.repeats}
    if results["pp1"]:
        pp1 = statistics.median(results["pp1"])
        summary["pp1_ttft_s_median"] = pp1
        for kind in ("fixed", "dynamic"):
            if results[kind]:
                summary[f"pp{a.pp}_{kind}_ttft_ratio_median"] = round(
                    statistics.median(t for t, _, _ in results[kind]) / pp1, 4)
    for kind in ("fixed", "dynamic"):
        if not results[kind]:
            continue
        summary[f"{kind}_max_rank_bubble_median"] = round(statistics.median(b for _, b, _ in results[kind]), 4)
        summary[f"{kind}_bubble_theory"] = round(results[kind][-1][2], 4)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
