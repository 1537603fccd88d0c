#!/usr/bin/python3
"""Start-up memory and load speed: `tessera serve` is started on a model and stopped once it
answers GET /health. Reported per process of the launch (the server and any rank
processes): its peak resident set (VmHWM) next to the weight bytes its start-up line names
("model loaded in S s: N MB of ... weights") and the KV memory it has touched by then (its
resident anonymous memory beyond the weights once healthy, an upper bound), so that
  ratio = peak RSS / (weights + KV touched)
is the start-up overhead the speed issue bounds at 1.1, and load time per GB of weights.
Medians over --repeats launches. Prints one JSON line per launch and a summary line.

Usage: bench/startup_rss.py --tessera build/tessera --model-path DIR [--repeats 3]
       [--threads 2] [--serve-arg=--tp-size --serve-arg=2 ...]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

from serve_support import free_port, stop_server, wait_healthy

LOADED = re.compile(r"model loaded in ([0-9.]+) s: ([0-9.]+) MB of")


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def process_tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def launch(a):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="startup_rss_", suffix=".log", delete=False)
    server = subprocess.Popen([a.tessera, "serve", "--model-path", a.model_path, "--host", "127.0.0.1", "--port",
                               str(port), "--threads", str(a.threads)] + a.serve_arg,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, server)
        procs = []
        for pid in process_tree(server.pid):
            procs.append({"pid": pid, "peak_rss_mb": status_kb(pid, "VmHWM") * 1.024e-3,
                          "rss_anon_mb": status_kb(pid, "RssAnon") * 1.024e-3})
        with open(log.name) as f:
            loaded = [LOADED.search(line) for line in f]
        loaded = [(float(m.group(1)), float(m.group(2))) for m in loaded if m]
    finally:
        stop_server(server)
        os.unlink(log.name)
    if not loaded:
        raise SystemExit("no 'model loaded in' line in the server's log")
    load_s = max(s for s, _ in loaded)
    weights_mb = sum(mb for _, mb in loaded)
    # The process holding the weights is the one with the largest anonymous memory.
    holder = max(procs, key=lambda p: p["rss_anon_mb"])
    kv_touched_mb = max(0.0, holder["rss_anon_mb"] - weights_mb)
    return {"bench": "startup_rss", "weights_mb": round(weights_mb, 1), "load_s": round(load_s, 2),
            "load_s_per_gb": round(load_s / (weights_mb / 1e3), 2),
            "peak_rss_mb": round(holder["peak_rss_mb"], 1), "rss_anon_when_healthy_mb": round(holder["rss_anon_mb"], 1),
            "kv_and_buffers_touched_mb": round(kv_touched_mb, 1),
            "ratio_peak_to_weights": round(holder["peak_rss_mb"] / weights_mb, 3),
            "ratio_peak_to_weights_plus_touched": round(holder["peak_rss_mb"] / (weights_mb + kv_touched_mb), 3),
            "processes": [{k: round(v, 1) if isinstance(v, float) else v for k, v in p.items()} for p in procs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra flag for tessera serve (repeatable)")
    a = ap.parse_args()
    rows = []
    for _ in range(a.repeats):
        rows.append(launch(a))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"bench": "startup_rss_summary", "repeats": a.repeats, "model_path": a.model_path,
                      "ratio_peak_to_weights_median": statistics.median(r["ratio_peak_to_weights"] for r in rows),
                      "ratio_peak_to_weights_plus_touched_median":
                          statistics.median(r["ratio_peak_to_weights_plus_touched"] for r in rows),
                      "load_s_per_gb_median": statistics.median(r["load_s_per_gb"] for r in rows),
                      "target": 1.1}), flush=True)


if __name__ == "__main__":
    main()
