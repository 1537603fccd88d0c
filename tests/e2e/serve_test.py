#!/usr/bin/python3
"""`tessera serve` end to end over HTTP, as a client sees it, on a tiny model with the real
Qwen3 tokenizer: chat and completions, streaming and not; greedy output equal to
`tessera generate`; 32 concurrent streaming clients; the prefix-cache hit in usage; bad
inputs answered with 4xx while the server keeps serving; a client that disconnects
mid-stream gets its KV freed; SIGTERM drains and exits 0.

Usage: serve_test.py --tessera PATH --workdir DIR [--tp N] [--pp N]
(with --pp, greedy outputs are compared with one pipeline stage's `tessera generate`)
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from e2e_support import Checks, free_port, make_tiny_model, prometheus_values, stop_server, wait_ready

check = Checks()


# Headers every request sends (the API key when the server was started with one).
AUTH = {}


def request(port, method, path, body=None, raw=None, timeout=60, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=headers if headers is not None else
                 {"Content-Type": "application/json", **AUTH})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, payload


def post(port, path, body):
    status, payload = request(port, "POST", path, body)
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload


def stream(port, path, body, stop_after=None):
    """Returns the list of parsed SSE data objects (and whether [DONE] arrived)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json", **AUTH})
    resp = conn.getresponse()
    events, done = [], False
    while True:
        line = resp.fp.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        events.append(json.loads(line[6:]))
        if stop_after is not None and len(events) >= stop_after:
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            return events, False
    conn.close()
    return events, done



def pool_is_whole(port, wait_s=5.0):
    """Whether every KV slot is free again once the requests ended. The engine publishes its
    gauges after the step that sent the last token, so a client that got its answer may read
    them a moment early: poll for up to `wait_s`."""
    deadline = time.time() + wait_s
    while True:
        _, info = request(port, "GET", "/get_server_info")
        s = json.loads(info)["internal_states"][0]
        whole = s["num_used_tokens"] == 0 and s["num_running_reqs"] == 0
        if whole or time.time() > deadline:
            return whole, s
        time.sleep(0.05)


# Flags that change what the model computes (--kv-cache-dtype): given to the server and to
# the `tessera generate` runs its answers are compared with.
MODEL_FLAGS = []
SAME_LAYOUT_AS_GENERATE = True  # False under EP: `generate` below runs plain TP
STREAM_INTERVAL = 1  # the server's --stream-interval


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--arch", default="qwen3", help="make-model architecture (qwen3-moe: an MoE model)")
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--moe-a2a-backend", default="none")
    ap.add_argument("--api-key", default="", help="start the server with this --api-key")
    ap.add_argument("--fp8-block", type=int, default=0, help="serve an FP8 checkpoint with N x N scale blocks")
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra flag for tessera serve (repeatable)")
    a = ap.parse_args()
    if a.api_key:
        AUTH["Authorization"] = f"Bearer {a.api_key}"
    tessera = os.path.abspath(a.tessera)
    os.makedirs(a.workdir, exist_ok=True)
    model = make_tiny_model(tessera, a.workdir, a.arch, ["--fp8-block", str(a.fp8_block)] if a.fp8_block else [])
    MODEL_FLAGS.extend(["--kv-cache-dtype", a.kv_cache_dtype])
    global SAME_LAYOUT_AS_GENERATE, STREAM_INTERVAL
    SAME_LAYOUT_AS_GENERATE = a.ep == 1 and a.moe_a2a_backend == "none"
    for arg in a.serve_arg:
        if arg.startswith("--stream-interval="):
            STREAM_INTERVAL = int(arg.split("=", 1)[1])
    port = free_port()
    log = open(os.path.join(a.workdir, "server.log"), "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                               "--port", str(port), "--tp", str(a.tp), "--pp-size", str(a.pp), "--threads", "1",
                               "--ep", str(a.ep), "--moe-a2a-backend", a.moe_a2a_backend, *MODEL_FLAGS,
                               *(["--api-key", a.api_key] if a.api_key else []),
                               "--max-total-tokens", "16384", "--chunked-prefill-size", "64",
                               "--random-seed", "1", *a.serve_arg], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(port, server):
            print(open(os.path.join(a.workdir, "server.log")).read()[-3000:])
            print("server did not become ready")
            return 1
        overlap = a.pp == 1 and "--disable-overlap-schedule" not in a.serve_arg
        with open(os.path.join(a.workdir, "server.log")) as f:
            log_text = f.read()
        check(f"overlap scheduling {'on' if overlap else 'off'}",
              ("overlap scheduling: steps run on their own thread" in log_text) == overlap)
        if a.moe_a2a_backend == "deepep":
            check("--moe-a2a-backend deepep runs tessera's all_to_all exchange, said once",
                  log_text.count("--moe-a2a-backend deepep: tokens go to their experts' ranks") == 1, log_text[-2000:])
            check("--deepep-mode and --moe-runner-backend are named as having no effect",
                  "--moe-runner-backend" in log_text and "--deepep-mode" in log_text, log_text[-2000:])
        for arg in a.serve_arg:
            if arg.startswith("--prefill-decode-interval="):
                _, info = request(port, "GET", "/get_server_info")
                check("/get_server_info reports --prefill-decode-interval",
                      json.loads(info).get("prefill_decode_interval") == int(arg.split("=", 1)[1]), info[:300])
        run_checks(tessera, model, port, a.tp)
        if "--enable-mixed-chunk" in a.serve_arg:
            check_prefill_while_decoding(tessera, model, port, a.tp)
        if a.tp == 1 and a.pp == 1:
            check_memory_pressure(tessera, model, port, a.workdir)
            check_cache_cap(tessera, model, a.workdir)
            check_eviction_policy(tessera, model, a.workdir)
            check_priority_order(tessera, model, a.workdir)
            check_priority_preemption(tessera, model, a.workdir)
            check_queue_cap(tessera, model, a.workdir)
            check_reasoning_parser(tessera, model, a.workdir)
            check_auto_truncate(tessera, model, a.workdir)
            check_chat_template_file(tessera, model, a.workdir)
            check_request_log(tessera, model, a.workdir)
            check_request_metrics_export(tessera, model, a.workdir)
            check_crash_dump(tessera, model, a.workdir)
            check_model_sampling_defaults(tessera, model, a.workdir)
            check_preferred_sampling_params(tessera, model, a.workdir)
            check_skip_tokenizer_init(tessera, model, port, a.workdir)
        if a.tp == 2 and a.pp == 1 and a.arch == "qwen3":
            check_stalled_rank(tessera, model, a.workdir)
        check_abort_request(port)
        check_tokenize(port)
        # SIGTERM with a request in flight: it finishes, then the server exits 0.
        result = {}
        t = threading.Thread(target=lambda: result.update(r=post(port, "/v1/completions", {
            "model": "tiny", "prompt": "drain me", "max_tokens": 200, "temperature": 0, "ignore_eos": True})))
        t.start()
        time.sleep(0.3)
        server.send_signal(signal.SIGTERM)
        t.join(60)
        rc = server.wait(60)
        status, body = result.get("r", (0, None))
        check("SIGTERM drains the in-flight request", status == 200 and body["usage"]["completion_tokens"] == 200,
              f"{status} {str(body)[:200]}")
        check("SIGTERM exits 0", rc == 0, f"exit {rc}")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
    print(check.summary())
    if check.failures:
        print(open(os.path.join(a.workdir, "server.log")).read()[-4000:])
    return 1 if check.failures else 0


