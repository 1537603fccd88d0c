#!/usr/bin/python3
"""/pause_generation and /continue_generation (SGLang's, for RL weight updates), as a client drives
them over HTTP on a tiny Qwen3 (f32):

  in_place   a streaming request stops producing tokens while paused; a request sent meanwhile
             waits; after /continue_generation both finish, the first with the tokens of an
             unpaused run.
  retract    the same with mode retract: the running request gives up its KV (a retraction on
             /metrics) and finishes with the same tokens after continue.
  abort      the default mode ends the running request with finish_reason abort; one sent while
             paused waits and runs after continue.
  errors     a bad mode is a 400 naming the field; GET is a 405; with --admin-api-key the routes
             want the admin key (401 without).
  drain      SIGTERM while paused with a queued request: the server continues, the request
             finishes and the process exits 0.
  dp         --dp-size 2 behind the front, and TP2 with DP attention 2: a pause reaches every
             scheduler (requests on both wait), continue releases them with one rank's tokens.

Usage: pause_serve_test.py --tessera PATH --workdir DIR
Exit 0 pass, 1 fail.
"""

import http.client
import json
import os
import threading
import time

from e2e_support import Checks, Server, StreamingRequest, call, make_tiny_model, script_args

check = Checks()
PROMPT = [3, 14, 15, 92, 65, 35]
LONG = 1500  # tokens: long enough to pause mid-way on the tiny model
PAUSED_FOR = 0.8  # seconds a paused server is watched for progress


class Request(threading.Thread):
    """A plain /generate in the background."""

    def __init__(self, port, prompt, max_new_tokens=8, headers=None):
        super().__init__(daemon=True)
        self.port, self.prompt, self.max_new_tokens = port, prompt, max_new_tokens
        self.status, self.answer = None, None

    def run(self):
        self.status, text = call(self.port, "POST", "/generate",
                                 {"input_ids": self.prompt, "sampling_params": {
                                     "max_new_tokens": self.max_new_tokens, "temperature": 0, "ignore_eos": True}},
                                 timeout=120)
        self.answer = json.loads(text) if self.status == 200 else text


