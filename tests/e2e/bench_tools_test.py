#!/usr/bin/python3
"""`tessera bench serve` against `tessera serve` on a tiny model with the real Qwen3
tokenizer (every backend; the JSON line has every field; the prompts are exactly
--random-input-len tokens by the server's own count; failures are counted), and
`tessera bench one-batch` on the same model.

Usage: bench_tools_test.py --tessera PATH --workdir DIR
"""

import argparse
import json
import os
import subprocess
import sys

from e2e_support import Checks, free_port, make_tiny_model, stop_server, wait_ready

check = Checks()

SERVE_FIELDS = ["backend", "base_url", "model", "dataset", "num_prompts", "request_rate", "max_concurrency",
                "random_input_len", "random_output_len", "random_range_ratio", "seed", "completed", "failed",
                "errors", "duration_s", "request_throughput", "input_throughput", "output_throughput",
                "total_input_tokens", "total_output_tokens"] + [
                    f"{stat}_{metric}" for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")
                    for stat in ("mean", "median", "p90", "p99")]
ONE_BATCH_FIELDS = ["batch_size", "input_len", "output_len", "prefill_latency_s", "prefill_throughput_tok_s",
                    "median_decode_latency_s", "decode_throughput_tok_s", "total_latency_s", "model", "dtype",
                    "threads"]





