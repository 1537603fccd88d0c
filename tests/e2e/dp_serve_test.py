#!/usr/bin/python3
"""`tessera serve --dp-size 2`, as a user drives it over HTTP (tiny Qwen3, f32):

  equal        greedy outputs through the front equal one replica's (a --dp-size 1 launch);
  spread       round_robin puts requests on both replicas; /get_server_info has both
               replicas' internal_states and dp_size 2; /get_load one entry per DP rank;
               /metrics labels each replica's samples with dp_rank; data_parallel_rank in a
               request picks its replica.
  sessions     /open_session through the front opens the session on one replica; each turn
               (session_params) and the close go there, whatever round_robin says, so a turn
               continuing the last one answers what the whole conversation answers at once.
  balance      --load-balance-method total_requests: six concurrent streams split 3 / 3;
               total_tokens sends a request to the replica with fewer prompt tokens in
               flight even when it has more requests in flight.
  tp2          --dp-size 2 --tp 2 (two replicas of two TP ranks, four processes): the same tokens.
  two nodes    --dp-size 2 --nnodes 2: one replica per "node" (two launches on loopback that
               differ only in --node-rank); the front on node 0 routes to node 1's replica.
  abort        /abort_request through the front ends matching requests on both replicas.
  death        SIGKILL of replica 1's rank process stops the whole launch (non-zero exit,
               front port closed) within 30 s, as a rank death does in one replica.

Usage: dp_serve_test.py --tessera PATH --workdir DIR
Exit 0 pass, 1 fail.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from e2e_support import Checks, call, free_port, make_tiny_model, stop_server, wait_ready

check = Checks()
PROMPTS = [[3, 14, 15, 92, 65, 35], [11, 22, 33, 44], [500, 400, 300, 200, 100, 50], [7, 7, 7, 1]]


def greedy(port, prompt, extra=None):
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    body.update(extra or {})
    status, data = call(port, "POST", "/generate", body)
    return json.loads(data)["output_ids"] if status == 200 else f"HTTP {status}: {data}"


def launch(tessera, model, port, log_path, *flags):
    log = open(log_path, "w")
    proc = subprocess.Popen([tessera, "serve", "--model-path", model, "--port", str(port), "--threads-per-rank", "1",
                             "--random-seed", "1", *flags], stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def check_sessions(port):
    """Four turns of one session through the front, each continuing the last."""
    status, data = call(port, "POST", "/open_session", {"capacity_of_str_len": 100})
    check("a session opens through the front", status == 200, data)
    if status != 200:
        return
    sid = json.loads(data)
    before = replica_requests(port)
    history, rid, ok = [], None, True
    for turn, prompt in enumerate(PROMPTS):
        params = {"id": sid, **({"rid": rid} if rid else {})}
        status, data = call(port, "POST", "/generate", {"input_ids": prompt, "session_params": params,
                                                        "sampling_params": {"max_new_tokens": 8, "temperature": 0,
                                                                            "ignore_eos": True}})
        answer = json.loads(data) if status == 200 else {}
        history += prompt
        ok = ok and status == 200 and answer["meta_info"]["prompt_tokens"] == len(history)
        check(f"session turn {turn} continues the last one", ok, data[:300])
        if not ok:
            return
        whole = greedy(port, history)
        check(f"session turn {turn} answers what the whole conversation answers", answer["output_ids"] == whole,
              f"{answer['output_ids']} vs {whole}")
        history += answer["output_ids"]
        rid = answer["meta_info"]["id"]
    after = replica_requests(port)
    status, data = call(port, "POST", "/close_session", {"session_id": sid})
    status_after, data_after = call(port, "POST", "/generate", {"input_ids": [1], "session_params": {"id": sid}})
    check("the session closes through the front",
          status == 200 and status_after == 400 and "does not exist" in data_after,
          (status, data, status_after, data_after))
    check("round_robin still spreads the other requests", after[0] > before[0] and after[1] > before[1],
          f"{before} -> {after}")


def check_abort(port):
    """/abort_request through the front reaches both replicas: two long requests, one on each
    (round_robin), end with finish_reason "abort"."""
    results = {}

    def long(rid):
        status, data = call(port, "POST", "/generate", {"input_ids": PROMPTS[0], "rid": rid, "sampling_params": {
            "max_new_tokens": 3000, "ignore_eos": True}})
        results[rid] = (status, json.loads(data) if status == 200 else data)

    threads = [threading.Thread(target=long, args=(f"batch-job-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.time() + 10
    while time.time() < deadline:  # until both replicas run one (their /get_load entries)
        load_status, load = call(port, "GET", "/get_load")
        if load_status == 200 and sum(e["num_reqs"] for e in json.loads(load)) >= 2:
            break
        time.sleep(0.05)
    status, data = call(port, "POST", "/abort_request", {"rid": "batch-job-"})
    for t in threads:
        t.join(60)
    ends = [r[1]["meta_info"]["finish_reason"]["type"] if r[0] == 200 else r for r in results.values()]
    check("/abort_request through the front ends the requests on both replicas",
          status == 200 and ends == ["abort", "abort"], (status, data, ends))


def replica_requests(port):
    """Requests the front sent to each replica, in DP-rank order."""
    _, data = call(port, "GET", "/get_server_info")
    return [w["requests"] for w in json.loads(data)["gateway"]["workers"]]


def check_layout(name, port, proc, expected):
    """A launch of two replicas: ready, one rank's greedy tokens, round_robin over both replicas."""
    check(f"{name} ready", wait_ready(port, proc))
    got = [greedy(port, p) for p in PROMPTS]
    check(f"{name} greedy equals one rank", got == expected, f"{got} vs {expected}")
    check(f"{name}: round_robin uses both replicas", replica_requests(port) == [2, 2], replica_requests(port))


