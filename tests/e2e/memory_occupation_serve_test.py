#!/usr/bin/python3
"""/release_memory_occupation and /resume_memory_occupation (SGLang's, for RL: a trainer on the
same machine takes the memory between rollouts), as a client drives them over HTTP:

  release    with --enable-memory-saver (a 2-layer `small` Qwen3, bf16): 200 with a null body;
             the server's resident memory falls by at least 0.9 of the weights it holds; a request
             sent meanwhile waits; a second release is refused while that request waits.
  resume     tags ["weights"]: the weights are read again from the served folder, the request
             still waits for the KV cache; tags ["kv_cache"]: it runs, with the greedy tokens
             the server gave before the release.
  update     /update_weights_from_disk while the weights are released brings them back.
  gone       the served folder moved away at resume: 400 naming it, the weights stay released;
             back in place, the resume loads them.
  busy       a release while a request runs: 400 with SGLang's "should be called only when
             server is idle"; the request finishes.
  no saver   without --enable-memory-saver (as SGLang's no-op adapter): 200, the prefix cache
             flushed, nothing released, requests served at once.
  errors     an unknown tag: 400 naming the valid ones; GET: 405.
  layouts    (parallel label) TP2, PP2, --dp-size 2 and DP-attention (TP2 x DP2) with the
             saver: release, every rank process's resident memory falls, a request waits,
             resume, one rank's tokens. Under DP-attention a release while one group runs a
             request is refused, and both groups serve on.

Usage: memory_occupation_serve_test.py --tessera PATH --workdir DIR [--layouts]
Exit 0 pass, 1 fail.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time

from e2e_support import Checks, Server, call, script_options, streaming_started

check = Checks()
PROMPT = [3, 14, 15, 92, 65, 35]


def make_model(tessera, out, extra):
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([tessera, "make-model", "--arch", "qwen3", "--seed", "5", "--out", out, *extra], check=True,
                       capture_output=True)
    return out


def greedy(port, prompt=PROMPT, n=8):
    status, text = call(port, "POST", "/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=120)
    return json.loads(text)["output_ids"] if status == 200 else f"HTTP {status}: {text}"


def memory(port, what, tags=None):
    """POST /{what}_memory_occupation: (status, body text)."""
    return call(port, "POST", f"/{what}_memory_occupation", {} if tags is None else {"tags": tags}, timeout=300)


def resident_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rank_pids(pid):
    """The rank processes the launcher started (or the server itself when it runs one rank)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = [int(c) for c in f.read().split()]
    return children or [pid]


def release_while_busy(name, port, tokens):
    """A release sent while a request streams is refused with SGLang's message; the request
    finishes."""
    long_req = streaming_started(port, PROMPT, tokens)
    status, text = memory(port, "release")
    check(f"{name}: a release while a request runs is refused (400, SGLang's message)",
          status == 400 and "should be called only when server is idle" in text, f"{status} {text}")
    long_req.join(120)
    check(f"{name}: the request finishes", long_req.finish_reason == "length", long_req.finish_reason)


