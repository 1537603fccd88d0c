#!/usr/bin/python3
"""Serving throughput against the machine's physical bound for the same workload.

One `tessera serve` on a dense model; `tessera bench serve` sends a workload of N requests of
P prompt and O output tokens (exact lengths, random prompts, empty prefix cache) at
concurrency C. The bound for that workload on this machine, from the same run's measured
read bandwidth B and bf16 multiply-add peak F (bench_peaks):
  prefill  every prompt token's linear layers at peak, plus causal attention (P²/2 scores
           and weighted values per head and layer), the LM head once per request;
  decode   N·O/C steps, each max(weights read once / B, C tokens' linear FLOPs / F) plus the
           KV rows of every running sequence at the mean context P + O/2, read at B.
  bound    N·O output tokens / (prefill + decode seconds).
The server is measured as SGLang's bench_serving measures it (output tokens per second,
the first request sent to the last token received), so its ratio to the bound is what
batching, overlap and mixed chunks leave on the table.

Workloads (repeatable --workload C:P:O:N; the defaults are the speed issue's two):
  16:128:128:64     16 concurrent, 128 prompt / 128 output tokens
  64:1024:128:64    64 concurrent, 1024-token prompts
Each repeat runs every workload once (alternating), with bench_peaks before it; the summary
has medians over repeats. Prints one JSON line per run and one summary line per workload.

Usage: bench/serve_bound.py --tessera build/tessera --model-path DIR [--repeats 3] [--threads 2]
       [--workload 16:128:128:64 ...] [--serve-arg=--enable-mixed-chunk ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from serve_support import flush_cache, free_port, run_bench_serve, stop_server, wait_healthy


def model_costs(config_path):
    """Linear parameters per token (body, LM head), attention width and KV bytes per token of a
    dense decoder, from its config.json (bf16 weights and KV)."""
    with open(config_path) as f:
        c = json.load(f)
    h, layers, inter = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    heads, kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    head_dim = c.get("head_dim", h // heads)
    if "num_experts" in c or "n_routed_experts" in c or "kv_lora_rank" in c:
        sys.exit("serve_bound.py models dense decoders only (the bound counts every weight per token)")
    body = layers * (h * (heads + 2 * kv_heads) * head_dim + heads * head_dim * h + 3 * h * inter)
    head = c["vocab_size"] * h
    return {"body_params": body, "head_params": head, "layers": layers, "q_width": heads * head_dim,
            "kv_bytes_per_token": layers * 2 * kv_heads * head_dim * 2}


def bound_tokens_per_s(m, peaks, concurrency, prompt, output, n):
    bw = peaks["read_bandwidth_gb_per_s"] * 1e9
    peak = peaks["peak_bf16_gflops"] * 1e9
    attention_flops = m["layers"] * 2 * prompt * prompt * m["q_width"]  # QKᵀ and PV, causal half each
    prefill_s = n * (2 * m["body_params"] * prompt + attention_flops + 2 * m["head_params"]) / peak
    weights = 2 * (m["body_params"] + m["head_params"])
    step_s = max(weights / bw, concurrency * 2 * (m["body_params"] + m["head_params"]) / peak)
    step_s += concurrency * (prompt + output / 2) * m["kv_bytes_per_token"] / bw
    decode_s = (n * output / concurrency) * step_s
    return n * output / (prefill_s + decode_s), prefill_s, decode_s


def measure_peaks(peaks_bin, threads):
    p = subprocess.run([peaks_bin, "--threads", str(threads)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--peaks", default=None, help="bench_peaks binary (default: beside tessera, bench/bench_peaks)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workload", action="append", default=[], help="C:P:O:N (repeatable)")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra flag for tessera serve (repeatable)")
    a = ap.parse_args()
    workloads = [tuple(int(x) for x in w.split(":")) for w in (a.workload or ["16:128:128:64", "64:1024:128:64"])]
    for w in workloads:
        if len(w) != 4 or min(w) < 1:
            sys.exit(f"--workload wants C:P:O:N with positive numbers, got {w}")
    peaks_bin = a.peaks or os.path.join(os.path.dirname(os.path.abspath(a.tessera)), "bench", "bench_peaks")
    costs = model_costs(os.path.join(a.model_path, "config.json"))

    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="serve_bound_", suffix=".log", delete=False)
    server = subprocess.Popen([a.tessera, "serve", "--model-path", a.model_path, "--host", "127.0.0.1", "--port",
                               str(port), "--threads", str(a.threads)] + a.serve_arg,
                              stdout=log, stderr=subprocess.STDOUT)
    out_file = log.name + ".jsonl"
    results = {w: [] for w in workloads}
    try:
        wait_healthy(port, server)

        def run(w, seed):
            concurrency, prompt, output, n = w
            flush_cache(port)
            return run_bench_serve(a.tessera, port, a.model_path, out_file, concurrency, seed,
                                   ["--num-prompts", str(n), "--random-input-len", str(prompt),
                                    "--random-output-len", str(output), "--random-range-ratio", "1"])

        # Warm-up, not reported: the largest workload once touches the KV memory it will use.
        run(max(workloads, key=lambda w: w[0] * (w[1] + w[2])), seed=999)
        for r in range(a.repeats):
            for i, w in enumerate(workloads):
                peaks = measure_peaks(peaks_bin, a.threads)
                got = run(w, seed=1000 + r * len(workloads) + i)
                bound, prefill_s, decode_s = bound_tokens_per_s(costs, peaks, *w)
                ratio = got["output_throughput"] / bound
                results[w].append((ratio, got["output_throughput"], bound))
                print(json.dumps({"bench": "serve_bound", "repeat": r, "concurrency": w[0], "prompt_len": w[1],
                                  "output_len": w[2], "num_prompts": w[3], "completed": got["completed"],
                                  "output_tok_s": round(got["output_throughput"], 2),
                                  "bound_output_tok_s": round(bound, 2), "ratio_to_bound": round(ratio, 3),
                                  "bound_prefill_s": round(prefill_s, 2), "bound_decode_s": round(decode_s, 2),
                                  "median_ttft_ms": round(got["median_ttft_ms"], 1),
                                  "median_tpot_ms": round(got["median_tpot_ms"], 2),
                                  "read_bandwidth_gb_per_s": round(peaks["read_bandwidth_gb_per_s"], 1),
                                  "peak_bf16_gflops": round(peaks["peak_bf16_gflops"], 1)}), flush=True)
        for w, rows in results.items():
            print(json.dumps({"bench": "serve_bound_summary", "concurrency": w[0], "prompt_len": w[1],
                              "output_len": w[2], "num_prompts": w[3], "repeats": a.repeats,
                              "ratio_per_repeat": [round(x[0], 3) for x in rows],
                              "ratio_median": round(statistics.median(x[0] for x in rows), 3),
                              "output_tok_s_median": round(statistics.median(x[1] for x in rows), 2),
                              "bound_output_tok_s_median": round(statistics.median(x[2] for x in rows), 2),
                              "serve_args": a.serve_arg}), flush=True)
    finally:
        stop_server(server)
        os.unlink(log.name)
        if os.path.exists(out_file):
            os.unlink(out_file)


if __name__ == "__main__":
    main()