def rank_pid(launcher_pid, rank):
    """The pid of the launcher's rank process `rank` (its command line ends in --internal-rank R ...)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == launcher_pid and b"--internal-rank" in args and args[args.index(b"--internal-rank") + 1] == str(rank).encode():
            return int(pid)
    return None


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    model = make_tiny_model(a.tessera, a.workdir)

    # One replica's tokens.
    port = free_port()
    one, log = launch(a.tessera, model, port, os.path.join(a.workdir, "dp1.log"))
    try:
        check("dp1 ready", wait_ready(port, one))
        expected = [greedy(port, p) for p in PROMPTS]
    finally:
        stop_server(one)
        log.close()

    port = free_port()
    two, log = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2.log"), "--dp-size", "2")
    try:
        check_layout("dp2", port, two, expected)
        status, data = call(port, "GET", "/get_server_info")
        info = json.loads(data)
        check("server info: dp_size 2", info.get("dp_size") == 2, data[:300])
        check("server info: both replicas' states", len(info.get("internal_states", [])) == 2, data[:300])
        status, data = call(port, "GET", "/get_load")
        loads = json.loads(data) if status == 200 else []
        check("get_load per DP rank", [x.get("dp_rank") for x in loads] == [0, 1], data)
        status, metrics = call(port, "GET", "/metrics")
        check("metrics of replica 1 labelled", 'dp_rank="1"' in metrics and "sgl_router_active_workers 2" in metrics,
              metrics[:400])
        before = replica_requests(port)
        pinned = [greedy(port, PROMPTS[0], {"data_parallel_rank": 1}) for _ in range(2)]
        after = replica_requests(port)
        check("data_parallel_rank 1 routes there", after[1] - before[1] == 2 and after[0] == before[0],
              f"{before} -> {after}")
        check("pinned replica's tokens", pinned == [expected[0]] * 2, pinned)
        status, data = call(port, "POST", "/generate", {"input_ids": [1], "data_parallel_rank": 5})
        check("data_parallel_rank out of range is a 400", status == 400 and "data_parallel_rank" in data, data)
        check_sessions(port)
        check_abort(port)
    finally:
        stop_server(two)
        log.close()
    check("dp2 stops cleanly on SIGTERM", two.returncode == 0, two.returncode)

    port = free_port()
    tp2, log = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2_tp2.log"), "--dp-size", "2", "--tp", "2")
    try:
        check_layout("dp2 tp2", port, tp2, expected)
    finally:
        stop_server(tp2)
        log.close()

    port = free_port()
    addr = f"127.0.0.1:{free_port()}"
    common = ["--dp-size", "2", "--nnodes", "2", "--dist-init-addr", addr, "--dist-timeout", "60"]
    node0, log0 = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2_node0.log"), *common, "--node-rank", "0")
    node1, log1 = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2_node1.log"), *common, "--node-rank", "1")
    try:
        check_layout("two-node dp2", port, node0, expected)
    finally:
        stop_server(node0)
        stop_server(node1)
        log0.close()
        log1.close()

    port = free_port()
    tok, log = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2_total_tokens.log"), "--dp-size", "2",
                      "--load-balance-method", "total_tokens")
    try:
        check("total_tokens ready", wait_ready(port, tok))
        long_prompt = list(range(100, 900))  # 800 tokens
        held = []

        def hold(prompt):
            held.append(greedy(port, prompt, {"sampling_params": {
                "max_new_tokens": 400, "temperature": 0, "ignore_eos": True}}))

        # Replica 0: one request of 800 prompt tokens; replica 1: two of 4.
        starters = [threading.Thread(target=hold, args=(p,)) for p in (long_prompt, [1, 2, 3, 4], [5, 6, 7, 8])]
        for t in starters:
            t.start()
            time.sleep(0.15)
        before = replica_requests(port)
        greedy(port, [9, 9, 9, 9])
        after = replica_requests(port)
        for t in starters:
            t.join(120)
        check("total_tokens: the holding requests split 1 / 2", before == [1, 2], before)
        check("total_tokens prefers fewer tokens over fewer requests", after == [1, 3], f"{before} -> {after}")
    finally:
        stop_server(tok)
        log.close()

    port = free_port()
    bal, log = launch(a.tessera, model, port, os.path.join(a.workdir, "dp2_total_requests.log"), "--dp-size", "2",
                      "--load-balance-method", "total_requests")
    try:
        check("total_requests ready", wait_ready(port, bal))
        results = []

        def one_stream():
            results.append(greedy(port, [5, 6, 7, 8], {"sampling_params": {
                "max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}))

        threads = [threading.Thread(target=one_stream) for _ in range(6)]
        for t in threads:
            t.start()
            time.sleep(0.02)
        for t in threads:
            t.join(120)
        check("six streams finished", len(results) == 6 and all(isinstance(r, list) for r in results), results)
        check("total_requests splits 3 / 3", replica_requests(port) == [3, 3], replica_requests(port))

        victim = rank_pid(bal.pid, 1)
        check("replica 1's rank process found", victim is not None)
        if victim is not None:
            os.kill(victim, signal.SIGKILL)
            try:
                code = bal.wait(30)
            except subprocess.TimeoutExpired:
                code = None
            check("a dead replica stops the launch", code not in (None, 0), code)
            check("the front is closed", not port_open(port))
    finally:
        stop_server(bal)
        log.close()

    print(check.summary())
    if check.failures:
        for name in ("dp2.log", "dp2_tp2.log", "dp2_node0.log", "dp2_node1.log", "dp2_total_tokens.log",
                     "dp2_total_requests.log"):
            with open(os.path.join(a.workdir, name)) as f:
                print(f"--- {name} (tail)\n" + "".join(f.readlines()[-30:]))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
