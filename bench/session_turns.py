#!/usr/bin/python3
"""A session's next turn after other traffic went through a capped prefix cache: plain
sessions, session references (--enable-session-radix-cache) and streaming sessions
(--enable-streaming-session).

For each mode one `tessera serve` (--max-cached-tokens CAP, so the cache must evict), then
per repeat: a session's first turn of P random prompt tokens, F other requests of P tokens
each (the flood that pushes the cache over its cap), and the session's next turn of N new
tokens, whose latency (one output token: its time to first token) and cached_tokens are
measured. Modes alternate within each repeat. Prints one JSON line per turn measured and one
summary line per mode (medians).

Usage: bench/session_turns.py --tessera build/tessera --model-path DIR [--repeats 3]
       [--prompt-len 1024] [--flood 3] [--new-tokens 16] [--cap 2048] [--threads 2]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from serve_support import free_port, stop_server, wait_healthy

MODES = {"plain": [], "session_radix_cache": ["--enable-session-radix-cache"],
         "streaming": ["--enable-streaming-session"]}


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def generate(port, ids, session=None, max_new_tokens=1):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                                  "ignore_eos": True}}
    if session:
        body["session_params"] = session
    start = time.perf_counter()
    answer = post(port, "/generate", body)
    return answer, time.perf_counter() - start


def one_repeat(port, mode, a, rng):
    ids = lambda n: [rng.randrange(1000, 30000) for _ in range(n)]  # noqa: E731
    sid = post(port, "/open_session", {"capacity_of_str_len": 100000, "streaming": mode == "streaming"})
    first, _ = generate(port, ids(a.prompt_len), {"id": sid}, max_new_tokens=4)
    for _ in range(a.flood):
        generate(port, ids(a.prompt_len))
    params = {"id": sid} if mode == "streaming" else {"id": sid, "rid": first["meta_info"]["id"]}
    second, seconds = generate(port, ids(a.new_tokens), params)
    post(port, "/close_session", {"session_id": sid})
    return {"ttft_s": round(seconds, 4), "cached_tokens": second["meta_info"]["cached_tokens"],
            "prompt_tokens": second["meta_info"]["prompt_tokens"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--flood", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--cap", type=int, default=2048, help="--max-cached-tokens of every server")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    servers, logs = {}, []
    try:
        for mode, flags in MODES.items():
            port = free_port()
            log = tempfile.NamedTemporaryFile(prefix=f"session_turns_{mode}_", suffix=".log", delete=False)
            logs.append(log.name)
            servers[mode] = (port, subprocess.Popen(
                [a.tessera, "serve", "--model-path", a.model_path, "--host", "127.0.0.1", "--port", str(port),
                 "--threads", str(a.threads), "--max-cached-tokens", str(a.cap), *flags],
                stdout=log, stderr=subprocess.STDOUT))
            # One server computes at a time: the others wait idle, loaded.
            wait_healthy(port, servers[mode][1])
        results = {mode: [] for mode in MODES}
        rng = random.Random(1)
        for r in range(a.repeats):
            for mode, (port, _) in servers.items():
                row = one_repeat(port, mode, a, rng)
                results[mode].append(row)
                print(json.dumps({"bench": "session_turn", "repeat": r, "mode": mode, **row}), flush=True)
        for mode, rows in results.items():
            print(json.dumps({"bench": "session_turn_summary", "mode": mode, "repeats": a.repeats,
                              "prompt_len": a.prompt_len, "flood": a.flood, "cap": a.cap,
                              "ttft_s_median": round(statistics.median(x["ttft_s"] for x in rows), 4),
                              "cached_tokens_median": statistics.median(x["cached_tokens"] for x in rows)}),
                  flush=True)
    finally:
        for port, server in servers.values():
            stop_server(server)
        for name in logs:
            os.unlink(name)


if __name__ == "__main__":
    sys.exit(main())
