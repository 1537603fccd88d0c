#!/usr/bin/python3
"""Two builds of tessera side by side on one serving workload, run alternately: each round
starts `tessera serve` from one build with the given flags, sends the workload with
`tessera bench serve` (all requests at once, --max-concurrency C), stops it, then does the
same with the other build. Prints one JSON line per run and a summary with the medians of
output tokens/s, TTFT and TPOT and their ratios (candidate / baseline).
Use it to measure a change where a single request is not the point (DP-attention groups
busy at once, batched decode): build the commit before it into another folder, pass that
binary as --baseline and the new one as --tessera.

Every server listens on 127.0.0.1 on a free port and is always stopped. Both servers get the
same client (the candidate's `tessera bench serve`), the builds take turns going first, and
each server's log stays in --workdir.

Usage: bench/ab_serve.py --tessera build/tessera --baseline OLD/tessera --model-path DIR
       [--repeats 3] [--concurrency 8] [--prompts 16] [--input-len 256] [--output-len 64]
       [--workdir build/bench-out/ab_serve]
       -- [serve flags for both, e.g. --tp 2 --dp 2 --enable-dp-attention]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from serve_support import free_port, run_bench_serve, stop_server, wait_healthy


def serve_once(server_binary, client_binary, model, flags, workload, concurrency, workdir, tag):
    port = free_port()
    log_path = os.path.join(workdir, f"{tag}.log")
    print(f"{tag}: server log {log_path}", file=sys.stderr, flush=True)
    with open(log_path, "w") as log:
        server = subprocess.Popen([server_binary, "serve", "--model-path", model, "--host", "127.0.0.1", "--port",
                                   str(port), *flags], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, server)
        return run_bench_serve(client_binary, port, model, os.path.join(workdir, f"{tag}.jsonl"), concurrency, 0,
                               workload)
    finally:
        stop_server(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True, help="the candidate build")
    ap.add_argument("--baseline", required=True, help="the build to compare against")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--workdir", default="build/bench-out/ab_serve")
    ap.add_argument("flags", nargs="*", help="tessera serve flags for both builds (after --)")
    a = ap.parse_args()
    workload = ["--dataset", "random", "--random-input-len", str(a.input_len), "--random-output-len",
                str(a.output_len), "--random-range-ratio", "1", "--num-prompts", str(a.prompts)]
    builds = {"baseline": a.baseline, "candidate": a.tessera}
    keys = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
    rows = {name: [] for name in builds}
    os.makedirs(a.workdir, exist_ok=True)
    for r in range(a.repeats):
        order = list(builds.items()) if r % 2 == 0 else list(reversed(builds.items()))
        for name, binary in order:
            j = serve_once(binary, a.tessera, a.model_path, a.flags, workload, a.concurrency, a.workdir, f"{name}_{r}")
            row = {k: j[k] for k in keys}
            rows[name].append(row)
            print(json.dumps({"bench": "ab_serve", "repeat": r, "build": name, **row}), flush=True)
    medians = {name: {k: statistics.median(x[k] for x in rs) for k in keys} for name, rs in rows.items()}
    print(json.dumps({"bench": "ab_serve_summary", "model": a.model_path, "flags": " ".join(a.flags),
                      "concurrency": a.concurrency, "prompts": a.prompts, "input_len": a.input_len,
                      "output_len": a.output_len, "repeats": a.repeats, "medians": medians,
                      "candidate_over_baseline": {k: medians["candidate"][k] / medians["baseline"][k] for k in keys}}))


if __name__ == "__main__":
    main()
