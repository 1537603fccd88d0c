#!/usr/bin/python3
"""What the gateway costs and what it buys. Three measurements, each printed as JSON lines
(one per run, then a summary line with medians over the repeats):

  overhead     the latency the gateway adds per request: one worker (the tiny model, one
               thread), sequential requests alternately sent to it directly and through
               `tessera gateway`; per repeat the difference of the medians, for POST
               /generate of one token and for GET /v1/models (no engine work at all).
  scale_out    `tessera bench serve` at concurrency 16 through the gateway over two workers
               of one thread each, against one worker of two threads (the same cores),
               alternately; the ratio of output throughputs per repeat; and the one worker
               through the gateway, which isolates the gateway's own cost at that load.
  prefix       a shared-prefix workload (groups of requests sharing a long system prompt,
               interleaved) through two gateways over the same two workers, cache_aware and
               round_robin, alternately, the workers' caches flushed before each run: TTFT
               and throughput of each.

Every server listens on 127.0.0.1 on a free port and is always stopped.

Usage: bench/gateway_bench.py --tessera build/tessera --workdir DIR [--repeats 3]
       [--only overhead|scale_out|prefix] [--scale-model-path models/tessera-tiny-chat]
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import time

from serve_support import free_port, run_bench_serve, stop_server, wait_healthy


def make_model(tessera, out, *extra):
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([tessera, "make-model", "--arch", "qwen3", "--tokenizer", "qwen3", "--seed", "3", "--out", out,
                        *extra], check=True, capture_output=True)
    return out


class Procs:
    """Started servers, all stopped at exit."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.workdir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((p, log))
        return p

    def stop_all(self):
        for p, log in reversed(self.procs):
            stop_server(p)
            log.close()
        self.procs = []


def worker(procs, a, model, threads, name, *extra):
    port = free_port()
    p = procs.start(name, [a.tessera, "serve", "--model-path", model, "--port", str(port), "--threads-per-rank",
                           str(threads), "--random-seed", "1", *extra])
    wait_healthy(port, p)
    return port


def gateway(procs, a, ports, policy, name):
    port = free_port()
    p = procs.start(name, [a.tessera, "gateway", "--port", str(port), "--policy", policy, "--worker-urls",
                           *[f"http://127.0.0.1:{w}" for w in ports]])
    wait_healthy(port, p)
    return port


def timed(conn, method, path, body):
    t = time.perf_counter()
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"{method} {path} answered {r.status}")
    return (time.perf_counter() - t) * 1e3


def overhead(a):
    procs = Procs(a.workdir)
    try:
        model = make_model(a.tessera, os.path.join(a.workdir, "tiny"), "--preset", "tiny", "--dtype", "f32")
        wport = worker(procs, a, model, 1, "overhead_worker")
        gport = gateway(procs, a, [wport], "round_robin", "overhead_gateway")
        body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        runs = []
        for rep in range(a.repeats):
            lat = {}
            for target, port in (("direct", wport), ("gateway", gport)):
                # A new connection per request, as most clients of a serving endpoint make them.
                for route, method, b in (("generate", "POST", body), ("models", "GET", None)):
                    xs = []
                    for _ in range(a.overhead_requests):
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                        xs.append(timed(conn, method, "/generate" if route == "generate" else "/v1/models", b))
                        conn.close()
                    lat[(target, route)] = statistics.median(xs)
            run = {"bench": "gateway_overhead", "repeat": rep,
                   "generate_direct_ms": lat[("direct", "generate")], "generate_gateway_ms": lat[("gateway", "generate")],
                   "models_direct_ms": lat[("direct", "models")], "models_gateway_ms": lat[("gateway", "models")]}
            run["generate_added_ms"] = run["generate_gateway_ms"] - run["generate_direct_ms"]
            run["models_added_ms"] = run["models_gateway_ms"] - run["models_direct_ms"]
            print(json.dumps(run), flush=True)
            runs.append(run)
        print(json.dumps({"bench": "gateway_overhead", "summary": True, "requests_per_median": a.overhead_requests,
                          "median_generate_added_ms": statistics.median(r["generate_added_ms"] for r in runs),
                          "median_models_added_ms": statistics.median(r["models_added_ms"] for r in runs),
                          "target_ms": 1.0}), flush=True)
    finally:
        procs.stop_all()


def bench_serve(a, port, model, out_name, seed, dataset=None):
    if dataset:
        workload = ["--dataset", "jsonl:" + dataset, "--num-prompts", str(a.prefix_groups * a.prefix_per_group),
                    "--random-output-len", str(a.prefix_output_len)]
    else:
        workload = ["--num-prompts", str(a.num_prompts), "--random-input-len", str(a.input_len),
                    "--random-output-len", str(a.output_len), "--random-range-ratio", "1"]
    return run_bench_serve(a.tessera, port, model, os.path.join(a.workdir, out_name + ".jsonl"), a.concurrency, seed,
                           workload)


def flush(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/flush_cache")
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"/flush_cache on {port} answered {r.status}")


