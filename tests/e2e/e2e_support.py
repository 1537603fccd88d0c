"""What the end-to-end scripts share: their command line, a check counter, a free loopback
port, the tiny test model with a real tokenizer, a `tessera serve` on it, and waiting for a
started server to answer GET /health."""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

# The serving benchmarks' helpers (bench/serve_support.py) are the ones these tests need too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import serve_support  # noqa: E402
from serve_support import prometheus_values  # noqa: E402,F401  (re-exported for the e2e scripts)


class Checks:
    """Counts passed checks and prints each failure with its detail."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def __call__(self, name, ok, detail=""):
        """Counts one check; returns whether it passed."""
        if ok:
            self.passed += 1
        else:
            self.failures.append(name)
            print(f"FAIL: {name} {detail}")
        return bool(ok)

    def summary(self):
        return f"{self.passed} passed, {len(self.failures)} failed"

    def report(self):
        """Prints the summary; the script's exit code: 0 when every check passed, else 1."""
        print(self.summary())
        return 1 if self.failures else 0


def call(port, method, path, body=None, timeout=60, headers=None):
    """One HTTP request with a JSON body (or none) to 127.0.0.1:port: (status, body text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                 headers={"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    return r.status, data


class StreamingRequest(threading.Thread):
    """/generate with stream true in the background: the tokens as they arrive."""

    def __init__(self, port, prompt, max_new_tokens):
        super().__init__(daemon=True)
        self.port, self.prompt, self.max_new_tokens = port, prompt, max_new_tokens
        self.ids, self.finish_reason, self.error = [], None, None

    def run(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            body = {"input_ids": self.prompt, "stream": True,
                    "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0, "ignore_eos": True}}
            conn.request("POST", "/generate", body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                self.ids = event.get("output_ids", self.ids)
                reason = (event.get("meta_info") or {}).get("finish_reason")
                if reason:
                    self.finish_reason = reason.get("type")
            conn.close()
        except Exception as e:  # noqa: BLE001 -- reported as a failed check
            self.error = repr(e)


def post_json(port, path, body):
    """POST a JSON body: (status, the parsed answer, or its text when it is not JSON)."""
    status, text = call(port, "POST", path, body)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def script_options(doc, switches=None):
    """The e2e scripts' command line, --tessera BINARY --workdir DIR and the script's own
    switches ({"--layouts": help}): the parsed options, tessera made absolute, the work folder
    created."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    for name, help_text in (switches or {}).items():
        ap.add_argument(name, action="store_true", help=help_text)
    a = ap.parse_args()
    a.tessera = os.path.abspath(a.tessera)
    os.makedirs(a.workdir, exist_ok=True)
    return a


def script_args(doc):
    """script_options without switches: the binary's absolute path and the work folder."""
    a = script_options(doc)
    return a.tessera, a.workdir


def streaming_started(port, prompt, max_new_tokens, tokens=3, timeout=60.0):
    """A StreamingRequest, returned once it streamed `tokens` tokens (or after `timeout`)."""
    req = StreamingRequest(port, prompt, max_new_tokens)
    req.start()
    deadline = time.time() + timeout
    while time.time() < deadline and len(req.ids) < tokens and req.is_alive():
        time.sleep(0.01)
    return req


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tiny_model(tessera, workdir, arch="qwen3", extra=()):
    """`make-model --preset tiny` (f32, Qwen3's tokenizer, seed 5, then `extra`) into WORKDIR/model."""
    model = os.path.join(workdir, "model")
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--tokenizer", "qwen3",
                    "--dtype", "f32", "--seed", "5", "--out", model, *extra], check=True, capture_output=True)
    return model


def stop_server(server):
    """SIGTERM (the server drains), then SIGKILL if it has not exited within 30 s."""
    serve_support.stop_server(server, timeout_s=30)


def wait_ready(port, proc, timeout=120):
    """True once GET /health answers 200; False if the process exits or the time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


class Server:
    """`tessera serve MODEL` on a free 127.0.0.1 port, one thread, its log in `log_path`. Always
    close() it (try/finally), even when the test fails."""

    def __init__(self, tessera, model, flags, log_path):
        self.port = free_port()
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([tessera, "serve", "--model-path", model, "--served-model-name", "tiny",
                                      "--port", str(self.port), "--threads", "1", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def ready(self):
        """True once it answers; otherwise prints the end of its log."""
        if wait_ready(self.port, self.proc):
            return True
        print(open(self.log_path).read()[-3000:])
        return False

    def post(self, path, body):
        return post_json(self.port, path, body)

    def stream(self, path, body):
        """POST `body` with "stream": true: (status, the parsed `data:` payloads before [DONE])."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        lines = r.read().decode().splitlines()
        conn.close()
        payloads = [line[6:] for line in lines if line.startswith("data: ") and line != "data: [DONE]"]
        return r.status, [json.loads(p) for p in payloads]

    def close(self):
        stop_server(self.proc)
        self.log.close()


def with_server(check, name, tessera, model, flags, log_path, checks):
    """A Server for `checks(server)`, run once it is ready (a failed start is a failed check named
    `name`), and stopped whatever happens."""
    server = Server(tessera, model, flags, log_path)
    try:
        if check(f"{name}: server ready", server.ready()):
            checks(server)
    finally:
        server.close()
