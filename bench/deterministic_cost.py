#!/usr/bin/env python3
"""What --enable-deterministic-inference costs: `tessera bench one-batch` with and without the
flag, alternately, on the same model and shapes.

Each workload (BATCH:INPUT:OUTPUT) runs --repeats times in each mode, the two modes taking turns,
so both see the same moments of a shared machine. Prints one JSON line per run and, per workload,
one line with the medians of prefill and decode throughput in each mode and their ratios
(deterministic / plain).

  bench/deterministic_cost.py --tessera build/tessera --model-path build/models/qwen3-small-bf16
"""

import argparse
import json
import statistics
import subprocess
import sys


def one_batch(tessera, model, threads, workload, deterministic):
    batch, input_len, output_len = workload.split(":")
    command = [tessera, "bench", "one-batch", "--model-path", model, "--threads", str(threads),
               "--batch-size", batch, "--input-len", input_len, "--output-len", output_len]
    if deterministic:
        command.append("--enable-deterministic-inference")
    run = subprocess.run(command, capture_output=True, text=True, check=True)
    line = [raw for raw in run.stdout.splitlines() if raw.startswith("{")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workload", action="append",
                    help="BATCH:INPUT:OUTPUT (repeatable; default 1:512:32 and 16:128:16)")
    a = ap.parse_args()
    for workload in a.workload or ["1:512:32", "16:128:16"]:
        runs = {False: [], True: []}
        for _ in range(a.repeats):
            for deterministic in (False, True):
                r = one_batch(a.tessera, a.model_path, a.threads, workload, deterministic)
                runs[deterministic].append(r)
                print(json.dumps({"workload": workload, "deterministic": deterministic, **r}), flush=True)
        summary = {"bench": "deterministic_cost", "workload": workload, "repeats": a.repeats}
        for key in ("prefill_throughput_tok_s", "decode_throughput_tok_s"):
            plain = statistics.median(r[key] for r in runs[False])
            det = statistics.median(r[key] for r in runs[True])
            summary[key] = {"plain": plain, "deterministic": det, "ratio": det / plain if plain else None}
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