def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_serve_line(name, j, n, in_len, out_len):
    missing = [k for k in SERVE_FIELDS if k not in j]
    check(f"{name}: every field", not missing, f"missing {missing}")
    check(f"{name}: all completed", j.get("completed") == n and j.get("failed") == 0,
          f"completed {j.get('completed')} failed {j.get('failed')} errors {j.get('errors')}")
    check(f"{name}: input tokens", j.get("total_input_tokens") == n * in_len, str(j.get("total_input_tokens")))
    check(f"{name}: output tokens (ignore_eos)", j.get("total_output_tokens") == n * out_len,
          str(j.get("total_output_tokens")))
    positive = [k for k in SERVE_FIELDS if k.startswith(("mean_", "median_", "p90_", "p99_"))
                or k.endswith("throughput") or k == "duration_s"]
    bad = [k for k in positive if not (isinstance(j.get(k), (int, float)) and j[k] > 0)]
    check(f"{name}: positive latencies and throughputs", not bad, f"{bad}")
    check(f"{name}: percentiles ordered",
          all(j[f"median_{m}"] <= j[f"p90_{m}"] <= j[f"p99_{m}"] + 1e-9
              for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms")))


def bench_serve_checks(tessera, model, port, workdir):
    url = f"http://127.0.0.1:{port}"
    out = os.path.join(workdir, "serve.jsonl")
    if os.path.exists(out):
        os.remove(out)
    base = [tessera, "bench", "serve", "--base-url", url, "--output-file", out, "--seed", "3"]

    # OpenAI completions, 8 prompts of exactly 32 tokens, 8 tokens each, 4 at a time.
    r = run(base + ["--backend", "openai", "--model-path", model, "--num-prompts", "8", "--random-input-len", "32",
                    "--random-output-len", "8", "--random-range-ratio", "1", "--request-rate", "inf",
                    "--max-concurrency", "4", "--warmup-requests", "1",
                    "--extra-request-body", '{"temperature": 0, "top_p": 1.0}'])
    check("bench serve openai exits 0", r.returncode == 0, r.stderr[-2000:])
    check("bench serve prints the summary", "Serving Benchmark Result" in r.stdout and "Median TTFT" in r.stdout,
          r.stdout[-1000:])
    check("bench serve draws a progress bar on stderr", "8/8" in r.stderr, r.stderr[-500:])
    lines = read_lines(out)
    check("one JSON line per run", len(lines) == 1, f"{len(lines)} lines")
    if lines:
        j = lines[0]
        print("bench serve JSON:", json.dumps(j))
        check_serve_line("openai", j, 8, 32, 8)
        check("openai: the server counted exactly 32 prompt tokens each",
              j.get("total_input_tokens_reported") == 8 * 32, str(j.get("total_input_tokens_reported")))
        check("openai: config echoed", j["backend"] == "openai" and j["num_prompts"] == 8 and
              j["request_rate"] == "inf" and j["max_concurrency"] == 4 and j["random_input_len"] == 32 and
              j["random_output_len"] == 8 and j["seed"] == 3 and j["base_url"] == url and j["dataset"] == "random",
              json.dumps(j)[:400])
        check("openai: model from /v1/models (the folder's name)", j["model"] == os.path.basename(model), j["model"])
        check("openai: at most 4 in flight", j.get("max_in_flight", 0) <= 4, str(j.get("max_in_flight")))

    # Native /generate at a Poisson rate, tokenizer found through /v1/models (the model path).
    r = run(base + ["--backend", "tessera-native", "--num-prompts", "4", "--random-input-len", "32",
                    "--random-output-len", "8", "--random-range-ratio", "1", "--request-rate", "20",
                    "--disable-tqdm"])
    check("bench serve tessera-native exits 0", r.returncode == 0, r.stderr[-2000:])
    lines = read_lines(out)
    check("a second line appended", len(lines) == 2, f"{len(lines)} lines")
    if len(lines) == 2:
        check_serve_line("tessera-native", lines[1], 4, 32, 8)
        check("tessera-native: request_rate echoed", lines[1]["request_rate"] == 20, str(lines[1]["request_rate"]))

    # Chat completions.
    r = run(base + ["--backend", "openai-chat", "--model-path", model, "--num-prompts", "4",
                    "--random-input-len", "32", "--random-output-len", "8", "--random-range-ratio", "1"])
    check("bench serve openai-chat exits 0", r.returncode == 0, r.stderr[-2000:])
    lines = read_lines(out)
    if len(lines) == 3:
        check_serve_line("openai-chat", lines[2], 4, 32, 8)
    else:
        check("a third line appended", False, f"{len(lines)} lines")

    # Every request rejected by the server (bad max_tokens): counted as failures with the error.
    r = run(base + ["--backend", "openai", "--model-path", model, "--num-prompts", "3", "--random-input-len", "8",
                    "--random-output-len", "4", "--warmup-requests", "0",
                    "--extra-request-body", '{"max_tokens": -5}'])
    check("all-failed run exits 1", r.returncode == 1, f"rc {r.returncode} {r.stderr[-1000:]}")
    lines = read_lines(out)
    if len(lines) == 4:
        j = lines[3]
        check("failures counted", j["failed"] == 3 and j["completed"] == 0, json.dumps(j)[:300])
        check("failures carry the server's error", j["errors"] and "HTTP 400" in j["errors"][0], str(j["errors"]))
    else:
        check("a fourth line appended", False, f"{len(lines)} lines")

    # A warm-up that fails stops the run with the error.
    r = run(base + ["--backend", "openai", "--model-path", model, "--num-prompts", "2", "--random-input-len", "8",
                    "--random-output-len", "4", "--extra-request-body", '{"max_tokens": -5}'])
    check("failed warm-up exits non-zero with the error", r.returncode != 0 and "warm-up" in r.stderr,
          r.stderr[-1000:])


def one_batch_checks(tessera, model, workdir):
    out = os.path.join(workdir, "one_batch.jsonl")
    if os.path.exists(out):
        os.remove(out)
    r = run([tessera, "bench", "one-batch", "--model-path", model, "--batch-size", "2", "--input-len", "16",
             "--output-len", "4", "--threads", "1", "--output-file", out])
    check("bench one-batch exits 0", r.returncode == 0, r.stderr[-2000:])
    check("bench one-batch prints prefill and decode", "Prefill." in r.stdout and "Decode." in r.stdout,
          r.stdout[-1000:])
    lines = read_lines(out)
    check("bench one-batch appends one JSON line", len(lines) == 1, f"{len(lines)} lines")
    if lines:
        j = lines[0]
        print("bench one-batch JSON:", json.dumps(j))
        missing = [k for k in ONE_BATCH_FIELDS if k not in j]
        check("one-batch: every field", not missing, f"missing {missing}")
        check("one-batch: config", j.get("batch_size") == 2 and j.get("input_len") == 16 and
              j.get("output_len") == 4 and j.get("threads") == 1 and j.get("dtype") == "f32" and
              j.get("model") == model, json.dumps(j))
        bad = [k for k in ("prefill_latency_s", "prefill_throughput_tok_s", "median_decode_latency_s",
                           "decode_throughput_tok_s", "total_latency_s") if not j.get(k, 0) > 0]
        check("one-batch: positive timings", not bad, f"{bad}")
        check("one-batch: prefill throughput = B*I / latency",
              abs(j["prefill_throughput_tok_s"] * j["prefill_latency_s"] - 32) < 1e-6 * 32)
        check("one-batch: decode throughput = B / median step",
              abs(j["decode_throughput_tok_s"] * j["median_decode_latency_s"] - 2) < 1e-6 * 2)
        check("one-batch: 3 decode steps", j.get("decode_steps") == 3, str(j.get("decode_steps")))
    r = run([tessera, "bench", "one-batch", "--model-path", model, "--batch-size", "1", "--input-len", "4",
             "--output-len", "2", "--tp", "2"])
    check("one-batch --tp 2 fails loudly", r.returncode == 2 and "tensor parallelism" in r.stderr,
          f"rc {r.returncode} {r.stderr[-500:]}")
    r = run([tessera, "bench", "one-batch", "--model-path", model, "--batch-size", "1", "--input-len", "4",
             "--output-len", "2", "--pp-size", "2"])
    check("one-batch --pp-size 2 fails loudly", r.returncode == 2 and "pipeline parallelism" in r.stderr,
          f"rc {r.returncode} {r.stderr[-500:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    tessera = os.path.abspath(a.tessera)
    os.makedirs(a.workdir, exist_ok=True)
    model = make_tiny_model(tessera, a.workdir, "qwen3")
    port = free_port()
    log_path = os.path.join(a.workdir, "server.log")
    log = open(log_path, "w")
    # No --served-model-name: /v1/models lists the model path, where bench serve finds the tokenizer.
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--port", str(port),
                               "--max-total-tokens", "16384", "--threads", "1", "--random-seed", "1"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(port, server):
            print(open(log_path).read()[-3000:])
            print("server did not become ready")
            return 1
        bench_serve_checks(tessera, model, port, a.workdir)
    finally:
        stop_server(server)
        log.close()
    one_batch_checks(tessera, model, a.workdir)
    print(check.summary())
    if check.failures:
        print(open(log_path).read()[-3000:])
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
