#!/usr/bin/python3
"""What --prefill-decode-interval buys: short requests decoding while a long prompt arrives.

One `tessera serve` per setting, alternating --prefill-decode-interval 0 and N (repeats
times each). Each run sends `--short` requests of about 40 prompt tokens and --short-output
output tokens, and, with them, one prompt of about --long-tokens tokens (4 output tokens), all at
once. --chunked-prefill-size cuts the long prompt into many prefill steps. Without the interval
those steps run back to back and every decoding request waits for all of them; with it, N
decode steps run between two chunks. Prints one JSON line per run: the inter-token latency of
the decoding requests (median, p99, max) and the TTFT p99 (the long prompt's), then one summary
line per setting with medians over repeats.

Usage: bench/prefill_interval.py --tessera build/tessera --model-path DIR [--interval 1]
       [--repeats 2] [--chunked-prefill-size 256] [--long-tokens 3000]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile

from serve_support import flush_cache, free_port, run_bench_serve, stop_server, wait_healthy

WORDS = ["river", "stone", "cloud", "market", "lantern", "garden", "signal", "copper", "harbor", "meadow",
         "engine", "window", "forest", "planet", "pocket", "silver", "ticket", "violet", "winter", "yellow"]


def dataset(path, args, seed):
    rng = random.Random(seed)
    words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))
    with open(path, "w") as f:
        for _ in range(args.short):
            f.write(json.dumps({"prompt": words(40), "output_len": args.short_output}) + "\n")
        f.write(json.dumps({"prompt": words(args.long_tokens), "output_len": 4}) + "\n")


def run(args, interval, repeat, workdir):
    port = free_port()
    log_path = os.path.join(workdir, f"server_interval{interval}_{repeat}.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([args.tessera, "serve", "--model-path", args.model_path, "--port", str(port),
                                   "--chunked-prefill-size", str(args.chunked_prefill_size),
                                   "--prefill-decode-interval", str(interval)],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, server)
        flush_cache(port)
        data = os.path.join(workdir, f"data_{repeat}.jsonl")
        dataset(data, args, seed=repeat)
        got = run_bench_serve(args.tessera, port, args.model_path, os.path.join(workdir, "bench.jsonl"),
                              args.short + 1, repeat + 1, ["--dataset", "jsonl:" + data])
    finally:
        stop_server(server)
    line = {"bench": "prefill_interval", "interval": interval, "repeat": repeat,
            "chunked_prefill_size": args.chunked_prefill_size, "short": args.short, "long_tokens": args.long_tokens,
            "median_itl_ms": round(got["median_itl_ms"], 1), "p99_itl_ms": round(got["p99_itl_ms"], 1),
            "max_itl_ms": round(got["max_itl_ms"], 1), "p99_ttft_ms": round(got["p99_ttft_ms"], 1),
            "output_tok_s": round(got["output_throughput"], 2)}
    print(json.dumps(line), flush=True)
    return line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--interval", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--chunked-prefill-size", type=int, default=256)
    ap.add_argument("--long-tokens", type=int, default=3000)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--short-output", type=int, default=64)
    args = ap.parse_args()
    lines = {0: [], args.interval: []}
    with tempfile.TemporaryDirectory() as workdir:
        for repeat in range(args.repeats):
            for interval in (0, args.interval):
                lines[interval].append(run(args, interval, repeat, workdir))
    for interval, runs in lines.items():
        med = lambda key: statistics.median(r[key] for r in runs)
        print(json.dumps({"bench": "prefill_interval_summary", "interval": interval, "repeats": len(runs),
                          "median_itl_ms": med("median_itl_ms"), "p99_itl_ms": med("p99_itl_ms"),
                          "max_itl_ms": med("max_itl_ms"), "p99_ttft_ms": med("p99_ttft_ms"),
                          "output_tok_s": med("output_tok_s")}))


if __name__ == "__main__":
    main()