class Background(threading.Thread):
    """A call in the background: its result once done."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result = fn, None
        self.start()

    def run(self):
        self.result = self.fn()


def saver(tessera, workdir, model):
    file_mb = os.path.getsize(os.path.join(model, "model.safetensors")) / 2**20
    server = Server(tessera, model, ["--enable-memory-saver"], os.path.join(workdir, "saver.log"))
    try:
        if not check("saver: server ready", server.ready()):
            return
        port, pid = server.port, server.proc.pid
        before = greedy(port)
        check("saver: greedy tokens", isinstance(before, list), before)
        served_mb = resident_mb(pid)

        status, text = memory(port, "release")
        check("release: 200 with a null body", status == 200 and text == "null", f"{status} {text}")
        released_mb = resident_mb(pid)
        # What the rank holds (the log's count): the tied embedding is also kept packed for the LM head.
        held = re.search(r"weights released: ([0-9.]+) MB", open(server.log_path).read())
        weights_mb = float(held.group(1)) * 1e6 / 2**20 if held else float("inf")
        check(f"release: resident memory falls by >= 0.9 of the weights held ({weights_mb:.0f} MB)",
              served_mb - released_mb >= 0.9 * weights_mb, f"{served_mb:.0f} MB -> {released_mb:.0f} MB")
        waiting = Background(lambda: greedy(port))
        time.sleep(0.5)
        check("release: a request sent meanwhile waits", waiting.result is None, waiting.result)
        status, text = memory(port, "release")
        check("release: a second release is refused while a request waits",
              status == 400 and "should be called only when server is idle" in text, f"{status} {text}")

        status, text = memory(port, "resume", ["weights"])
        check("resume weights: 200", status == 200 and text == "null", f"{status} {text}")
        check("resume weights: resident memory holds the weights again",
              resident_mb(pid) - released_mb >= 0.9 * weights_mb, f"{released_mb:.0f} MB -> {resident_mb(pid):.0f} MB")
        time.sleep(0.3)
        check("resume weights: the request still waits for the KV cache", waiting.result is None, waiting.result)
        print(f"resident memory: {served_mb:.0f} MB served, {released_mb:.0f} MB released, "
              f"{resident_mb(pid):.0f} MB with the weights resumed ({weights_mb:.0f} MB of weights held, "
              f"a {file_mb:.0f} MB file)")
        status, text = memory(port, "resume", ["kv_cache"])
        check("resume kv_cache: 200", status == 200 and text == "null", f"{status} {text}")
        waiting.join(120)
        check("resume: the waiting request ran, with the tokens of before", waiting.result == before,
              f"{waiting.result} vs {before}")
        check("resume: new requests too", greedy(port) == before)

        status, text = memory(port, "release", ["weights"])
        check("update: weights released", status == 200, f"{status} {text}")
        status, text = call(port, "POST", "/update_weights_from_disk", {"model_path": model}, timeout=300)
        check("update: /update_weights_from_disk loads them back", status == 200 and '"success":true' in text,
              f"{status} {text}")
        check("update: the same tokens", greedy(port) == before)

        # The served folder gone at resume: refused, the weights stay released until it is back.
        status, text = memory(port, "release", ["weights"])
        os.rename(model, model + ".moved")
        try:
            status, text = memory(port, "resume", ["weights"])
        finally:
            os.rename(model + ".moved", model)
        check("folder gone: the resume is refused naming the folder",
              status == 400 and "could not load the weights of " + model + " again" in text and
              "they stay released" in text and "Rolling back" not in text, f"{status} {text}")
        status, text = memory(port, "resume", ["weights"])
        check("folder back: the resume loads them", status == 200 and greedy(port) == before, f"{status} {text}")

        release_while_busy("busy", port, 400)

        status, text = memory(port, "release", ["weights", "gpu"])
        check("errors: an unknown tag is refused naming the valid ones",
              status == 400 and "'weights', 'kv_cache' or 'cuda_graph'" in text, f"{status} {text}")
        status, _ = call(port, "GET", "/release_memory_occupation")
        check("errors: GET is 405", status == 405, status)
        log = open(server.log_path).read()
        check("the log says what was released and loaded again",
              "weights released" in log and "the weights of " + model + " loaded again" in log, log[-3000:])
    finally:
        server.close()


def no_saver(tessera, workdir, model):
    server = Server(tessera, model, [], os.path.join(workdir, "no_saver.log"))
    try:
        if not check("no saver: server ready", server.ready()):
            return
        port, pid = server.port, server.proc.pid
        before = greedy(port)
        served_mb = resident_mb(pid)
        status, text = memory(port, "release")
        check("no saver: release answers 200", status == 200 and text == "null", f"{status} {text}")
        check("no saver: nothing released", resident_mb(pid) > 0.9 * served_mb,
              f"{served_mb:.0f} MB -> {resident_mb(pid):.0f} MB")
        check("no saver: requests are served at once", greedy(port) == before)
        log = open(server.log_path).read()
        check("no saver: the log says the cache was flushed and nothing released",
              "prefix cache flushed; nothing released: start with --enable-memory-saver" in log, log[-2000:])
        status, text = memory(port, "resume")
        check("no saver: resume answers 200", status == 200 and text == "null", f"{status} {text}")
    finally:
        server.close()


def layouts(tessera, workdir, model):
    for name, flags, ranks in (("tp2", ["--tp-size", "2"], 2), ("pp2", ["--pp-size", "2"], 2),
                               ("dp2", ["--dp-size", "2"], 2),
                               ("dpa", ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"], 2)):
        server = Server(tessera, model, ["--enable-memory-saver", *flags], os.path.join(workdir, f"{name}.log"))
        try:
            if not check(f"{name}: server ready", server.ready()):
                continue
            port = server.port
            before = greedy(port)
            pids = rank_pids(server.proc.pid)
            served = [resident_mb(p) for p in pids]
            status, text = memory(port, "release")
            check(f"{name}: release 200", status == 200 and text == "null", f"{status} {text}")
            released = [resident_mb(p) for p in pids]
            # Each rank holds at least half of the 78 MB embedding and LM head of the tiny model.
            check(f"{name}: every rank's resident memory falls by its weights",
                  len(pids) == ranks and all(s - r >= 30 for s, r in zip(served, released)),
                  f"{len(pids)} ranks: {served} MB -> {released} MB")
            waiting = Background(lambda: greedy(port))
            time.sleep(0.5)
            check(f"{name}: a request waits while released", waiting.result is None, waiting.result)
            status, text = memory(port, "resume")
            check(f"{name}: resume 200", status == 200 and text == "null", f"{status} {text}")
            waiting.join(120)
            check(f"{name}: one rank's tokens after the resume", waiting.result == before and greedy(port) == before,
                  f"{waiting.result} vs {before}")
            resumed = [resident_mb(p) for p in pids]
            print(f"{name}: resident MB per rank: served {served}, released {released}, resumed {resumed}")
            check(f"{name}: every rank holds its weights again",
                  all(a - r >= 30 for a, r in zip(resumed, released)), f"{released} MB -> {resumed} MB")
        finally:
            server.close()

    # DP-attention: the groups release together; a group that is busy refuses, and the other
    # gives up waiting for it with a message.
    server = Server(tessera, model, ["--enable-memory-saver", "--tp-size", "2", "--dp-size", "2",
                                     "--enable-dp-attention"], os.path.join(workdir, "dpa_busy.log"))
    try:
        if check("dpa busy: server ready", server.ready()):
            port = server.port
            before = greedy(port)
            release_while_busy("dpa busy", port, 300)
            check("dpa busy: both groups still serve, with the tokens of before",
                  all(greedy(port) == before for _ in range(4)))
    finally:
        server.close()


def main():
    args = script_options(__doc__, {"--layouts": "TP2, PP2, --dp-size 2 and DP-attention"})
    tiny = make_model(args.tessera, os.path.join(args.workdir, "tiny"),
                      ["--preset", "tiny", "--tokenizer", "qwen3", "--dtype", "f32"])
    if args.layouts:
        layouts(args.tessera, args.workdir, tiny)
    else:
        small = make_model(args.tessera, os.path.join(args.workdir, "small2"),
                           ["--preset", "small", "--num-layers", "2", "--dtype", "bf16"])
        saver(args.tessera, args.workdir, small)
        no_saver(args.tessera, args.workdir, tiny)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
