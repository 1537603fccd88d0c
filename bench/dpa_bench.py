#!/usr/bin/python3
"""What DP-attention buys on the same ranks. Two measurements, printed as JSON lines:

  kv       KV capacity of a launch: the sum over its schedulers of max_total_num_tokens (as
           /get_server_info's internal_states report them), TP4 against TP4 with DPA4 on the
           same four ranks (--mem-fraction-static 0.8), for the small DeepSeek-V3 preset (MLA: plain TP keeps the whole
           latent on every rank, so DPA should hold ~attn_dp times the tokens) and the small
           Qwen3-MoE preset (GQA: plain TP splits the KV heads, so DPA should hold about the
           same).
  serve    `tessera bench serve` at concurrency 16 on the small Qwen3-MoE preset (bf16): TP4
           against TP4 with DPA4 (and DPA2), one thread per rank, alternately, several repeats;
           output throughput and throughput per core (four ranks share this machine's cores,
           so absolute speed-up is not the point: what each core delivers is).
  delayer  the same workload on TP2 with DPA2 (two ranks, one per core), with and without
           --enable-prefill-delayer, alternately: output throughput, median TTFT and TPOT, and
           the lockstep's idle steps (tessera:dp_attention_idle_steps_total, both groups), the
           steps a group spent waiting for another's work. --request-rate R spreads the
           arrivals (Poisson), which leaves one group prefilling while the other decodes.

Every server listens on 127.0.0.1 on a free port and is always stopped.

Usage: bench/dpa_bench.py --tessera build/tessera --workdir DIR [--repeats 3] [--only kv|serve|delayer]
"""

import argparse
import json
import os
import statistics
import http.client
import subprocess

from serve_support import free_port, run_bench_serve, stop_server, wait_healthy

TP4 = ["--tp", "4"]
DPA4 = ["--tp", "4", "--dp", "4", "--enable-dp-attention"]
DPA2 = ["--tp", "4", "--dp", "2", "--enable-dp-attention"]


def make_model(tessera, workdir, arch):
    out = os.path.join(workdir, arch + "_small")
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "small", "--dtype", "bf16", "--tokenizer",
                        "qwen3", "--seed", "3", "--out", out], check=True, capture_output=True)
    return out