def greedy(port, prompt, n):
    status, text = call(port, "POST", "/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=120)
    return json.loads(text)["output_ids"] if status == 200 else f"HTTP {status}: {text}"


def wait_for(cond, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline and not cond():
        time.sleep(0.01)
    return cond()


def retractions(port):
    _, text = call(port, "GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sglang:num_retractions{"))


def paused_run(port, mode, reference, name):
    """A long streaming request paused in `mode` mid-way, a short one sent while paused; both
    released by /continue_generation. Returns (long request, short request, pause answer)."""
    long_req = StreamingRequest(port, PROMPT, LONG)
    long_req.start()
    wait_for(lambda: len(long_req.ids) >= 5)
    status, answer = call(port, "POST", "/pause_generation", {} if mode is None else {"mode": mode})
    check(f"{name}: /pause_generation answers 200 with SGLang's body",
          status == 200 and json.loads(answer) == {"message": "Generation paused successfully.", "status": "ok"},
          f"{status} {answer}")
    time.sleep(0.2)  # tokens of the step collected by the pause may still be on their way
    before = len(long_req.ids)
    short = Request(port, [7, 7, 7, 1])
    short.start()
    time.sleep(PAUSED_FOR)
    if mode != "abort" and mode is not None:
        check(f"{name}: no token while paused", len(long_req.ids) == before and long_req.finish_reason is None,
              f"{before} -> {len(long_req.ids)} tokens, finish {long_req.finish_reason}")
    check(f"{name}: a request sent while paused waits", short.status is None, f"answered {short.status}")
    status, answer = call(port, "POST", "/continue_generation", {})
    check(f"{name}: /continue_generation answers 200 with SGLang's body",
          status == 200 and json.loads(answer) == {"message": "Generation continued successfully.", "status": "ok"},
          f"{status} {answer}")
    long_req.join(120)
    short.join(120)
    check(f"{name}: the request sent while paused runs after continue",
          short.status == 200 and short.answer["output_ids"] == reference["short"], f"{short.status} {short.answer}")
    return long_req


def single_server(tessera, model, workdir):
    server = Server(tessera, model, [], os.path.join(workdir, "pause.log"))
    try:
        if not check("server ready", server.ready()):
            return
        port = server.port
        reference = {"long": greedy(port, PROMPT, LONG), "short": greedy(port, [7, 7, 7, 1], 8)}

        long_req = paused_run(port, "in_place", reference, "in_place")
        check("in_place: the paused request finishes with the tokens of an unpaused run",
              long_req.finish_reason == "length" and long_req.ids == reference["long"],
              f"{long_req.finish_reason}, {len(long_req.ids)} tokens, error {long_req.error}")

        before = retractions(port)
        long_req = paused_run(port, "retract", reference, "retract")
        check("retract: the retracted request finishes with the tokens of an unpaused run",
              long_req.finish_reason == "length" and long_req.ids == reference["long"],
              f"{long_req.finish_reason}, {len(long_req.ids)} tokens, error {long_req.error}")
        check("retract: /metrics counts the retraction", retractions(port) >= before + 1,
              f"{before} -> {retractions(port)}")

        long_req = paused_run(port, None, reference, "abort (default)")
        check("abort: the running request ends with finish_reason abort",
              long_req.finish_reason == "abort" and len(long_req.ids) < LONG,
              f"{long_req.finish_reason}, {len(long_req.ids)} tokens")

        status, text = call(port, "POST", "/pause_generation", {"mode": "sleep"})
        check("a bad mode is a 400 naming the field", status == 400 and "mode" in text, f"{status} {text}")
        status, _ = call(port, "GET", "/pause_generation")
        check("GET /pause_generation is a 405", status == 405, status)
        check("still serving after the errors", greedy(port, [7, 7, 7, 1], 8) == reference["short"])

        # SIGTERM while paused with a queued request: draining continues generation.
        call(port, "POST", "/pause_generation", {"mode": "in_place"})
        queued = Request(port, [7, 7, 7, 1])
        queued.start()
        time.sleep(0.3)
        server.close()
        queued.join(60)
        check("SIGTERM while paused: the queued request finishes",
              queued.status == 200 and queued.answer["output_ids"] == reference["short"], f"{queued.status}")
        check("SIGTERM while paused: the server exits 0", server.proc.returncode == 0, server.proc.returncode)
    finally:
        server.close()


def admin_key(tessera, model, workdir):
    server = Server(tessera, model, ["--api-key", "user", "--admin-api-key", "admin"],
                    os.path.join(workdir, "pause_admin.log"))
    try:
        if not check("server with keys ready", server.ready()):
            return
        for path in ("/pause_generation", "/continue_generation"):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            for key, want in (("user", 401), ("admin", 200)):
                conn.request("POST", path, body="{}", headers={"Content-Type": "application/json",
                                                                "Authorization": f"Bearer {key}"})
                r = conn.getresponse()
                r.read()
                check(f"{path} with the {key} key: {want}", r.status == want, r.status)
            conn.close()
    finally:
        server.close()


def every_scheduler(tessera, model, workdir, name, flags):
    """Two requests spread over the front's schedulers, paused in place and continued."""
    server = Server(tessera, model, flags, os.path.join(workdir, f"pause_{name}.log"))
    try:
        if not check(f"{name}: server ready", server.ready()):
            return
        port = server.port
        prompts = [PROMPT, [11, 22, 33, 44]]
        expected = [greedy(port, p, 64) for p in prompts]
        status, _ = call(port, "POST", "/pause_generation", {"mode": "in_place"})
        check(f"{name}: pause through the front", status == 200, status)
        waiting = [Request(port, p, 64) for p in prompts]
        for r in waiting:
            r.start()
        time.sleep(PAUSED_FOR)
        check(f"{name}: requests on every scheduler wait while paused", all(r.status is None for r in waiting),
              [r.status for r in waiting])
        status, _ = call(port, "POST", "/continue_generation", {})
        for r in waiting:
            r.join(120)
        got = [r.answer["output_ids"] if r.status == 200 else r.status for r in waiting]
        check(f"{name}: continue releases them with the unpaused tokens", status == 200 and got == expected,
              f"{got} vs {expected}")
    finally:
        server.close()


def main():
    tessera, workdir = script_args(__doc__)
    model = make_tiny_model(tessera, workdir)
    single_server(tessera, model, workdir)
    admin_key(tessera, model, workdir)
    every_scheduler(tessera, model, workdir, "dp2", ["--dp-size", "2"])
    every_scheduler(tessera, model, workdir, "tp2 dpa2", ["--tp", "2", "--dp", "2", "--enable-dp-attention"])
    return check.report()


if __name__ == "__main__":
    raise SystemExit(main())