def scale_out(a):
    if a.scale_model_path:
        model, model_name = a.scale_model_path, os.path.basename(os.path.normpath(a.scale_model_path))
    else:
        model = make_model(a.tessera, os.path.join(a.workdir, "small"), "--preset", "small", "--num-layers",
                           str(a.small_layers), "--dtype", "bf16")
        model_name = f"qwen3 small preset, {a.small_layers} layers, bf16"
    runs = []
    for rep in range(a.repeats):
        run = {"bench": "gateway_scale_out", "repeat": rep, "concurrency": a.concurrency}
        layouts = ["one_worker_2_threads", "two_workers_1_thread", "one_worker_2_threads_via_gateway"]
        for layout in layouts if rep % 2 == 0 else list(reversed(layouts)):
            procs = Procs(a.workdir)
            try:
                if layout == "one_worker_2_threads":
                    port = worker(procs, a, model, 2, "scale_one")
                elif layout == "one_worker_2_threads_via_gateway":
                    port = gateway(procs, a, [worker(procs, a, model, 2, "scale_one")], "cache_aware", "scale_gateway")
                else:
                    ports = [worker(procs, a, model, 1, f"scale_w{i}") for i in range(2)]
                    port = gateway(procs, a, ports, "cache_aware", "scale_gateway")
                bench_serve(a, port, model, f"scale_warm_{layout}", 100 + rep)  # warm-up, untimed
                flush(port)
                m = bench_serve(a, port, model, f"scale_{layout}", 200 + rep)
                run[layout + "_output_tok_s"] = m["output_throughput"]
                run[layout + "_median_ttft_ms"] = m["median_ttft_ms"]
            finally:
                procs.stop_all()
        run["ratio"] = run["two_workers_1_thread_output_tok_s"] / run["one_worker_2_threads_output_tok_s"]
        # What the gateway itself costs at this load: the same worker with and without it.
        run["gateway_ratio"] = run["one_worker_2_threads_via_gateway_output_tok_s"] / run["one_worker_2_threads_output_tok_s"]
        print(json.dumps(run), flush=True)
        runs.append(run)
    print(json.dumps({"bench": "gateway_scale_out", "summary": True,
                      "median_ratio": statistics.median(r["ratio"] for r in runs), "target": 0.9,
                      "median_gateway_ratio": statistics.median(r["gateway_ratio"] for r in runs),
                      "model": model_name,
                      "workload": f"{a.num_prompts} prompts x {a.input_len} in / {a.output_len} out"}), flush=True)


def prefix_dataset(path, groups, per_group, prefix_words, seed):
    rng = random.Random(seed)
    words = ["apple", "river", "stone", "cloud", "music", "paper", "light", "garden", "window", "silver"]
    systems = [" ".join(rng.choice(words) for _ in range(prefix_words)) for _ in range(groups)]
    with open(path, "w") as f:
        for q in range(per_group):
            for g in range(groups):  # interleaved: a group's requests are not sent together
                f.write(json.dumps({"prompt": f"System {g}: {systems[g]}\nQuestion {q}: what is {rng.random():.6f}?"})
                        + "\n")
    return path


def prefix(a):
    model = make_model(a.tessera, os.path.join(a.workdir, "small"), "--preset", "small", "--num-layers",
                       str(a.small_layers), "--dtype", "bf16")
    procs = Procs(a.workdir)
    runs = []
    try:
        ports = [worker(procs, a, model, 1, f"prefix_w{i}") for i in range(2)]
        gw = {policy: gateway(procs, a, ports, policy, f"prefix_{policy}") for policy in ("cache_aware", "round_robin")}
        for rep in range(a.repeats):
            run = {"bench": "gateway_prefix", "repeat": rep}
            for policy in ("cache_aware", "round_robin") if rep % 2 == 0 else ("round_robin", "cache_aware"):
                data = prefix_dataset(os.path.join(a.workdir, f"prefix_{rep}.jsonl"), a.prefix_groups, a.prefix_per_group,
                                      a.prefix_words, 500 + rep)
                flush(gw[policy])
                m = bench_serve(a, gw[policy], model, f"prefix_{policy}", 300 + rep, dataset=data)
                run[policy + "_median_ttft_ms"] = m["median_ttft_ms"]
                run[policy + "_mean_ttft_ms"] = m["mean_ttft_ms"]
                run[policy + "_output_tok_s"] = m["output_throughput"]
            run["ttft_ratio_rr_over_ca"] = run["round_robin_median_ttft_ms"] / run["cache_aware_median_ttft_ms"]
            print(json.dumps(run), flush=True)
            runs.append(run)
    finally:
        procs.stop_all()
    print(json.dumps({"bench": "gateway_prefix", "summary": True,
                      "workload": f"{a.prefix_groups} groups x {a.prefix_per_group} requests, ~{a.prefix_words}-word "
                                  f"shared prefix, {a.prefix_output_len} output tokens, concurrency {a.concurrency}",
                      **{k: statistics.median(r[k] for r in runs) for k in runs[0] if k not in ("bench", "repeat")}}),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["overhead", "scale_out", "prefix"])
    ap.add_argument("--overhead-requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--small-layers", type=int, default=8)
    ap.add_argument("--scale-model-path", help="scale_out on this model folder instead of the small preset "
                    "(e.g. the default model, whose weights stay in the caches)")
    ap.add_argument("--prefix-groups", type=int, default=8)
    ap.add_argument("--prefix-per-group", type=int, default=8)
    ap.add_argument("--prefix-words", type=int, default=600)
    ap.add_argument("--prefix-output-len", type=int, default=16)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    for name, fn in (("overhead", overhead), ("scale_out", scale_out), ("prefix", prefix)):
        if a.only in (None, name):
            fn(a)


if __name__ == "__main__":
    sys.exit(main())
