"""What the serving benchmarks share: a free loopback port, waiting for a started
`tessera serve` to answer GET /health (exiting with a message when it dies first), and
stopping it."""

import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, server, timeout_s=300):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"tessera serve exited with {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("tessera serve did not become healthy in time")


def flush_cache(port):
    """Empties the server's prefix cache, so that a run's prompts are not hits of an earlier run's."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        if r.status != 200:
            sys.exit(f"/flush_cache answered {r.status}")


def prometheus_values(text):
    """Sample name (labels dropped) -> value, from the Prometheus text of /metrics."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    return values


def stop_server(server, timeout_s=60):
    """SIGTERM (the server drains), then SIGKILL if it has not exited within `timeout_s`."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout_s)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def run_bench_serve(tessera, port, model, out, concurrency, seed, workload, request_rate="inf"):
    """`tessera bench serve` against 127.0.0.1:port at --max-concurrency `concurrency`, all
    requests at once (or Poisson arrivals at `request_rate` per second), no warm-up; `workload`
    are the dataset / length flags. Returns the summary line it wrote to `out` (exits with its
    output on failure)."""
    cmd = [tessera, "bench", "serve", "--backend", "openai", "--port", str(port), "--model-path", model,
           "--request-rate", str(request_rate), "--max-concurrency", str(concurrency), "--seed", str(seed),
           "--warmup-requests", "0", "--disable-tqdm", "--output-file", out, *workload]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench serve failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(out) as f:
        return json.loads(f.readlines()[-1])