def generate_ids(port, prompt_ids, max_tokens):
    status, body = post(port, "/generate", {"input_ids": prompt_ids, "sampling_params": {
        "max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}})
    return body["output_ids"] if status == 200 else (status, body)


def check_prefill_while_decoding(tessera, model, port, tp):
    """A long prompt arrives while another request decodes (with --enable-mixed-chunk its
    chunks carry that request's decode tokens, fed from the step in flight under overlap
    scheduling): both answers equal `tessera generate` alone."""
    decoding = [11 + i for i in range(20)]
    arriving = [(i * 37 + 3) % 900 + 5 for i in range(300)]  # five 64-token chunks

    def alone(ids, n):
        gen = subprocess.run([tessera, "generate", "--model-path", model, "--prompt-ids", ",".join(map(str, ids)),
                              "--max-new-tokens", str(n), "--ignore-eos", "--json", "--threads", "1", "--tp", str(tp),
                              *MODEL_FLAGS], capture_output=True, text=True)
        return json.loads(gen.stdout)["output_ids"] if gen.returncode == 0 else gen.stderr[-500:]

    want_decoding, want_arriving = alone(decoding, 120), alone(arriving, 8)
    got = {}
    first = threading.Thread(target=lambda: got.update(decoding=generate_ids(port, decoding, 120)))
    first.start()
    time.sleep(0.2)  # the first request is decoding by now
    got["arriving"] = generate_ids(port, arriving, 8)
    first.join(120)
    check("mixed chunks: the decoding request's tokens equal tessera generate",
          got.get("decoding") == want_decoding, f"{got.get('decoding')} vs {want_decoding}")
    check("mixed chunks: the arriving prompt's tokens equal tessera generate",
          got.get("arriving") == want_arriving, f"{got.get('arriving')} vs {want_arriving}")


def check_memory_pressure(tessera, model, port, workdir):
    """A pool far too small for the load forces retraction; the greedy outputs must equal
    those of the roomy server, and the pool must be whole afterwards."""
    prompts = [[(7 * i + 3 * j) % 5000 + 10 for j in range(48)] for i in range(8)]
    expected = [generate_ids(port, p, 40) for p in prompts]
    small_port = free_port()
    log = open(os.path.join(workdir, "server_small_pool.log"), "w")
    small = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                              "--port", str(small_port), "--threads", "1", "--max-total-tokens", "256",
                              "--chunked-prefill-size", "32", "--random-seed", "1", *MODEL_FLAGS],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(small_port, small):
            check("small-pool server starts", False, open(os.path.join(workdir, "server_small_pool.log")).read()[-2000:])
            return
        got = [None] * len(prompts)

        def client(i):
            got[i] = generate_ids(small_port, prompts[i], 40)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        check("retraction under a tiny KV pool keeps greedy outputs", got == expected,
              f"{[g == e for g, e in zip(got, expected)]}")
        retracted = "Retract requests" in open(os.path.join(workdir, "server_small_pool.log")).read()
        check("the tiny pool really retracted", retracted)
        whole, state = pool_is_whole(small_port)
        check("pool whole after retraction", whole, str(state))
    finally:
        small.send_signal(signal.SIGTERM)
        try:
            small.wait(60)
        except subprocess.TimeoutExpired:
            small.kill()
        log.close()


def metrics(port):
    return prometheus_values(request(port, "GET", "/metrics")[1].decode())


def check_cache_cap(tessera, model, workdir):
    """--max-cached-tokens: twelve distinct prompts one after another leave at most the cap in
    the prefix cache, the pool's touched pages stay near the working set, the most recent
    prompt is still reused, and /metrics sets resident memory against weights and KV."""
    bad = subprocess.run([tessera, "serve", "--model-path", model, "--max-cached-tokens", "-5"],
                         capture_output=True, text=True, timeout=60)
    check("--max-cached-tokens -5 is refused naming the flag",
          bad.returncode != 0 and "--max-cached-tokens" in bad.stderr, bad.stderr[-500:])
    cap_port = free_port()
    log_path = os.path.join(workdir, "server_cache_cap.log")
    log = open(log_path, "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                               "--port", str(cap_port), "--threads", "1", "--max-total-tokens", "16384",
                               "--max-cached-tokens", "64", "--random-seed", "1"], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(cap_port, server):
            check("capped-cache server starts", False, open(log_path).read()[-2000:])
            return
        prompts = [[(11 * i + 5 * j) % 5000 + 10 for j in range(40)] for i in range(12)]
        for p in prompts:
            generate_ids(cap_port, p, 8)
        m = metrics(cap_port)
        per_token = m["tessera:kv_pool_bytes"] / 16384
        check("the prefix cache keeps at most --max-cached-tokens",
              m["sglang:kv_evictable_tokens"] <= 64 and m["tessera:kv_cached_bytes"] <= 64 * per_token, str(m))
        check("the pool's touched pages stay near the working set (12 x 48 tokens went through)",
              0 < m["tessera:kv_touched_bytes"] <= 512 * per_token, str(m["tessera:kv_touched_bytes"] / per_token))
        check("/metrics: resident memory covers the weights",
              m["process_resident_memory_bytes"] >= m["tessera:weight_bytes"] > 0 and
              m["tessera:peak_resident_memory_bytes"] >= m["process_resident_memory_bytes"], str(m))
        status, body = post(cap_port, "/generate", {"input_ids": prompts[-1] + [7], "sampling_params": {
            "max_new_tokens": 2, "temperature": 0}})
        cached = body["meta_info"].get("cached_tokens", 0) if status == 200 else -1
        check("the most recent prompt is still reused under the cap", cached >= 40, f"{status} {str(body)[:300]}")
    finally:
        stop_server(server)
        log.close()


def check_eviction_policy(tessera, model, workdir):
    """--radix-eviction-policy priority under the same cap: a prompt sent with priority 3 outlives
    eight later prompts of priority 0 (least recently used, it would be the first to go), and
    /get_server_info reports the policy."""
    side = start_side_server(tessera, model, workdir, "eviction_policy",
                             ["--max-cached-tokens", "64", "--radix-eviction-policy", "priority"])
    if side is None:
        return
    server, port, _ = side
    try:
        _, info = request(port, "GET", "/get_server_info")
        check("/get_server_info reports --radix-eviction-policy",
              json.loads(info).get("radix_eviction_policy") == "priority", info[:500])
        kept = [(13 * j) % 5000 + 10 for j in range(40)]
        post(port, "/generate", {"input_ids": kept, "priority": 3, "sampling_params": {
            "max_new_tokens": 8, "temperature": 0}})
        for i in range(8):
            generate_ids(port, [(11 * i + 5 * j) % 5000 + 20 for j in range(40)], 8)
        status, body = post(port, "/generate", {"input_ids": kept + [7], "sampling_params": {
            "max_new_tokens": 2, "temperature": 0}})
        cached = body["meta_info"].get("cached_tokens", 0) if status == 200 else -1
        check("the priority-3 prompt is still cached after eight of priority 0", cached >= 40,
              f"{status} {str(body)[:300]}")
    finally:
        stop_server(server)


def generate_with_priority(port, priority, tokens):
    """POST /generate of a fixed 3-token prompt with this priority: greedy, `tokens` long."""
    return post(port, "/generate", {"input_ids": [5, 6, 7], "priority": priority, "sampling_params": {
        "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}})


def check_priority_order(tessera, model, workdir):
    """--schedule-policy priority with one running request: while a long request runs, a
    request of priority 0 and then one of priority 10 queue; the second is admitted first
    (higher values first), so it finishes first."""
    port = free_port()
    log_path = os.path.join(workdir, "server_priority.log")
    log = open(log_path, "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                               "--port", str(port), "--threads", "1", "--max-total-tokens", "16384",
                               "--schedule-policy", "priority", "--max-running-requests", "1", "--random-seed", "1"],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(port, server):
            check("priority-policy server starts", False, open(log_path).read()[-2000:])
            return
        finished = {}

        def send(name, priority, tokens):
            status, _ = generate_with_priority(port, priority, tokens)
            finished[name] = (status, time.monotonic())

        threads = [threading.Thread(target=send, args=("long", 0, 1500))]
        threads[0].start()
        time.sleep(0.3)
        for name, priority in (("low", 0), ("high", 10)):
            threads.append(threading.Thread(target=send, args=(name, priority, 16)))
            threads[-1].start()
            time.sleep(0.1)
        for t in threads:
            t.join(120)
        ok = all(finished.get(n, (0,))[0] == 200 for n in ("long", "low", "high"))
        check("--schedule-policy priority: the later, higher-priority request finishes first",
              ok and finished["high"][1] < finished["low"][1], str(finished))
    finally:
        stop_server(server)
        log.close()


def start_side_server(tessera, model, workdir, name, flags):
    """A server of its own for one check; returns (process, port, log path), or None if it did
    not start (the check failed)."""
    port = free_port()
    log_path = os.path.join(workdir, f"server_{name}.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                                   "--port", str(port), "--threads", "1", "--max-total-tokens", "16384",
                                   "--random-seed", "1", *flags], stdout=log, stderr=subprocess.STDOUT)
    if not wait_ready(port, server):
        check(f"{name} server starts", False, open(log_path).read()[-2000:])
        stop_server(server)
        return None
    return server, port, log_path


def check_priority_preemption(tessera, model, workdir):
    """--enable-priority-scheduling with one running request: a request of priority 50 arrives
    while one of priority 0 decodes; it preempts it (50 - 0 > the threshold 10), finishes
    first, and the preempted one resumes and completes. With --abort-on-priority-when-disabled
    and no priority scheduling, a request that gives a priority is refused with SGLang's 503."""
    started = start_side_server(tessera, model, workdir, "preemption",
                                ["--enable-priority-scheduling", "--max-running-requests", "1"])
    if started is None:
        return
    server, port, log_path = started
    try:
        finished = {}

        def send(name, priority, tokens):
            status, body = generate_with_priority(port, priority, tokens)
            finished[name] = (status, time.monotonic(), body.get("meta_info", {}).get("completion_tokens")
                              if isinstance(body, dict) else None)

        threads = [threading.Thread(target=send, args=("low", 0, 1500))]
        threads[0].start()
        time.sleep(0.3)
        threads.append(threading.Thread(target=send, args=("high", 50, 16)))
        threads[-1].start()
        for t in threads:
            t.join(120)
        ok = all(finished.get(n, (0,))[0] == 200 for n in ("low", "high"))
        check("--enable-priority-scheduling: the higher-priority request preempts the running one and finishes "
              "first; the preempted one completes", ok and finished["high"][1] < finished["low"][1]
              and finished["low"][2] == 1500, str(finished))
        log = open(log_path).read()
        check("the preemption is logged", "Preempted 1 running request(s) for request" in log, log[-1500:])
    finally:
        stop_server(server)
    started = start_side_server(tessera, model, workdir, "priority_refused", ["--abort-on-priority-when-disabled"])
    if started is None:
        return
    server, port, _ = started
    try:
        status, body = post(port, "/generate", {"input_ids": [5, 6, 7], "priority": 3,
                                                "sampling_params": {"max_new_tokens": 2}})
        check("--abort-on-priority-when-disabled: a request with a priority gets 503",
              status == 503 and "Using priority is disabled for this server" in json.dumps(body), f"{status} {body}")
        status, _ = post(port, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}})
        check("... and one without is served", status == 200, str(status))
    finally:
        stop_server(server)


def check_queue_cap(tessera, model, workdir):
    """--max-queued-requests 1 with one running request (SGLang's _abort_on_queued_limit): with
    one request waiting, an equal newcomer gets 503 "The request queue is full."; a better one
    (priority scheduling) takes the waiting one's place, which ends with 503."""
    started = start_side_server(tessera, model, workdir, "queue_cap",
                                ["--enable-priority-scheduling", "--max-running-requests", "1",
                                 "--max-queued-requests", "1"])
    if started is None:
        return
    server, port, _ = started
    try:
        results = {}

        def send(name, priority, tokens):
            results[name] = generate_with_priority(port, priority, tokens)

        threads = []
        for name, priority, tokens, pause in (("running", 0, 3000, 0.3), ("waiting", 0, 4, 0.2), ("equal", 0, 4, 0.2),
                                              ("better", 5, 4, 0.0)):
            threads.append(threading.Thread(target=send, args=(name, priority, tokens)))
            threads[-1].start()
            time.sleep(pause)
        for t in threads:
            t.join(120)
        status = {name: results.get(name, (0, None))[0] for name in ("running", "waiting", "equal", "better")}
        text = {name: json.dumps(results.get(name, (0, None))[1]) for name in status}
        check("--max-queued-requests: an equal newcomer to a full queue gets 503",
              status["equal"] == 503 and "The request queue is full." in text["equal"], f"{status} {text['equal']}")
        check("... a better one displaces the waiting request (503 for it), and both others finish",
              status["waiting"] == 503 and "aborted by a higher priority request" in text["waiting"]
              and status["better"] == 200 and status["running"] == 200, f"{status} {text['waiting'][:200]}")
    finally:
        stop_server(server)


THINK_END = 151668  # Qwen3's </think>


def check_reasoning_tokens(port, chat):
    """usage.reasoning_tokens counts the output up to and with </think> (all of it without one);
    /generate reports it with require_reasoning; --strip-thinking-cache keeps only the prompt
    of a request that reasoned in the prefix cache."""
    _, all_thinking = post(port, "/v1/chat/completions", chat)
    _, ended = post(port, "/v1/chat/completions", dict(chat, logit_bias={str(THINK_END): 100}, max_tokens=1))
    _, off = post(port, "/v1/chat/completions", dict(chat, chat_template_kwargs={"enable_thinking": False}))
    check("usage.reasoning_tokens: up to and with </think>, none with thinking off",
          [r.get("usage", {}).get("reasoning_tokens") for r in (all_thinking, ended, off)] == [12, 1, 0],
          f"{all_thinking.get('usage')} {ended.get('usage')} {off.get('usage')}")
    ids = [100 + i for i in range(40)]
    sampling = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
    status, first = post(port, "/generate", {"input_ids": ids, "require_reasoning": True, "sampling_params": sampling})
    exchange = ids + first.get("output_ids", []) if status == 200 else ids
    _, again = post(port, "/generate", {"input_ids": exchange + [7], "sampling_params": {"max_new_tokens": 1}})
    check("/generate: meta_info.reasoning_tokens; --strip-thinking-cache keeps the prompt only",
          status == 200 and first["meta_info"]["reasoning_tokens"] == 6
          and again["meta_info"]["cached_tokens"] == len(ids), f"{first.get('meta_info')} {again.get('meta_info')}")


def check_reasoning_parser(tessera, model, workdir):
    """--reasoning-parser qwen3 over HTTP: with thinking switched on (chat_template_kwargs
    enable_thinking), the output starts inside the reasoning, so with no end tag (a random
    model) all of it is reasoning_content, whole or streamed; separate_reasoning false gives
    the same text as content."""
    started = start_side_server(tessera, model, workdir, "reasoning",
                                ["--reasoning-parser", "qwen3", "--strip-thinking-cache"])
    if started is None:
        return
    server, port, _ = started
    try:
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "Think about tiles."}], "max_tokens": 12,
                "temperature": 0, "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": True}}
        check_reasoning_tokens(port, chat)
        status, raw = post(port, "/v1/chat/completions", dict(chat, separate_reasoning=False))
        status2, split = post(port, "/v1/chat/completions", chat)
        events, done = stream(port, "/v1/chat/completions", dict(chat, stream=True))
        ok = status == 200 and status2 == 200 and done
        text = raw["choices"][0]["message"]["content"] if ok else ""
        message = split["choices"][0]["message"] if ok else {}
        streamed = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in events if e.get("choices"))
        content = "".join(e["choices"][0]["delta"].get("content", "") or "" for e in events if e.get("choices"))
        check("--reasoning-parser qwen3: forced reasoning goes to reasoning_content, whole and streamed",
              ok and text and message.get("reasoning_content") == text.strip() and message.get("content") == ""
              and streamed.strip() == text.strip() and content == "",
              f"{status} {status2} raw={text!r} split={message} streamed={streamed!r} content={content!r}")
    finally:
        stop_server(server)