class Server:
    def __init__(self, a, model, name, flags):
        self.port = free_port()
        self.log = open(os.path.join(a.workdir, name + ".log"), "w")
        self.proc = subprocess.Popen([a.tessera, "serve", "--model-path", model, "--port", str(self.port),
                                      "--threads-per-rank", "1", "--random-seed", "1", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def __enter__(self):
        wait_healthy(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        stop_server(self.proc)
        self.log.close()

    def get(self, path):
        return json.loads(self.get_text(path))

    def get_text(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path)
        body = conn.getresponse().read()
        conn.close()
        return body.decode()

    def counter(self, name):
        """A counter summed over every group's sample in /metrics."""
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.get_text("/metrics").splitlines()
                   if line.startswith(name + "{"))


def kv(a):
    for arch in ("deepseek-v3", "qwen3-moe"):
        model = make_model(a.tessera, a.workdir, arch)
        row = {"bench": "dpa_kv_capacity", "model": arch + " small", "mem_fraction_static": a.mem_fraction}
        for name, flags in (("tp4", TP4), ("tp4_dpa4", DPA4)):
            # A fixed budget: SGLang's default reserve (sized for large GPUs) leaves a 6 GB rank
            # so little KV room that the attention weights DPA replicates would dominate it.
            with Server(a, model, f"kv_{arch}_{name}", flags + ["--mem-fraction-static", str(a.mem_fraction)]) as s:
                states = s.get("/get_server_info")["internal_states"]
                row[name + "_schedulers"] = len(states)
                row[name + "_max_total_num_tokens"] = sum(st["max_total_num_tokens"] for st in states)
        row["ratio_dpa_over_tp"] = row["tp4_dpa4_max_total_num_tokens"] / row["tp4_max_total_num_tokens"]
        print(json.dumps(row), flush=True)


def bench_serve(a, port, model, name, seed, request_rate="inf"):
    workload = ["--num-prompts", str(a.num_prompts), "--random-input-len", str(a.input_len), "--random-output-len",
                str(a.output_len), "--random-range-ratio", "1"]
    return run_bench_serve(a.tessera, port, model, os.path.join(a.workdir, name + ".jsonl"), a.concurrency, seed,
                           workload, request_rate)


def serve(a):
    model = make_model(a.tessera, a.workdir, "qwen3-moe")
    cores = os.cpu_count()
    layouts = (("tp4", TP4), ("tp4_dpa4", DPA4), ("tp4_dpa2", DPA2))
    runs = {name: [] for name, _ in layouts}
    for rep in range(a.repeats):
        for name, flags in (layouts if rep % 2 == 0 else tuple(reversed(layouts))):
            with Server(a, model, f"serve_{name}_{rep}", flags) as s:
                r = bench_serve(a, s.port, model, f"serve_{name}_{rep}", seed=rep + 1)
            row = {"bench": "dpa_serve", "repeat": rep, "layout": name, "output_throughput": r["output_throughput"],
                   "output_throughput_per_core": r["output_throughput"] / cores,
                   "median_ttft_ms": r["median_ttft_ms"], "median_tpot_ms": r["median_tpot_ms"]}
            print(json.dumps(row), flush=True)
            runs[name].append(r["output_throughput"])
    summary = {"bench": "dpa_serve", "summary": True, "concurrency": a.concurrency, "cores": cores,
               "ranks": 4, "threads_per_rank": 1}
    for name, xs in runs.items():
        summary[name + "_median_output_throughput"] = statistics.median(xs)
        summary[name + "_median_per_core"] = statistics.median(xs) / cores
    summary["dpa4_over_tp4"] = summary["tp4_dpa4_median_output_throughput"] / summary["tp4_median_output_throughput"]
    summary["dpa2_over_tp4"] = summary["tp4_dpa2_median_output_throughput"] / summary["tp4_median_output_throughput"]
    print(json.dumps(summary), flush=True)


def delayer(a):
    model = make_model(a.tessera, a.workdir, "qwen3-moe")
    dpa2 = ["--tp", "2", "--dp", "2", "--enable-dp-attention"]
    layouts = (("dpa2", dpa2), ("dpa2_delayer", dpa2 + ["--enable-prefill-delayer"]))
    runs = {name: [] for name, _ in layouts}
    for rep in range(a.repeats):
        for name, flags in (layouts if rep % 2 == 0 else tuple(reversed(layouts))):
            with Server(a, model, f"delayer_{name}_{rep}", flags) as s:
                r = bench_serve(a, s.port, model, f"delayer_{name}_{rep}", seed=rep + 1, request_rate=a.request_rate)
                idle = s.counter("tessera:dp_attention_idle_steps_total")
                steps = s.counter("tessera:dp_attention_steps_total")
            row = {"bench": "dpa_prefill_delayer", "repeat": rep, "layout": name,
                   "output_throughput": r["output_throughput"], "median_ttft_ms": r["median_ttft_ms"],
                   "median_tpot_ms": r["median_tpot_ms"], "idle_steps": idle, "steps": steps}
            print(json.dumps(row), flush=True)
            runs[name].append(row)
    summary = {"bench": "dpa_prefill_delayer", "summary": True, "concurrency": a.concurrency,
               "request_rate": a.request_rate,
               "num_prompts": a.num_prompts, "input_len": a.input_len, "output_len": a.output_len}
    for name, rows in runs.items():
        for key in ("output_throughput", "median_ttft_ms", "median_tpot_ms", "idle_steps", "steps"):
            summary[f"{name}_median_{key}"] = statistics.median(row[key] for row in rows)
    summary["delayer_over_plain_throughput"] = (summary["dpa2_delayer_median_output_throughput"] /
                                                summary["dpa2_median_output_throughput"])
    print(json.dumps(summary), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=["kv", "serve", "delayer"])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--mem-fraction", type=float, default=0.8)
    ap.add_argument("--num-prompts", type=int, default=48)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--request-rate", default="inf",
                    help="delayer: requests per second (Poisson arrivals), or inf: all at once")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    a.tessera = os.path.abspath(a.tessera)
    if a.only in (None, "kv"):
        kv(a)
    if a.only in (None, "serve"):
        serve(a)
    if a.only in (None, "delayer"):
        delayer(a)


if __name__ == "__main__":
    main()
