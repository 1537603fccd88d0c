#!/usr/bin/python3
"""Soak: a `tessera serve` under a long mixed load with faults, then checked for leaks.

`--concurrency` clients send requests back to back for `--duration` seconds: prompts of
`--min-input`..`--max-input` token ids (half through /generate, half as text through
/v1/completions, streamed or not), `--min-output`..`--max-output` new tokens with ignore_eos.
A share of them misbehave on purpose:
  * dropped streams (`--drop-share`): the client closes the socket after a few chunks;
  * aborts (`--abort-share`): a non-streamed request whose client gives up after 0.2 s;
  * bad requests (`--bad-share`): cut-off JSON, a field of the wrong type, a negative length.
A request that was not one of those must succeed with exactly its max tokens; anything else
counts as a failure. Every `--sample-every` seconds the script records the resident memory
of the server's processes (the launcher and every rank) and the KV gauges of /metrics.

At the end, once idle: the KV pool must be whole (no slot held), and the resident memory
slope over the second half of the run (after the working set is reached) is reported in
MB per minute. With `--stall` (needs --tp 2 or more), rank 1 is then stopped with SIGSTOP
and one more request sent: the job must end on its own within the collective timeout
(`--dist-timeout`) plus a margin, with an error naming the stall, not hang.

Prints one JSON object. The server listens on 127.0.0.1 on a free port and is always
stopped.

Usage: bench/soak.py --tessera build/tessera [--model-path DIR] [--duration 1800]
       [--concurrency 32] [--tp 2] [--stall] [--dist-timeout 30] [--serve-arg=--flag ...]
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from serve_support import free_port, prometheus_values, stop_server, wait_healthy

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
         "every boxing match in the old town square near river bank").split()


def process_tree(root_pid):
    """The pid and all its descendants (the launcher and its rank processes)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def resident_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rank_pid(root_pid, rank):
    for pid in process_tree(root_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--internal-rank" in argv and argv[argv.index(b"--internal-rank") + 1] == str(rank).encode():
            return pid
    return None


def get_json(port, path, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def metrics(port):
    return prometheus_values(get_json(port, "/metrics")[1].decode())


class Client(threading.Thread):
    def __init__(self, a, port, seed, stats, lock, stop_at):
        super().__init__(daemon=True)
        self.a, self.port, self.rng, self.stats, self.lock, self.stop_at = a, port, random.Random(seed), stats, lock, stop_at

    def count(self, key, detail=None):
        with self.lock:
            self.stats[key] = self.stats.get(key, 0) + 1
            if detail and len(self.stats.setdefault("failure_samples", [])) < 10:
                self.stats["failure_samples"].append(detail)

    def body(self):
        a, rng = self.a, self.rng
        n_in = rng.randint(a.min_input, a.max_input)
        n_out = rng.randint(a.min_output, a.max_output)
        stream = rng.random() < 0.5
        if rng.random() < 0.5:
            path = "/generate"
            body = {"input_ids": [rng.randrange(10, a.vocab_limit) for _ in range(n_in)], "stream": stream,
                    "sampling_params": {"max_new_tokens": n_out, "temperature": 0.7, "ignore_eos": True}}
        else:
            path = "/v1/completions"
            body = {"model": a.served_model_name, "prompt": " ".join(rng.choice(WORDS) for _ in range(n_in)),
                    "max_tokens": n_out, "temperature": 0.7, "ignore_eos": True, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
        return path, body, n_out, stream

    def send(self, path, raw, timeout):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        return conn, conn.getresponse()

    def run(self):
        a, rng = self.a, self.rng
        while time.time() < self.stop_at:
            roll = rng.random()
            path, body, n_out, stream = self.body()
            try:
                if roll < a.bad_share:
                    # Cut-off JSON, a field of the wrong type, a negative length. (Unknown fields
                    # are not bad: OpenAI clients send extras, and tessera ignores them as SGLang.)
                    kind = rng.randrange(3)
                    wrong_type = ({**body, "sampling_params": {**body["sampling_params"], "temperature": "hot"}}
                                  if path == "/generate" else {**body, "temperature": "hot"})
                    raw = (b'{"prompt": [1, 2' if kind == 0 else
                           json.dumps(wrong_type if kind == 1 else
                                      {**body, "max_tokens": -3, "sampling_params": {"max_new_tokens": -3}}).encode())
                    conn, r = self.send(path, raw, 60)
                    r.read()
                    conn.close()
                    self.count("bad_rejected" if 400 <= r.status < 500 else "failed",
                               None if 400 <= r.status < 500 else f"bad request got {r.status}")
                elif roll < a.bad_share + a.drop_share:
                    body["stream"] = True
                    conn, r = self.send(path, json.dumps(body).encode(), 120)
                    for _ in range(rng.randint(1, 4)):
                        r.readline()
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    conn.close()
                    self.count("dropped")
                elif roll < a.bad_share + a.drop_share + a.abort_share:
                    body["stream"] = False
                    try:
                        conn, r = self.send(path, json.dumps(body).encode(), 0.2)
                        r.read()
                        conn.close()
                        self.count("abort_finished_first")
                    except (socket.timeout, TimeoutError):
                        self.count("aborted")
                else:
                    conn, r = self.send(path, json.dumps(body).encode(), 600)
                    data = r.read()
                    conn.close()
                    got = self.completion_tokens(data, stream, path)
                    if r.status == 200 and got == n_out:
                        self.count("ok")
                    else:
                        self.count("failed", f"{path} stream={stream}: status {r.status}, {got} of {n_out} tokens, "
                                             f"{data[-200:]!r}")
            except (OSError, http.client.HTTPException) as e:
                self.count("failed", f"{path}: {type(e).__name__}: {e}")

    @staticmethod
    def completion_tokens(data, stream, path):
        if not stream:
            j = json.loads(data)
            return j["meta_info"]["completion_tokens"] if path == "/generate" else j["usage"]["completion_tokens"]
        last = None
        for line in data.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[6:])
        if last is None:
            return -1
        if path == "/generate":
            return last["meta_info"]["completion_tokens"]
        return (last.get("usage") or {}).get("completion_tokens", -1)


def slope_mb_per_min(samples):
    """Least-squares slope of total resident MB over the second half of the run."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return 0.0
    ts = [s["t"] for s in half]
    ys = [s["rss_mb"] for s in half]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return 60.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else 0.0


def stall_rank(server, port, dist_timeout, log_path):
    """SIGSTOP rank 1, send a request: the job must end by itself, saying why."""
    pid = rank_pid(server.pid, 1)
    if pid is None:
        return {"stall": "no rank 1 process found"}
    os.kill(pid, signal.SIGSTOP)
    t0 = time.time()
    status = None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=dist_timeout + 60)
        conn.request("POST", "/generate", body=json.dumps({"input_ids": [11, 12, 13], "sampling_params": {
            "max_new_tokens": 8, "ignore_eos": True}}), headers={"Content-Type": "application/json"})
        status = conn.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        status = f"{type(e).__name__}"
    try:
        rc = server.wait(dist_timeout + 90)
    except subprocess.TimeoutExpired:
        rc = None
    ended_s = time.time() - t0
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    errors = [line.strip() for line in open(log_path, errors="replace") if " E]" in line][-3:]
    return {"stall_request_status": status, "stall_exit_code": rc, "stall_ended_after_s": round(ended_s, 1),
            "stall_errors": errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", help="default: make a `small` qwen3 model in a temporary folder")
    ap.add_argument("--served-model-name", default="soak")
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--min-input", type=int, default=16)
    ap.add_argument("--max-input", type=int, default=512)
    ap.add_argument("--min-output", type=int, default=8)
    ap.add_argument("--max-output", type=int, default=96)
    ap.add_argument("--vocab-limit", type=int, default=30000, help="token ids are drawn below this")
    ap.add_argument("--drop-share", type=float, default=0.15)
    ap.add_argument("--abort-share", type=float, default=0.05)
    ap.add_argument("--bad-share", type=float, default=0.05)
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--stall", action="store_true", help="stop rank 1 with SIGSTOP at the end (--tp >= 2)")
    ap.add_argument("--dist-timeout", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `tessera serve` argument (repeatable)")
    a = ap.parse_args()
    if a.stall and a.tp < 2:
        sys.exit("--stall stops rank 1: it needs --tp 2 or more")

    tmp = tempfile.mkdtemp(prefix="soak-")
    model = a.model_path
    if model is None:
        model = os.path.join(tmp, "model")
        subprocess.run([a.tessera, "make-model", "--arch", "qwen3", "--preset", "small", "--out", model], check=True,
                       stdout=subprocess.DEVNULL)
    port = free_port()
    log_path = os.path.join(tmp, "server.log")
    log = open(log_path, "w")
    server = subprocess.Popen([a.tessera, "serve", "--model-path", model, "--served-model-name", a.served_model_name,
                               "--host", "127.0.0.1", "--port", str(port), "--tp", str(a.tp),
                               "--dist-timeout", str(a.dist_timeout), *a.serve_arg], stdout=log, stderr=subprocess.STDOUT)
    result = {"duration_s": a.duration, "concurrency": a.concurrency, "tp": a.tp, "server_log": log_path}
    try:
        wait_healthy(port, server)
        tree = process_tree(server.pid)
        result["rss_start_mb"] = round(sum(resident_mb(p) for p in tree), 1)
        stats, lock = {}, threading.Lock()
        t0 = time.time()
        clients = [Client(a, port, a.seed * 1000 + i, stats, lock, t0 + a.duration) for i in range(a.concurrency)]
        for c in clients:
            c.start()
        samples = []
        while any(c.is_alive() for c in clients):
            time.sleep(min(a.sample_every, max(0.1, t0 + a.duration - time.time() + 1)))
            if server.poll() is not None:
                break
            m = metrics(port)
            samples.append({"t": round(time.time() - t0, 1),
                            "rss_mb": round(sum(resident_mb(p) for p in process_tree(server.pid)), 1),
                            "kv_running_mb": round(m.get("tessera:kv_running_bytes", 0) / 2**20, 1),
                            "kv_cached_mb": round(m.get("tessera:kv_cached_bytes", 0) / 2**20, 1),
                            "kv_touched_mb": round(m.get("tessera:kv_touched_bytes", 0) / 2**20, 1)})
        for c in clients:
            c.join(660)
        result["server_alive"] = server.poll() is None
        if result["server_alive"]:
            deadline = time.time() + 120
            while time.time() < deadline:
                info = json.loads(get_json(port, "/get_server_info")[1])["internal_states"][0]
                if info["num_running_reqs"] == 0 and info["num_queue_reqs"] == 0:
                    break
                time.sleep(1)
            m = metrics(port)
            result["kv_pool_whole"] = m["sglang:num_used_tokens"] == 0
            result["kv_at_end"] = {k: m[k] for k in ("sglang:num_used_tokens", "sglang:kv_available_tokens",
                                                     "sglang:kv_evictable_tokens")}
            result["weights_mb"] = round(m["tessera:weight_bytes"] / 2**20, 1)
        result["requests"] = {k: v for k, v in stats.items() if k != "failure_samples"}
        result["requests"]["total"] = sum(v for k, v in stats.items() if k != "failure_samples")
        result["failure_samples"] = stats.get("failure_samples", [])
        result["rss_end_mb"] = samples[-1]["rss_mb"] if samples else None
        result["rss_max_mb"] = max((s["rss_mb"] for s in samples), default=None)
        result["rss_slope_mb_per_min_second_half"] = round(slope_mb_per_min(samples), 2)
        result["samples"] = samples
        if a.stall and result["server_alive"]:
            result.update(stall_rank(server, port, a.dist_timeout, log_path))
    finally:
        stop_server(server)
        log.close()
    print(json.dumps(result))
    ok = (result.get("requests", {}).get("failed", 0) == 0 and result.get("kv_pool_whole", False)
          and (not a.stall or result.get("stall_exit_code") not in (None, 0)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
