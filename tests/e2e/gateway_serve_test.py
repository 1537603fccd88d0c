#!/usr/bin/python3
"""`tessera gateway` in front of three `tessera serve` workers (tiny Qwen3, f32), as a user
drives it over HTTP:

  cache        cache_aware keeps eight requests sharing a 200-token prefix on one worker,
               and that worker's answers report the prefix as cached (cached_tokens).
  client 4xx   a request over the context length is the worker's 400, passed on; the worker
               stays healthy with no failure counted.
  kill         one worker is killed while twelve streams run: every request ends (finished,
               or an error event / HTTP error naming the failure), none hangs; requests
               after it succeed on the others; the worker is marked unhealthy.
  restart      the worker restarted on its port is healthy again and gets traffic.
  add          a fourth worker added through POST /add_worker receives requests.
  metrics      /metrics counts retries and cache hits.

Usage: gateway_serve_test.py --tessera PATH --workdir DIR
Exit 0 pass, 1 fail.
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from e2e_support import Checks, call, free_port, make_tiny_model, prometheus_values, stop_server, wait_ready

check = Checks()
PREFIX = "Read this: " + " ".join(["apple", "river", "stone", "cloud"] * 50)  # ~200 tokens


def completion(port, prompt, max_tokens=4):
    return call(port, "POST", "/v1/completions",
                {"model": "model", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})


def stream_outcome(port, prompt):
    """'finished', 'error: ...' (an error event or status) or 'hung'."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "model": "model", "prompt": prompt, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
            "stream": True}).encode(), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return f"error: HTTP {r.status} {r.read().decode()[:200]}"
        finished = False
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if "error" in event:
                return "error: " + event["error"]["message"]
            if event["choices"][0].get("finish_reason"):
                finished = True
        conn.close()
        return "finished" if finished else "error: the stream ended without a finish reason"
    except TimeoutError:
        return "hung"
    except OSError as e:
        return f"error: {e}"


def workers(gport):
    _, data = call(gport, "GET", "/workers")
    return {w["url"]: w for w in json.loads(data)["workers"]}


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    model = make_tiny_model(a.tessera, a.workdir)
    logs = []
    procs = {}

    def start_worker(port):
        log = open(os.path.join(a.workdir, f"worker_{port}.log"), "a")
        logs.append(log)
        proc = subprocess.Popen([a.tessera, "serve", "--model-path", model, "--port", str(port),
                                 "--threads-per-rank", "1", "--context-length", "2048"],
                                stdout=log, stderr=subprocess.STDOUT)
        procs[port] = proc
        return proc

    ports = [free_port() for _ in range(4)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    gport = free_port()
    glog = open(os.path.join(a.workdir, "gateway.log"), "w")
    logs.append(glog)
    gateway = None
    try:
        # The gateway starts first, while its workers are still down.
        gateway = subprocess.Popen([a.tessera, "gateway", "--port", str(gport), "--worker-urls", *urls[:3],
                                    "--policy", "cache_aware", "--health-check-interval-secs", "1",
                                    "--load-poll-interval-ms", "200"], stdout=glog, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        check("gateway up before its workers", gateway.poll() is None)
        status, data = completion(gport, "hello")
        check("no healthy worker yet: 503", status == 503 and "no healthy worker" in data, f"{status} {data[:200]}")
        for p in ports[:3]:
            start_worker(p)
        for p in ports[:3]:
            check(f"worker {p} ready", wait_ready(p, procs[p]))
        check("all three admitted", wait_for(lambda: all(w["healthy"] for w in workers(gport).values()), 20),
              workers(gport))

        # Cache-aware: a shared 200-token prefix stays on one worker, which has it cached.
        cached = []
        before = {u: w["requests"] for u, w in workers(gport).items()}
        for i in range(8):
            status, data = completion(gport, PREFIX + f" question {i}?")
            check(f"shared-prefix request {i}", status == 200, f"{status} {data[:200]}")
            if status == 200:
                cached.append(json.loads(data)["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
        after = {u: w["requests"] for u, w in workers(gport).items()}
        moved = sorted(after[u] - before[u] for u in after)
        check("shared prefix stays on one worker", moved == [0, 0, 8], moved)
        check("its answers report the prefix cached", len(cached) == 8 and min(cached[1:]) >= 190, cached)

        # A client's error is passed on and is not the worker's fault.
        status, data = completion(gport, "hi", max_tokens=100000)
        check("over-long request: the worker's 400", status == 400, f"{status} {data[:200]}")
        check("no failure counted for a 400", all(w["failures"] == 0 and w["healthy"] for w in workers(gport).values()),
              workers(gport))

        # Kill one worker while twelve streams run.
        outcomes = []
        threads = [threading.Thread(target=lambda i=i: outcomes.append(stream_outcome(gport, f"story {i}:")))
                   for i in range(12)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        victim = ports[1]
        procs[victim].kill()
        procs[victim].wait()
        for t in threads:
            t.join(90)
        check("every stream ended", len(outcomes) == 12 and "hung" not in outcomes, outcomes)
        check("each ended finished or with a named error",
              all(o == "finished" or o.startswith("error: ") and len(o) > 10 for o in outcomes), outcomes)
        ok_after = [completion(gport, f"after the kill {i}")[0] for i in range(6)]
        check("requests after the kill succeed elsewhere", ok_after == [200] * 6, ok_after)
        check("the dead worker is marked unhealthy",
              wait_for(lambda: not workers(gport)[urls[1]]["healthy"], 15), workers(gport)[urls[1]])

        # Restarted on its port, it comes back and gets traffic.
        start_worker(victim)
        check("restarted worker ready", wait_ready(victim, procs[victim]))
        check("restarted worker readmitted", wait_for(lambda: workers(gport)[urls[1]]["healthy"], 20),
              workers(gport)[urls[1]])
        before = workers(gport)[urls[1]]["requests"]
        for i in range(6):
            completion(gport, f"fresh topic number {i} " * 3)
        check("restarted worker gets traffic", workers(gport)[urls[1]]["requests"] > before)

        # A worker added at run time.
        start_worker(ports[3])
        check("fourth worker ready", wait_ready(ports[3], procs[ports[3]]))
        status, data = call(gport, "POST", f"/add_worker?url={urls[3]}")
        check("add_worker", status == 200, data)
        check("fourth worker admitted", wait_for(lambda: workers(gport).get(urls[3], {}).get("healthy"), 15))
        for i in range(6):
            completion(gport, f"another new subject {i} " * 3)
        check("added worker gets traffic", workers(gport)[urls[3]]["requests"] > 0, workers(gport)[urls[3]])

        _, text = call(gport, "GET", "/metrics")
        values = prometheus_values(text)
        check("metrics: cache hits counted", values.get("sgl_router_cache_hits_total", 0) >= 7, text[:300])
        check("metrics: 4 active workers", values.get("sgl_router_active_workers") == 4, text[:300])
    finally:
        if gateway is not None:
            stop_server(gateway)
        for p in procs.values():
            stop_server(p)
        for log in logs:
            log.close()
    check("gateway stops cleanly", gateway is not None and gateway.returncode == 0, gateway and gateway.returncode)
    print(check.summary())
    if check.failures:
        with open(os.path.join(a.workdir, "gateway.log")) as f:
            print("--- gateway.log (tail)\n" + "".join(f.readlines()[-40:]))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