def check_auto_truncate(tessera, model, workdir):
    """--allow-auto-truncate with a 64-token context (63 tokens per request, SGLang's
    max_req_len): a 100-token prompt keeps its first 62 tokens and gets one new token instead
    of a 400; 40 tokens asking for 50 get the 22 that fit."""
    started = start_side_server(tessera, model, workdir, "truncate", ["--allow-auto-truncate", "--context-length", "64"])
    if started is None:
        return
    server, port, _ = started
    try:
        def usage(n_prompt, max_tokens):
            status, body = post(port, "/generate", {"input_ids": [5 + i % 50 for i in range(n_prompt)],
                                                    "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0,
                                                                        "ignore_eos": True}})
            meta = body.get("meta_info", {}) if isinstance(body, dict) else {}
            return status, meta.get("prompt_tokens"), meta.get("completion_tokens")
        long, fits = usage(100, 10), usage(40, 50)
        check("--allow-auto-truncate: a too long prompt is cut to its first 62 tokens; max_tokens shrinks to fit",
              long == (200, 62, 1) and fits == (200, 40, 22), f"{long} {fits}")
    finally:
        stop_server(server)


def check_same_prompt(port, what, messages, extra, text):
    """A chat request sees the prompt `text` (as /generate encodes it): same prompt tokens, same
    greedy answer."""
    status, chat = post(port, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 4,
                                                       "temperature": 0, "ignore_eos": True, **extra})
    status2, gen = post(port, "/generate", {"text": text, "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "ignore_eos": True}})
    check(what, status == 200 and status2 == 200 and chat["usage"]["prompt_tokens"] == gen["meta_info"]["prompt_tokens"]
          and chat["choices"][0]["message"]["content"] == gen["text"], f"{status} {status2} {chat} {gen}")


def check_tokenize(port):
    """/v1/tokenize gives the ids /generate reads for the same text; /v1/detokenize gives it back."""
    text = "Hello, world! 你好"
    status, tok = post(port, "/v1/tokenize", {"prompt": text})
    status2, gen = post(port, "/generate", {"text": text, "return_logprob": True, "logprob_start_len": 0,
                                            "sampling_params": {"max_new_tokens": 0}})
    ids = [e[1] for e in gen["meta_info"]["input_token_logprobs"]] if status2 == 200 else None
    context = json.loads(request(port, "GET", "/v1/models")[1])["data"][0]["max_model_len"]
    check("/v1/tokenize: the ids /generate reads, their count and the context length",
          status == 200 and tok["tokens"] == ids and tok["count"] == len(ids) and tok["max_model_len"] == context,
          f"{tok} {ids}")
    status, back = post(port, "/v1/detokenize", {"tokens": tok.get("tokens", []) if status == 200 else []})
    check("/v1/detokenize gives the text back", status == 200 and back["text"] == text, back)


def check_abort_request(port):
    """SGLang's /abort_request: a long /generate with its own rid ends at once with finish_reason
    "abort"; the server goes on serving."""
    result = {}
    t = threading.Thread(target=lambda: result.update(r=post(port, "/generate", {
        "text": "a long one", "rid": "long-job-7", "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}})))
    t.start()
    deadline = time.time() + 10
    while time.time() < deadline and not prometheus_values(request(port, "GET", "/metrics")[1].decode()).get(
            "sglang:num_running_reqs"):
        time.sleep(0.05)
    status, _ = post(port, "/abort_request", {"rid": "long-job"})
    t.join(60)
    gen_status, body = result.get("r", (0, None))
    meta = body.get("meta_info", {}) if isinstance(body, dict) else {}
    check("/abort_request ends the request whose rid it starts with (finish_reason abort)",
          status == 200 and gen_status == 200 and meta.get("finish_reason", {}).get("type") == "abort"
          and meta.get("completion_tokens", 4000) < 4000, f"{status} {gen_status} {str(body)[:300]}")
    after, _ = post(port, "/generate", {"text": "still there", "sampling_params": {"max_new_tokens": 2}})
    check("the server serves after an abort", after == 200, after)


def check_conversation_template_file(tessera, model, workdir):
    """--chat-template FILE.json, SGLang's conversation template: a chat request is the prompt
    its get_prompt builds, encoded as /generate encodes text, and the template's stop_str ends
    the answer unless the request ignores EOS."""
    path = os.path.join(workdir, "colon.json")
    rendered = "SYS\n\nQ: hi\nA:"  # "SYS" + "\n{system_message}", sep, "Q: hi" + sep, the open "A:"

    def serve(stop):
        with open(path, "w") as f:
            json.dump({"name": "colon", "system": "SYS", "user": "Q", "assistant": "A",
                       "sep_style": "ADD_COLON_SINGLE", "stop_str": stop}, f)
        return start_side_server(tessera, model, workdir, "conversation_template", ["--chat-template", path])

    def chat(port, ignore_eos):
        return post(port, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 8, "temperature": 0, "ignore_eos": ignore_eos})

    started = serve(None)
    if started is None:
        return
    server, port, _ = started
    try:
        status, answer = chat(port, True)
        status2, gen = post(port, "/generate", {"text": rendered, "sampling_params": {
            "max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})
        text = gen["text"] if status2 == 200 else ""
        check("--chat-template FILE.json renders chat requests as SGLang's get_prompt",
              status == 200 and status2 == 200 and answer["usage"]["prompt_tokens"] == gen["meta_info"][
                  "prompt_tokens"] and answer["choices"][0]["message"]["content"] == text, f"{answer} {gen}")
        check_same_prompt(port, "continue_final_message continues the answer (the open turn and sep dropped)",
                          [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}],
                          {"continue_final_message": True}, "SYS\n\nQ: hi\nA: Sure")
    finally:
        stop_server(server)
    stop = text.strip()[len(text.strip()) // 2:][:2]
    if not stop:
        check("the generated text gives a stop string", False, repr(text))
        return
    started = serve([stop])
    if started is None:
        return
    server, port, _ = started
    try:
        (status, stopped), (status2, ignoring) = chat(port, False), chat(port, True)
        status3, gen = post(port, "/generate", {"text": rendered, "sampling_params": {
            "max_new_tokens": 8, "temperature": 0, "stop": [stop]}})
        expected = gen["text"] if status3 == 200 else None
        check("a conversation template's stop_str ends the answer, and not when the request ignores EOS",
              status == 200 and stopped["choices"][0]["message"]["content"] == expected
              and len(expected) < len(text) and status2 == 200
              and ignoring["choices"][0]["message"]["content"] == text,
              f"stop {stop!r} in {text!r}: {stopped} {ignoring} {gen}")
    finally:
        stop_server(server)


def check_chat_template_file(tessera, model, workdir):
    """--chat-template FILE, and --hf-chat-template-name NAME with the template in the model
    folder's additional_chat_templates/NAME.jinja: chat requests render with that Jinja
    template, so a chat request and /generate on the text the template makes see the same
    prompt and give the same tokens."""
    angle = ("{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"
             "{% if add_generation_prompt %}<<assistant>>{% endif %}")
    path = os.path.join(workdir, "angle.jinja")
    with open(path, "w") as f:
        f.write(angle)
    named_model = os.path.join(workdir, "model_with_named_template")
    if not os.path.exists(named_model):
        shutil.copytree(model, named_model)
        os.makedirs(os.path.join(named_model, "additional_chat_templates"))
        with open(os.path.join(named_model, "additional_chat_templates", "angle.jinja"), "w") as f:
            f.write(angle)
    for name, folder, flags in (("--chat-template FILE", model, ["--chat-template", path]),
                                ("--hf-chat-template-name", named_model, ["--hf-chat-template-name", "angle"])):
        started = start_side_server(tessera, folder, workdir, "chat_template", flags)
        if started is None:
            return
        server, port, _ = started
        try:
            status, chat = post(port, "/v1/chat/completions", {"model": "tiny", "messages": [
                {"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0, "ignore_eos": True})
            status2, gen = post(port, "/generate", {"text": "<<user>>hi\n<<assistant>>", "sampling_params": {
                "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}})
            ok = status == 200 and status2 == 200
            check(f"{name} renders chat requests",
                  ok and chat["usage"]["prompt_tokens"] == gen["meta_info"]["prompt_tokens"]
                  and chat["choices"][0]["message"]["content"] == gen["text"], f"{status} {status2} {chat} {gen}")
            if name.startswith("--chat-template"):
                answered = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
                check_same_prompt(port, "a chat ending with the assistant's message sends it as the user's",
                                  answered, {}, "<<user>>hi\n<<user>>ok\n<<assistant>>")
                check_same_prompt(port, "continue_final_message continues the assistant's message",
                                  answered, {"continue_final_message": True}, "<<user>>hi\n<<assistant>>ok")
        finally:
            stop_server(server)
    # A "tool_use" template renders the requests that offer tools (transformers' get_chat_template);
    # the others keep the default one.
    TOOLS_MARK = "tools offered: " * 6
    tool_model = os.path.join(workdir, "model_with_tool_use_template")
    if not os.path.exists(tool_model):
        shutil.copytree(model, tool_model)
        os.makedirs(os.path.join(tool_model, "additional_chat_templates"))
        with open(os.path.join(tool_model, "additional_chat_templates", "tool_use.jinja"), "w") as f:
            f.write(angle.replace("{% if add_generation_prompt %}", "{% if tools %}" + TOOLS_MARK + "{% endif %}"
                                  "{% if add_generation_prompt %}"))
    started = start_side_server(tessera, tool_model, workdir, "tool_use_template", [])
    if started is not None:
        server, port, _ = started
        try:
            tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
            chats = [post(port, "/v1/chat/completions", {"model": "tiny", "messages": [
                {"role": "user", "content": "hi"}], "max_tokens": 1, **extra}) for extra in ({"tools": tools}, {})]
            status, gen = post(port, "/generate", {"text": "<<user>>hi\n" + TOOLS_MARK + "<<assistant>>",
                                                   "sampling_params": {"max_new_tokens": 1}})
            ok = status == 200 and all(c[0] == 200 for c in chats)
            check("a chat request with tools renders with the tokenizer's tool_use template, one without does not",
                  ok and chats[0][1]["usage"]["prompt_tokens"] == gen["meta_info"]["prompt_tokens"]
                  and chats[1][1]["usage"]["prompt_tokens"] != gen["meta_info"]["prompt_tokens"], f"{chats} {gen}")
        finally:
            stop_server(server)
    check_conversation_template_file(tessera, model, workdir)
    bad = subprocess.run([tessera, "serve", "--model-path", named_model, "--hf-chat-template-name", "rag"],
                         capture_output=True, text=True, timeout=60)
    check("--hf-chat-template-name with a name the tokenizer lacks stops the launch, listing what it has",
          bad.returncode != 0 and "--hf-chat-template-name rag: the tokenizer has the chat templates angle"
          in bad.stderr + bad.stdout, (bad.stderr + bad.stdout)[-500:])


def check_request_log(tessera, model, workdir):
    """--log-requests: a line when a request arrives and one when it ends; level 2 shows the
    input and the output, level 0 in JSON only metadata, written by --log-requests-target to
    <dir>/<host>_<rank>.log instead of the log."""
    target = os.path.join(workdir, "request_logs")
    shutil.rmtree(target, ignore_errors=True)
    for level, fmt in ((2, "text"), (0, "json")):
        started = start_side_server(tessera, model, workdir, f"log_{fmt}",
                                    ["--log-requests", "--log-requests-level", str(level), "--log-requests-format", fmt,
                                     *(["--log-requests-target", target] if fmt == "json" else [])])
        if started is None:
            return
        server, port, log_path = started
        try:
            status, body = post(port, "/generate", {"text": "hello tiles", "rid": f"logged-{fmt}", "sampling_params": {
                "max_new_tokens": 4, "temperature": 0, "ignore_eos": True}})
        finally:
            stop_server(server)
        lines = [line.split("[request] ", 1)[1] for line in open(log_path) if "[request] " in line]
        if fmt == "json":
            check("--log-requests-target: no request lines in the log", not lines, "\n".join(lines))
            files = os.listdir(target) if os.path.isdir(target) else []
            check("--log-requests-target writes <host>_<rank>.log", len(files) == 1 and files[0].endswith("_0.log"),
                  str(files))
            lines = open(os.path.join(target, files[0])).read().splitlines() if len(files) == 1 else []
        if fmt == "text":
            want = [f"Receive: rid=logged-text, prompt_tokens=", "text=hello tiles",
                    f"Finish: rid=logged-text, finish_reason=length", f"out={body.get('text') if status == 200 else '?'}"]
            good = status == 200 and len(lines) == 2 and all(any(w in line for line in lines) for w in want)
        else:
            events = [json.loads(line) for line in lines]
            good = (status == 200 and [e.get("event") for e in events] == ["receive", "finish"]
                    and events[1].get("completion_tokens") == 4 and "text" not in events[0]
                    and "sampling_params" not in events[0])
        check(f"--log-requests level {level} ({fmt})", good, "\n".join(lines))

    # /configure_logging: request logging turned on while serving, then off again.
    started = start_side_server(tessera, model, workdir, "log_configured", [])
    if started is None:
        return
    server, port, log_path = started
    try:
        generate = {"text": "hello tiles", "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        post(port, "/generate", {**generate, "rid": "before"})
        on = post(port, "/configure_logging", {"log_requests": True, "log_requests_level": 2})
        post(port, "/generate", {**generate, "rid": "while-on"})
        off = post(port, "/configure_logging", {"log_requests": False})
        post(port, "/generate", {**generate, "rid": "after"})
    finally:
        stop_server(server)
    lines = [line.split("[request] ", 1)[1] for line in open(log_path) if "[request] " in line]
    check("/configure_logging turns request logging on and off while serving",
          on[0] == 200 and off[0] == 200 and len(lines) == 2 and all("rid=while-on" in line for line in lines),
          "\n".join(lines))


def check_request_metrics_export(tessera, model, workdir):
    """--export-metrics-to-file: a JSON line per finished request in
    DIR/sglang-request-metrics-YYYYMMDD_HH.log (health checks left out); and
    --enable-request-time-stats-logging: a ReqTimeStats line per request in the log."""
    target = os.path.join(workdir, "request_metrics")
    shutil.rmtree(target, ignore_errors=True)
    started = start_side_server(tessera, model, workdir, "metrics_export",
                                ["--export-metrics-to-file", "--export-metrics-to-file-dir", target,
                                 "--enable-request-time-stats-logging"])
    if started is None:
        return
    server, port, log_path = started
    try:
        status, _ = post(port, "/generate", {"text": "hello tiles", "rid": "exported", "sampling_params": {
            "max_new_tokens": 3, "temperature": 0, "ignore_eos": True}})
        request(port, "GET", "/health_generate")
    finally:
        stop_server(server)
    files = os.listdir(target) if os.path.isdir(target) else []
    lines = [json.loads(line) for f in files for line in open(os.path.join(target, f))]
    check("--export-metrics-to-file: one line for the request, none for the health check",
          status == 200 and len(files) == 1 and re.fullmatch(r"sglang-request-metrics-\d{8}_\d{2}\.log", files[0])
          and [line["id"] for line in lines] == ["exported"] and lines[0]["completion_tokens"] == 3
          and json.loads(lines[0]["request_parameters"])["text"] == "hello tiles", f"{files} {lines}")
    log = open(log_path).read()
    check("--enable-request-time-stats-logging: a ReqTimeStats line",
          re.search(r"ReqTimeStats\(rid=exported, input_len=\d+, cached_input_len=\d+, output_len=3, type=unified\): "
                    r"queue_duration=[\d.]+ms, forward_duration=[\d.]+ms", log) is not None, log[-2000:])


def check_crash_dump(tessera, model, workdir):
    """--crash-dump-folder: SIGQUIT writes the recent requests to FOLDER/<host>/crash_dump_*.json
    and stops the server with exit code 1."""
    folder = os.path.join(workdir, "crash_dumps")
    shutil.rmtree(folder, ignore_errors=True)
    started = start_side_server(tessera, model, workdir, "crash_dump", ["--crash-dump-folder", folder])
    if started is None:
        return
    server, port, log_path = started
    try:
        status, _ = post(port, "/generate", {"text": "hello tiles", "rid": "before-crash", "sampling_params": {
            "max_new_tokens": 2, "temperature": 0}})
        server.send_signal(signal.SIGQUIT)
        rc = server.wait(timeout=60)
    finally:
        stop_server(server)
    dumps = [os.path.join(root, f) for root, _, files in os.walk(folder) for f in files if f.startswith("crash_dump_")]
    requests = json.load(open(dumps[0]))["requests"] if len(dumps) == 1 else []
    check("--crash-dump-folder: SIGQUIT writes the recent requests and exits 1",
          status == 200 and rc == 1 and [r["request"]["rid"] for r in requests] == ["before-crash"]
          and requests[0]["output"]["meta_info"]["completion_tokens"] == 2,
          f"rc={rc} {dumps} {requests} " + open(log_path).read()[-1500:])


def check_model_sampling_defaults(tessera, model, workdir):
    """--sampling-defaults model (SGLang's default): a copy of the model whose
    generation_config.json says temperature 0 answers a chat request that gives none greedily,
    as one that asks for temperature 0; --sampling-defaults openai samples at 1.0 instead."""
    greedy_model = os.path.join(workdir, "greedy_default_model")
    if not os.path.exists(greedy_model):
        shutil.copytree(model, greedy_model)
    path = os.path.join(greedy_model, "generation_config.json")
    config = json.load(open(path))
    config.update({"temperature": 0.0, "top_p": 0.9})
    json.dump(config, open(path, "w"))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Tiles?"}], "max_tokens": 12, "ignore_eos": True}
    outputs = {}
    for mode in ("model", "openai"):
        started = start_side_server(tessera, greedy_model, workdir, f"sampling_{mode}", ["--sampling-defaults", mode])
        if started is None:
            return
        server, port, log_path = started
        try:
            runs = [post(port, "/v1/chat/completions", dict(chat, seed=s)) for s in (1, 2, 3)]
            greedy = post(port, "/v1/chat/completions", dict(chat, temperature=0))
            outputs[mode] = ([r[1]["choices"][0]["message"]["content"] for r in runs if r[0] == 200],
                             greedy[1]["choices"][0]["message"]["content"] if greedy[0] == 200 else None)
            logged = "Using default chat sampling params from model generation config" in open(log_path).read()
            check(f"--sampling-defaults {mode}: the start-up line {'is' if mode == 'model' else 'is not'} there",
                  logged == (mode == "model"))
        finally:
            stop_server(server)
    runs, greedy = outputs["model"]
    check("--sampling-defaults model: generation_config.json's temperature 0 makes unset chat requests greedy",
          len(runs) == 3 and all(r == greedy for r in runs), str(outputs["model"]))
    runs, greedy = outputs["openai"]
    check("--sampling-defaults openai: they sample (seeds 1-3 are not all the greedy text)",
          len(runs) == 3 and not all(r == greedy for r in runs), str(outputs["openai"]))


def check_preferred_sampling_params(tessera, model, workdir):
    """--preferred-sampling-params: /generate requests start from them and their own keys win;
    /model_info reports them with --weight-version and the model's type; a key tessera does
    not apply stops the launch with a message naming it."""
    bad = subprocess.run([tessera, "serve", "--model-path", model, "--preferred-sampling-params",
                          '{"repetition_penalty": 1.1}'], capture_output=True, text=True, timeout=60)
    check("--preferred-sampling-params with an unknown key stops the launch, naming the key",
          bad.returncode != 0 and "'repetition_penalty' is not a sampling parameter" in bad.stderr + bad.stdout,
          (bad.stderr + bad.stdout)[-500:])
    preferred = {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}
    started = start_side_server(tessera, model, workdir, "preferred_sampling",
                                ["--preferred-sampling-params", json.dumps(preferred), "--weight-version", "v7",
                                 "--enable-metrics", "--extra-metric-labels", '{"cluster": "east"}'])
    if started is None:
        return
    server, port, _ = started
    try:
        status, info = request(port, "GET", "/model_info")
        info = json.loads(info) if status == 200 else {}
        config = json.load(open(os.path.join(model, "config.json")))
        check("/model_info reports the preferred params, the weight version and the model",
              info.get("preferred_sampling_params") == preferred and info.get("weight_version") == "v7"
              and info.get("model_type") == config["model_type"]
              and info.get("architectures") == config["architectures"][:1] and info.get("is_generation") is True,
              str(info))
        _, metrics = request(port, "GET", "/metrics")
        metrics = metrics.decode()
        check("--extra-metric-labels: the engine's and the HTTP metrics carry the label",
              'sglang:num_running_reqs{model_name="tiny",cluster="east"}' in metrics
              and 'sglang:prompt_tokens_total{model_name="tiny",cluster="east"}' in metrics, metrics[-1500:])
        status, bare = post(port, "/generate", {"input_ids": [5, 6, 7]})
        status_own, own = post(port, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 5}})
        check("/generate without sampling_params takes the preferred max_new_tokens 3; a request's own 5 wins",
              status == 200 and status_own == 200 and len(bare.get("output_ids", [])) == 3
              and len(own.get("output_ids", [])) == 5 and own["output_ids"][:3] == bare["output_ids"],
              f"{bare} {own}")
    finally:
        stop_server(server)


def check_skip_tokenizer_init(tessera, model, port, workdir):
    """--skip-tokenizer-init serves a copy of the model without its tokenizer files: /generate
    takes input_ids and answers the output_ids the main server samples with the same seed, without text;
    text prompts, stop strings and the OpenAI routes are refused with a 400."""
    bare_model = os.path.join(workdir, "model_without_tokenizer")
    if not os.path.exists(bare_model):
        shutil.copytree(model, bare_model)
        for name in os.listdir(bare_model):
            if name.startswith("tokenizer") or name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
                os.remove(os.path.join(bare_model, name))
    started = start_side_server(tessera, bare_model, workdir, "skip_tokenizer", ["--skip-tokenizer-init", *MODEL_FLAGS])
    if started is None:
        return
    server, side_port, _ = started
    seeded = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 6, "sampling_seed": 7, "ignore_eos": True}}
    try:
        status, body = post(side_port, "/generate", seeded)
        ref_status, ref = post(port, "/generate", seeded)
        check("--skip-tokenizer-init: /generate answers output_ids, no text, equal to the main server's",
              status == 200 and ref_status == 200 and "text" not in body
              and body.get("output_ids") == ref.get("output_ids") and len(body["output_ids"]) == 6, f"{body} {ref}")
        refused = [post(side_port, "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 2}}),
                   post(side_port, "/generate", {"input_ids": [5], "sampling_params": {"stop": ["x"]}}),
                   post(side_port, "/v1/chat/completions",
                        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})]
        check("--skip-tokenizer-init: text, stop strings and chat are refused with a 400 naming the flag",
              all(st == 400 and "--skip-tokenizer-init" in json.dumps(b) for st, b in refused), str(refused))
    finally:
        stop_server(server)


def check_stalled_rank(tessera, model, workdir):
    """Rank 1 of a TP2 server stopped with SIGSTOP: the next request fails with a 503 naming the
    stall, and the whole job exits 1 within --dist-timeout instead of failing every request
    one timeout at a time."""
    stall_port = free_port()
    log_path = os.path.join(workdir, "server_stalled.log")
    log = open(log_path, "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                               "--port", str(stall_port), "--threads", "1", "--tp", "2", "--dist-timeout", "3",
                               *(["--api-key", AUTH["Authorization"][7:]] if AUTH else [])],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_ready(stall_port, server):
            check("stalled-rank server starts", False, open(log_path).read()[-2000:])
            return
        ranks = subprocess.run(["ps", "-o", "pid=", "--ppid", str(server.pid)], capture_output=True,
                               text=True).stdout.split()
        check("the TP2 server runs two rank processes", len(ranks) == 2, str(ranks))
        if len(ranks) != 2:
            return
        os.kill(int(ranks[-1]), signal.SIGSTOP)
        t0 = time.time()
        status, body = request(stall_port, "POST", "/generate", {"input_ids": [5, 6, 7], "sampling_params": {
            "max_new_tokens": 4, "temperature": 0}}, timeout=60)
        try:
            rc = server.wait(60)
        except subprocess.TimeoutExpired:
            rc = None
        elapsed = time.time() - t0
        text = open(log_path).read()
        check("a request to a job with a stalled rank gets a 503", status == 503, f"{status} {body[:300]!r}")
        check("the job with a stalled rank exits 1 within the timeout", rc == 1 and elapsed < 30, f"{rc} {elapsed:.1f} s")
        check("the log names the stalled rank", "stopping the job" in text and "rank 1" in text, text[-1500:])
    finally:
        for pid in subprocess.run(["ps", "-o", "pid=", "--ppid", str(server.pid)], capture_output=True,
                                  text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop_server(server)
        log.close()


def run_checks(tessera, model, port, tp):
    # /v1/models and health.
    status, body = request(port, "GET", "/v1/models")
    models = json.loads(body)
    check("/v1/models lists the served name and max_model_len",
          status == 200 and models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 4096, body)
    check("/health_generate", request(port, "GET", "/health_generate")[0] == 200)

    # Hostile bodies: 10^5 nested arrays in a message, in a tool's parameters and in
    # chat_template_kwargs get a 400 naming the limit and the server keeps serving; a
    # text/plain body (what a web page can post cross-origin) gets a 415.
    deep = "[" * 100000 + "]" * 100000
    for where, raw in (("message", '{"messages": [{"role": "user", "content": %s}]}' % deep),
                       ("tools", '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
                                 '"function": {"name": "f", "parameters": {"a": %s}}}]}' % deep),
                       ("chat_template_kwargs", '{"messages": [{"role": "user", "content": "hi"}], '
                                                '"chat_template_kwargs": {"x": %s}}' % deep)):
        status, payload = request(port, "POST", "/v1/chat/completions", raw=raw.encode())
        check(f"deep nesting in {where}: 400 naming the limit",
              status == 400 and b"nests deeper than 128 levels" in payload, f"{status} {payload[:200]}")
    check("still healthy after the hostile bodies", request(port, "GET", "/health")[0] == 200)
    # logit_bias: +100 forces token 42 at every greedy step (on every rank layout: the bias
    # travels with the step to the sampling stage); an id outside the vocabulary is a 400.
    status, body = post(port, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "ignore_eos": True, "logit_bias": {"42": 100}}})
    check("logit_bias +100 forces the token", status == 200 and body["output_ids"] == [42] * 4, f"{status} {body}")
    status, body = post(port, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 1,
                                                   "logit_bias": {str(10 ** 8): 5}})
    check("logit_bias id outside the vocabulary: 400", status == 400, f"{status} {body}")
    status, _ = request(port, "POST", "/v1/completions", raw=b'{"prompt": "hi", "max_tokens": 1}',
                        headers={"Content-Type": "text/plain", **AUTH})
    check("text/plain body: 415", status == 415, str(status))
    if AUTH:
        status, payload = request(port, "GET", "/v1/models", headers={})
        check("no API key: 401", status == 401 and b"invalid_api_key" in payload, f"{status} {payload[:200]}")
        status, _ = request(port, "POST", "/v1/completions", body={"prompt": "hi", "max_tokens": 1},
                            headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"})
        check("wrong API key: 401", status == 401, str(status))
        check("/health needs no key", request(port, "GET", "/health", headers={})[0] == 200)

    # Greedy and seeded sampled outputs equal `tessera generate` for the same ids, run there
    # without overlap scheduling (the server overlaps unless told not to: the sampler's step
    # count and penalties must see the token the step before sampled).
    prompt_ids = [9707, 11, 1879, 0, 358, 1079, 264, 4128, 1614, 13, 220, 16, 17, 18]
    # Sampling shows the last bits of a logit, which another summation order changes: sampled
    # tokens are compared only where `generate` runs the server's layout (it has no EP flags),
    # and with the whole prompt computed, as `generate` does.
    for temperature in (0, 0.8) if SAME_LAYOUT_AS_GENERATE else (0,):
        post(port, "/flush_cache", {})
        gen = subprocess.run([tessera, "generate", "--model-path", model, "--prompt-ids", ",".join(map(str, prompt_ids)),
                              "--max-new-tokens", "12", "--ignore-eos", "--json", "--threads", "1", "--tp", str(tp),
                              "--temperature", str(temperature), "--seed", "5", "--disable-overlap-schedule",
                              *MODEL_FLAGS],
                             capture_output=True, text=True)
        expected = json.loads(gen.stdout)["output_ids"] if gen.returncode == 0 else gen.stderr[-300:]
        status, body = post(port, "/generate", {"input_ids": prompt_ids, "sampling_params": {
            "max_new_tokens": 12, "temperature": temperature, "sampling_seed": 5,
            "ignore_eos": True} if temperature else {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}})
        check(f"/generate at temperature {temperature} equals tessera generate",
              status == 200 and body["output_ids"] == expected, f"{status} {body} vs {expected}")

    # --stream-interval k (and a request's sampling_params.stream_interval): a chunk goes out
    # at output tokens 1, k + 1, 2k + 1, ... and at the end, each with every token since the
    # last; the ids are those of the unstreamed request.
    def chunk_ends(k, n):
        return [t for t in range(1, n + 1) if k == 1 or t % k == 1 or t == n]

    status, body = post(port, "/generate", {"input_ids": prompt_ids, "sampling_params": {
        "max_new_tokens": 10, "temperature": 0, "ignore_eos": True}})
    whole = body["output_ids"] if status == 200 else body
    for label, extra in ((f"the server's --stream-interval {STREAM_INTERVAL}", {}),
                         ("sampling_params.stream_interval 4", {"stream_interval": 4})):
        events, done = stream(port, "/generate", {"input_ids": prompt_ids, "stream": True, "sampling_params": {
            "max_new_tokens": 10, "temperature": 0, "ignore_eos": True, **extra}})
        lengths = [len(e["output_ids"]) for e in events]
        want = chunk_ends(extra.get("stream_interval", STREAM_INTERVAL), 10)
        check(f"{label}: chunks end at tokens {want}, with the unstreamed ids",
              done and lengths == want and events and events[-1]["output_ids"] == whole, f"{lengths} {whole}")

    # Chat, non-streaming and streaming, give the same text.
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me about tessellation."}],
            "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    status, body = post(port, "/v1/chat/completions", chat)
    full = body["choices"][0]["message"]["content"] if status == 200 else None
    check("chat completion", status == 200 and body["usage"]["completion_tokens"] == 10 and
          body["choices"][0]["finish_reason"] == "length", str(body)[:300])
    events, done = stream(port, "/v1/chat/completions", dict(chat, stream=True, stream_options={"include_usage": True}))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    usage = [e["usage"] for e in events if e.get("usage")]
    check("streamed chat equals non-streamed", done and text == full and usage and usage[-1]["completion_tokens"] == 10,
          f"{done} {text!r} vs {full!r} {usage}")
    status, body = post(port, "/v1/completions", {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5,
                                                  "temperature": 0})
    check("text completion", status == 200 and body["object"] == "text_completion" and
          body["usage"]["completion_tokens"] <= 5, str(body)[:300])

    # 32 concurrent streaming clients.
    results = [None] * 32

    def client(i):
        ev, ok = stream(port, "/v1/completions", {"model": "tiny", "prompt": f"client {i} says", "max_tokens": 16,
                                                  "temperature": 0.8, "seed": i, "ignore_eos": True, "stream": True,
                                                  "stream_options": {"include_usage": True}})
        u = [e["usage"] for e in ev if e.get("usage")]
        results[i] = ok and u and u[-1]["completion_tokens"] == 16
    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check("32 concurrent streams finish with 16 tokens each", all(results), str(results))

    # Prefix cache: the second request with the same long prefix reports cached tokens.
    prefix = "The quick brown fox jumps over the lazy dog. " * 12
    post(port, "/v1/completions", {"model": "tiny", "prompt": prefix + "First.", "max_tokens": 2, "temperature": 0})
    status, body = post(port, "/v1/completions", {"model": "tiny", "prompt": prefix + "Second.", "max_tokens": 2,
                                                  "temperature": 0})
    cached = body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) if status == 200 else 0
    check("repeated prefix is a cache hit", cached >= 100, f"cached_tokens={cached}")

    # Bad inputs: 4xx with an OpenAI error body; the server keeps serving.
    bad = [
        ("malformed JSON", request(port, "POST", "/v1/chat/completions", raw=b"{not json")),
        ("wrong type", request(port, "POST", "/v1/chat/completions", {"model": "tiny", "messages": "hi"})),
        ("unknown model", request(port, "POST", "/v1/chat/completions",
                                  {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})),
        ("negative max_tokens", request(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x",
                                                                          "max_tokens": -3})),
        ("huge max_tokens", request(port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x",
                                                                      "max_tokens": 10 ** 12})),
        ("prompt + max_tokens over the context", request(port, "POST", "/v1/completions",
                                                         {"model": "tiny", "prompt": "x", "max_tokens": 4095})),
        ("empty messages", request(port, "POST", "/v1/chat/completions", {"model": "tiny", "messages": []})),
        ("invalid UTF-8", request(port, "POST", "/v1/completions",
                                  raw=b'{"model": "tiny", "prompt": "\xff\xfe", "max_tokens": 2}')),
        ("token id outside the vocabulary", request(port, "POST", "/generate", {"input_ids": [10 ** 8]})),
    ]
    for name, (status, payload) in bad:
        try:
            err = json.loads(payload).get("error", {})
        except ValueError:
            err = {}
        check(f"bad input: {name}", 400 <= status < 500 and err.get("message"), f"{status} {payload[:200]}")
    check("still serving after bad inputs", post(port, "/v1/completions", {"model": "tiny", "prompt": "ok",
                                                                           "max_tokens": 1})[0] == 200)

    # A client that disconnects mid-stream: its request is aborted and the pool is whole.
    stream(port, "/v1/completions", {"model": "tiny", "prompt": "long story", "max_tokens": 2000,
                                     "ignore_eos": True, "stream": True}, stop_after=3)
    whole = False
    for _ in range(50):
        post(port, "/flush_cache", {})
        whole, state = pool_is_whole(port)
        if whole:
            break
        time.sleep(0.1)
    check("disconnect frees the KV", whole, str(state))
    status, metrics = request(port, "GET", "/metrics")
    check("/metrics has SGLang's names", status == 200 and b"sglang:num_running_reqs" in metrics and
          b"sglang:token_usage" in metrics)


if __name__ == "__main__":
    sys.exit(main())
