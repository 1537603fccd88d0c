#!/usr/bin/python3
"""EPLB on a skewed router load: balancedness and decode step time with the trivial expert
layout against redundant experts placed by live rebalancing, at EP2 and EP4 (TP = EP,
masked dispatch), served by `tessera serve` and driven by `tessera bench serve`.

The model is the small DeepSeek-V3 (8 layers, 32 experts top-4 in 8 groups, bf16) made with
`make-model --router-skew 0.6`: its routing bias favours the low experts and their groups,
which the trivial layout puts on EP rank 0. Per repeat and EP size, in this order:
  trivial  --expert-balancedness-report-mode both
  eplb     + --ep-num-redundant-experts R --enable-eplb --eplb-rebalance-num-iterations 32
           (the untimed warm-up run records the load and triggers the first rebalance); its
           placement is dumped at the end (last_physical_to_logical_map)
  planned  that placement from the start (--init-expert-location FILE), no rebalancing: the
           offline-planning workflow, and the step time without any rebalance in it
  churn    eplb with --eplb-rebalance-num-iterations N (--churn-every, default 8)
           --eplb-rebalance-layers-per-chunk 1: p99 inter-token latency with a rebalance every N
           passes against planned
  churn_between  (--transfer-ab) churn with TSR_EPLB_TRANSFER_BETWEEN_PASSES=1: each chunk's
           experts move on the forward thread between passes instead of beside a pass
Each server gets an untimed warm-up (16 requests) and a timed run (32 requests, 16 at once,
64 prompt / 32 output tokens), then a prefill-heavy run (16 requests of 512 prompt tokens at
once, 2 output tokens: median TTFT), where the expert GEMMs are compute-bound and
balancedness turns into time; at 16 decoding sequences a step reads each expert a rank
touches once, so a copy of a hot expert on each rank balances tokens more than bytes.
--concurrency C (a multiple of 16) scales every count by C / 16: more tokens per pass, less
multinomial noise in a pass's balancedness. Balancedness is the mean of the server log's
current_pass_balancedness over the timed run's passes; the decode step time is bench
serve's median inter-token latency. Rebalance cost: the "[EPLBManager] rebalanced layers
... (... transfer T ms ...) in X ms on the forward thread (start S, install I)" lines (per layer
chunk: X = S + I, each paid at one pass boundary) and "rebalance end time=".

Prints one JSON line per run and a summary with medians over repeats.

Usage: bench/eplb_balance.py --tessera build/tessera [--model-path DIR] [--ep 2 4] [--repeats 3]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from serve_support import free_port, stop_server, wait_healthy


def bench(a, port, prompts, seed, out_file, input_len=64, output_len=32):
    prompts *= a.concurrency // 16  # the same number of waves at any concurrency
    cmd = [a.tessera, "bench", "serve", "--backend", "openai", "--port", str(port), "--model", "bench-model",
           "--model-path", a.model_path, "--random-input-len", str(input_len), "--random-output-len", str(output_len),
           "--random-range-ratio", "1", "--request-rate", "inf", "--num-prompts", str(prompts),
           "--max-concurrency", str(a.concurrency), "--seed", str(seed), "--warmup-requests", "0", "--disable-tqdm",
           "--output-file", out_file]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench serve failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(out_file) as f:
        return json.loads(f.readlines()[-1])


BALANCED = re.compile(r"current_pass_balancedness=([0-9.]+)")
CHUNK = re.compile(r"rebalanced layers (\d+)\.\.(\d+): (\d+) experts moved .*transfer ([0-9.]+) ms.* in ([0-9.]+) ms "
                   r"on the forward thread \(start ([0-9.]+), install ([0-9.]+)\)")
END = re.compile(r"rebalance end time=([0-9.]+)s")


def dump_placement(port, dump_dir, out_file):
    """The placement in force, from a recorder dump, as an --init-expert-location file."""
    for f in os.listdir(dump_dir):
        os.remove(os.path.join(dump_dir, f))
    req = urllib.request.Request(f"http://127.0.0.1:{port}/dump_expert_distribution_record", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        if r.status != 200:
            sys.exit(f"/dump_expert_distribution_record answered {r.status}")
    dumped = [f for f in os.listdir(dump_dir) if f.endswith(".json")]
    with open(os.path.join(dump_dir, dumped[0])) as f:
        placement = json.load(f)["last_physical_to_logical_map"]
    with open(out_file, "w") as f:
        json.dump({"physical_to_logical_map": placement}, f)


def serve_run(a, ep, name, extra, seed, workdir, placement_out=None, extra_env=None):
    port = free_port()
    log_path = os.path.join(workdir, f"serve_ep{ep}_{name}_{seed}.log")
    dump_dir = os.path.join(workdir, "dumps")
    os.makedirs(dump_dir, exist_ok=True)
    env = dict(os.environ, SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=dump_dir, **(extra_env or {}))
    with open(log_path, "w") as log:
        server = subprocess.Popen([a.tessera, "serve", "--model-path", a.model_path, "--served-model-name",
                                   "bench-model", "--port", str(port), "--tp", str(ep), "--ep", str(ep),
                                   "--threads", "1", "--expert-balancedness-report-mode", "both",
                                   "--max-total-tokens", str(8192 * a.concurrency // 16), *extra], stdout=log, stderr=subprocess.STDOUT,
                                  env=env)
        try:
            wait_healthy(port, server)
            bench(a, port, 16, seed + 1000, os.path.join(workdir, "warmup.jsonl"))
            before = open(log_path).read()
            run = bench(a, port, 32, seed, os.path.join(workdir, "runs.jsonl"))
            text = open(log_path).read()
            # Prefill-heavy: 16 prompts of 512 tokens at once, 2 output tokens each.
            prefill = bench(a, port, 16, seed + 2000, os.path.join(workdir, "prefill.jsonl"), 512, 2)
            prefill_text = open(log_path).read()[len(text):]
            if placement_out:
                dump_placement(port, dump_dir, placement_out)
        finally:
            stop_server(server)
    timed = text[len(before):]
    values = [float(v) for v in BALANCED.findall(timed)]
    chunks = [(int(m[0]), int(m[1]), int(m[2]), float(m[3]), float(m[4]), max(float(m[5]), float(m[6])))
              for m in CHUNK.findall(text)]
    prefill_values = [float(v) for v in BALANCED.findall(prefill_text)]
    return {"balancedness": statistics.mean(values) if values else None, "passes": len(values),
            "prefill_balancedness": statistics.mean(prefill_values) if prefill_values else None,
            "prefill_median_ttft_ms": prefill["median_ttft_ms"], "prefill_input_throughput": prefill["input_throughput"],
            "median_itl_ms": run["median_itl_ms"], "p99_itl_ms": run["p99_itl_ms"],
            "median_tpot_ms": run["median_tpot_ms"], "p99_tpot_ms": run["p99_tpot_ms"],
            "output_throughput": run["output_throughput"],
            "chunks_moved": len(chunks), "chunk_ms": [c[4] for c in chunks], "transfer_ms": [c[3] for c in chunks],
            "boundary_ms": [c[5] for c in chunks],
            "experts_moved": sum(c[2] for c in chunks),
            "rebalance_s": [float(v) for v in END.findall(text)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", default="build/models/deepseek-v3-small-skew-bf16")
    ap.add_argument("--ep", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--redundant", type=int, default=0, help="redundant experts (default: 8 x ep)")
    ap.add_argument("--churn-every", type=int, default=8, help="rebalance period of the churn run, in passes")
    ap.add_argument("--concurrency", type=int, default=16, help="requests at once (a multiple of 16)")
    ap.add_argument("--eplb-every", type=int, default=32, help="rebalance period of the eplb run, in passes")
    ap.add_argument("--transfer-ab", action="store_true",
                    help="also run churn with the transfer between passes (churn_between)")
    ap.add_argument("--layouts", nargs="+", help="run only these layouts (default: all)")
    ap.add_argument("--dispatch", default="static", help="--ep-dispatch-algorithm of the EPLB runs")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.model_path, "config.json")):
        subprocess.run([a.tessera, "make-model", "--arch", "deepseek-v3", "--preset", "small", "--dtype", "bf16",
                        "--router-skew", "0.6", "--out", a.model_path], check=True)
    workdir = tempfile.mkdtemp(prefix="eplb_bench_")
    summary = {}
    for ep in a.ep:
        redundant = a.redundant or 8 * ep
        eplb = ["--ep-num-redundant-experts", str(redundant), "--enable-eplb", "--ep-dispatch-algorithm", a.dispatch]
        placement = os.path.join(workdir, f"placement_ep{ep}.json")
        layouts = {"trivial": [],
                   "eplb": eplb + ["--eplb-rebalance-num-iterations", str(a.eplb_every)],
                   "planned": ["--ep-num-redundant-experts", str(redundant), "--init-expert-location", placement,
                               "--ep-dispatch-algorithm", a.dispatch],
                   "churn": eplb + ["--eplb-rebalance-num-iterations", str(a.churn_every),
                                    "--eplb-rebalance-layers-per-chunk", "1"]}
        if a.transfer_ab:
            layouts["churn_between"] = layouts["churn"]
        if a.layouts:
            layouts = {k: v for k, v in layouts.items() if k in a.layouts}
        between = {"TSR_EPLB_TRANSFER_BETWEEN_PASSES": "1"}
        rows = {k: [] for k in layouts}
        for r in range(a.repeats):
            for name, extra in layouts.items():
                result = serve_run(a, ep, name, extra, 7 + r, workdir, placement if name == "eplb" else None,
                                   between if name == "churn_between" else None)
                result.update({"ep": ep, "layout": name, "repeat": r, "redundant": redundant if extra else 0})
                print(json.dumps(result), flush=True)
                rows[name].append(result)
        def med(name, key, digits=3):
            values = [x[key] for x in rows.get(name, []) if x[key] is not None]
            return round(statistics.median(values), digits) if values else None

        def ratio(num, den, key):  # per repeat, then the median
            pairs = [x[key] / y[key] for x, y in zip(rows.get(num, []), rows.get(den, []))]
            return round(statistics.median(pairs), 3) if pairs else None

        def chunk_stats(names, key):
            ms = [v for name in names for x in rows.get(name, []) for v in x[key]]
            return (round(statistics.median(ms), 1), round(max(ms), 1)) if ms else (None, None)

        step_ms = chunk_stats(["eplb", "churn"], "chunk_ms")
        boundary_ms = chunk_stats(["churn"], "boundary_ms")
        beside_ms = chunk_stats(["churn"], "transfer_ms")
        between_ms = chunk_stats(["churn_between"], "chunk_ms")
        summary[f"ep{ep}"] = {
            "redundant_experts": redundant,
            "balancedness_trivial": med("trivial", "balancedness"),
            "balancedness_eplb": med("eplb", "balancedness"),
            "balancedness_planned": med("planned", "balancedness"),
            "median_itl_ms_trivial": med("trivial", "median_itl_ms", 2),
            "median_itl_ms_eplb": med("eplb", "median_itl_ms", 2),
            "median_itl_ms_planned": med("planned", "median_itl_ms", 2),
            "step_time_trivial_over_planned": ratio("trivial", "planned", "median_itl_ms"),
            "prefill_balancedness_trivial": med("trivial", "prefill_balancedness"),
            "prefill_balancedness_planned": med("planned", "prefill_balancedness"),
            "prefill_ttft_trivial_over_planned": ratio("trivial", "planned", "prefill_median_ttft_ms"),
            "step_time_trivial_over_eplb": ratio("trivial", "eplb", "median_itl_ms"),
            "churn_every": a.churn_every,
            "p99_itl_churn_over_planned": ratio("churn", "planned", "p99_itl_ms"),
            "p99_tpot_churn_over_planned": ratio("churn", "planned", "p99_tpot_ms"),
            "p99_itl_churn_between_over_planned": ratio("churn_between", "planned", "p99_itl_ms"),
            "p99_itl_churn_between_over_churn": ratio("churn_between", "churn", "p99_itl_ms"),
            "median_chunk_ms_forward_thread": step_ms[0],
            "max_chunk_ms_forward_thread": step_ms[1],
            "median_transfer_ms_beside_pass": beside_ms[0],
            "median_chunk_ms_per_pass_boundary": boundary_ms[0],
            "median_chunk_ms_between_passes": between_ms[0],
        }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
