#!/usr/bin/python3
"""Tensor parallelism end to end, through `tessera generate` as a user runs it.

  equivalence  TP = 2 and 4 (4 > the tiny models' 2 KV heads: replicated KV heads) give the
               same greedy tokens as TP = 1 and logits within 1e-3 (f32 weights: only the
               summation order of the all-reduces differs), for llama, qwen2 and qwen3.
  two-node     the same command twice, differing only in --node-rank, on loopback (ranks of
               different nodes talk over Gloo) gives the TP = 1 tokens.
  netns        two network namespaces joined by a veth pair (when run as root with `ip`): Gloo
               finds the veth by the route to --dist-init-addr; GLOO_SOCKET_IFNAME forces an
               interface (loopback makes the job fail, an unknown name is refused by name); a
               node never started is named; a node's rank stopped during start-up is named
               with its stage.
  kill         killing one rank mid-generation makes every process exit non-zero within the
               timeout, with a message naming the lost rank, and leaves no process behind.
  stranger     strangers on the rendezvous port are dropped; the job is untouched.
  absent-node  a node never started is named when --dist-timeout runs out.
  stalled-start  a rank stopped during start-up: resumed inside the timeout the job finishes;
               never resumed, the error says which start-up stage it was in.

Usage: tp_test.py --tessera PATH --case CASE --workdir DIR
Exit 0 pass, 1 fail, 77 skipped (CTest SKIP_RETURN_CODE).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

PROMPT = "3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79"
NEW_TOKENS = 16
LOGIT_TOLERANCE = 1e-3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(tessera, arch, workdir):
    out = os.path.join(workdir, arch)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--dtype", "f32", "--seed", "11",
                    "--out", out], check=True, capture_output=True)
    return out


def generate(tessera, model, extra, logits=None, timeout=120):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
           "--ignore-eos", "--json", "--threads", "1"] + extra
    if logits:
        cmd += ["--logits-out", logits]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)["output_ids"]


def same_as_one_rank(label, ids, base, logits, base_logits, tolerance=LOGIT_TOLERANCE):
    """Prints and returns whether a layout gave one rank's tokens, with logits within tolerance."""
    diff = float(np.abs(np.load(logits) - np.load(base_logits)).max())
    good = ids == base and diff < tolerance
    print(f"{label}: tokens {'same' if ids == base else 'DIFFER'}, max|logit diff| {diff:.2e} {'ok' if good else 'FAIL'}")
    if ids != base:
        print(f"  one rank: {base}\n  {label}: {ids}")
    return good


def equivalence(tessera, workdir):
    ok = True
    for arch in ("llama", "qwen2", "qwen3"):
        model = make_model(tessera, arch, workdir)
        base_logits = os.path.join(workdir, f"{arch}_tp1.npy")
        base = generate(tessera, model, ["--tp", "1"], base_logits)
        for tp in (2, 4):
            logits = os.path.join(workdir, f"{arch}_tp{tp}.npy")
            ids = generate(tessera, model, ["--tp", str(tp)], logits)
            ok &= same_as_one_rank(f"{arch} tp{tp}", ids, base, logits, base_logits)
    return ok


def two_node_commands(tessera, model, addr, new_tokens=NEW_TOKENS):
    common = ["--tp", "2", "--nnodes", "2", "--dist-init-addr", addr, "--dist-timeout", "20"]
    def cmd(node):
        return [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
                str(new_tokens), "--ignore-eos", "--json", "--threads", "1", "--node-rank", str(node)] + common
    return cmd(0), cmd(1)


def two_node(tessera, workdir):
    model = make_model(tessera, "qwen3", workdir)
    base = generate(tessera, model, ["--tp", "1"])
    node0, node1 = two_node_commands(tessera, model, f"127.0.0.1:{free_port()}")
    n1 = subprocess.Popen(node1, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p0 = subprocess.run(node0, capture_output=True, text=True, timeout=120)
        out1, err1 = n1.communicate(timeout=60)
    finally:
        if n1.poll() is None:
            n1.kill()
    if p0.returncode != 0 or n1.returncode != 0:
        print(f"node 0 exited {p0.returncode}:\n{p0.stderr[-2000:]}\nnode 1 exited {n1.returncode}:\n{err1[-2000:]}")
        return False
    ids = json.loads(p0.stdout)["output_ids"]
    gloo = "tp group over gloo" in p0.stderr
    print(f"two nodes x TP2 on loopback: tokens {'same' if ids == base else 'DIFFER'} as TP1; "
          f"cross-node group over gloo: {gloo}; node 1 printed {len(out1)} bytes (expected 0)")
    return ids == base and gloo and out1 == ""


def netns(tessera, workdir):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("netns: needs root and iproute2; skipped")
        return None
    tag = f"tsr{os.getpid() % 100000}"
    ns = [f"{tag}a", f"{tag}b"]
    setup = [
        ["ip", "netns", "add", ns[0]], ["ip", "netns", "add", ns[1]],
        ["ip", "link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb"],
        ["ip", "link", "set", f"{tag}va", "netns", ns[0]], ["ip", "link", "set", f"{tag}vb", "netns", ns[1]],
        ["ip", "-n", ns[0], "addr", "add", "10.233.0.1/24", "dev", f"{tag}va"],
        ["ip", "-n", ns[1], "addr", "add", "10.233.0.2/24", "dev", f"{tag}vb"],
        ["ip", "-n", ns[0], "link", "set", f"{tag}va", "up"], ["ip", "-n", ns[1], "link", "set", f"{tag}vb", "up"],
        ["ip", "-n", ns[0], "link", "set", "lo", "up"], ["ip", "-n", ns[1], "link", "set", "lo", "up"],
    ]
    try:
        for c in setup:
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"netns: '{' '.join(c)}' failed ({r.stderr.strip()}); skipped")
                return None
        model = make_model(tessera, "llama", workdir)
        base = generate(tessera, model, ["--tp", "1"])
        node0, node1 = two_node_commands(tessera, model, "10.233.0.1:29555")
        n1 = subprocess.Popen(["ip", "netns", "exec", ns[1]] + node1, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        try:
            p0 = subprocess.run(["ip", "netns", "exec", ns[0]] + node0, capture_output=True, text=True, timeout=120)
            _, err1 = n1.communicate(timeout=60)
        finally:
            if n1.poll() is None:
                n1.kill()
        if p0.returncode != 0 or n1.returncode != 0:
            print(f"netns node 0 exited {p0.returncode}:\n{p0.stderr[-2000:]}\nnode 1: {err1[-2000:]}")
            return False
        ids = json.loads(p0.stdout)["output_ids"]
        print(f"two network namespaces over a veth pair: tokens {'same' if ids == base else 'DIFFER'} as TP1 "
              "(Gloo found the veth by the route to --dist-init-addr)")
        ok = ids == base

        # GLOO_SOCKET_IFNAME forces the interface (as PyTorch); a name the host lacks is refused.
        def run_pair(if0, if1, timeout):
            env0, env1 = dict(os.environ, GLOO_SOCKET_IFNAME=if0), dict(os.environ, GLOO_SOCKET_IFNAME=if1)
            n1 = subprocess.Popen(["ip", "netns", "exec", ns[1]] + node1, env=env1, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
            try:
                p0 = subprocess.run(["ip", "netns", "exec", ns[0]] + node0, env=env0, capture_output=True, text=True,
                                    timeout=timeout)
                n1.communicate(timeout=timeout)
            finally:
                if n1.poll() is None:
                    n1.kill()
                    n1.wait()
            return p0
        p0 = run_pair(f"{tag}va", f"{tag}vb", 120)
        forced = p0.returncode == 0 and json.loads(p0.stdout)["output_ids"] == base
        print(f"GLOO_SOCKET_IFNAME={tag}va / {tag}vb: {'same tokens as TP1' if forced else 'FAIL: ' + p0.stderr[-1500:]}")
        # Forced onto loopback, node 0's Gloo address is one node 1 cannot reach: the job fails,
        # which shows the variable is obeyed rather than the route.
        node0[node0.index("--dist-timeout") + 1] = node1[node1.index("--dist-timeout") + 1] = "5"
        p0 = run_pair("lo", "lo", 60)
        obeyed = p0.returncode != 0
        print(f"GLOO_SOCKET_IFNAME=lo on both nodes: the job fails as it must: {obeyed}")
        p0 = run_pair("nosuchif0", "nosuchif0", 60)
        refused = p0.returncode != 0 and "GLOO_SOCKET_IFNAME=nosuchif0: this host has no interface" in p0.stderr
        print(f"GLOO_SOCKET_IFNAME=nosuchif0 refused with a message listing the interfaces: {refused}")
        if not refused:
            print(p0.stderr[-1500:])
        # Node 1 never started: node 0 names it when the timeout runs out.
        p0 = subprocess.run(["ip", "netns", "exec", ns[0]] + node0, capture_output=True, text=True, timeout=60)
        absent = p0.returncode != 0 and "rank 1 (node 1) did not arrive at the rendezvous store 10.233.0.1" in p0.stderr
        print(f"node 1 never started: node 0 names it: {absent}")
        if not absent:
            print(p0.stderr[-1500:])
        return ok and forced and obeyed and refused and absent and netns_stalled_start(tessera, workdir, ns)
    finally:
        # Private test addresses only exist inside the namespaces, which go away here.
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def netns_stalled_start(tessera, workdir, ns):
    """Node 1's rank stopped (SIGSTOP) right after the groups form across the namespaces: node
    0 ends when --dist-timeout runs out, saying which start-up stage rank 1 was in."""
    model = make_slow_loading_model(tessera, workdir)
    node0, node1 = two_node_commands(tessera, model, "10.233.0.1:29556")
    node0[node0.index("--dist-timeout") + 1] = node1[node1.index("--dist-timeout") + 1] = "4"
    n1 = subprocess.Popen(["ip", "netns", "exec", ns[1]] + node1, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    n0 = subprocess.Popen(["ip", "netns", "exec", ns[0]] + node0, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    try:
        head = wait_for_line(n0.stderr, "rank 0 of 2")
        stopped = children_of(n1.pid)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        _, err = n0.communicate(timeout=60)
        err = head + err
        named = "Where the other ranks were: rank 1 (node 1): " in err and \
            any(stage in err for stage in ("loading the model", "sizing the KV pool", "forming process groups"))
        good = n0.returncode != 0 and named and len(stopped) == 1
        print(f"node 1's rank stopped during start-up: node 0 exit {n0.returncode}, rank 1's stage named: {named} "
              f"{'ok' if good else 'FAIL'}")
        print("  node 0 said: " + next((l for l in err.splitlines() if "Where the other ranks were" in l), "(none)"))
        if not good:
            print(err[-2000:])
        return good
    except subprocess.TimeoutExpired:
        print("node 1's rank stopped during start-up: node 0 did not end within 60 s")
        return False
    finally:
        for p in (n0, n1):
            if p.poll() is None:
                p.kill()
            p.wait()


def children_of(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_line(stream, needle, timeout=30):
    """Reads `stream` until a line contains `needle`; returns everything read."""
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            break
    return "".join(seen)


def kill_node1_mid_run(node0, node1, started_line, settle_s=0.0):
    """Starts both nodes, kills node 1's ranks `settle_s` after node 0 logged `started_line`, and waits for
    node 0 to fail. Returns (node 0, node 1, node 0's stderr, seconds to exit, live leftover
    pids), or None (reported) when node 0 does not exit within 40 s."""
    n0 = subprocess.Popen(node0, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n1 = subprocess.Popen(node1, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head0 = wait_for_line(n0.stderr, started_line)
    time.sleep(settle_s)
    ranks0, ranks1 = children_of(n0.pid), children_of(n1.pid)
    for p in ranks1:
        os.kill(p, signal.SIGKILL)
    t0 = time.time()
    try:
        _, err0 = n0.communicate(timeout=40)
        n1.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        n0.kill()
        n1.kill()
        print("kill (two nodes): node 0 did not exit within 40 s")
        return None
    leftovers = [p for p in ranks0 + ranks1 if alive(p)]
    if not ranks1:
        leftovers.append("node 1 had no rank process to kill")
    return n0, n1, head0 + err0, time.time() - t0, leftovers


def kill_rank(tessera, workdir):
    model = make_model(tessera, "llama", workdir)
    ok = True
    # One node: the launcher sees its child die and stops the rest.
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", "4000",
           "--ignore-eos", "--json", "--threads", "1", "--tp", "2", "--dist-timeout", "10"]
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Generation starts right after rank 0 reports the model loaded: kill then, mid-generation.
    head = wait_for_line(launcher.stderr, "model loaded")
    ranks = children_of(launcher.pid)
    if len(ranks) != 2:
        print(f"kill (one node): expected 2 rank processes, found {ranks}\n{head}")
        launcher.kill()
        return False
    victim = ranks[-1]
    os.kill(victim, signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = launcher.communicate(timeout=30)
        err = head + err
    except subprocess.TimeoutExpired:
        launcher.kill()
        print("kill (one node): the launcher did not exit within 30 s")
        return False
    elapsed = time.time() - t0
    leftovers = [p for p in ranks if alive(p)]
    named = "was killed by signal 9" in err and "rank 1" in err
    good = launcher.returncode != 0 and not leftovers and named
    print(f"kill (one node): launcher exit {launcher.returncode} after {elapsed:.1f} s, message names the rank: "
          f"{named}, leftover processes: {leftovers} {'ok' if good else 'FAIL'}")
    if not good:
        print(err[-2000:])
    ok &= good

    # Two nodes: node 0's rank notices through the collective (Gloo) and fails.
    node0, node1 = two_node_commands(tessera, model, f"127.0.0.1:{free_port()}", new_tokens=4000)
    result = kill_node1_mid_run(node0, node1, "model loaded")
    if result is None:
        return False
    n0, n1, err0, elapsed, leftovers = result
    reported = ("all_reduce" in err0 or "all_gather" in err0 or "broadcast" in err0) and \
        ("lost rank 1" in err0 or "no answer from rank 1" in err0)
    good = n0.returncode != 0 and n1.returncode != 0 and not leftovers and reported
    print(f"kill (two nodes): node 0 exit {n0.returncode} after {elapsed:.1f} s, node 1 exit {n1.returncode}, "
          f"leftover processes: {leftovers} {'ok' if good else 'FAIL'}")
    print("  node 0 said: " + next((l for l in err0.splitlines() if " E]" in l), "(no error line)"))
    return ok and good


def run_case(cases):
    """Runs the case named by --case with (tessera, workdir): exit 0 on pass, 1 on fail, 77
    (CTest's skip) when the case returns None."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--case", required=True, choices=sorted(cases))
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    result = cases[args.case](os.path.abspath(args.tessera), args.workdir)
    if result is None:
        return 77
    print("RESULT:", "PASS" if result else "FAIL")
    return 0 if result else 1


def stranger(tessera, workdir):
    """Strangers on the rendezvous store's port while a TP2 job runs: junk, a wrong token and a
    silent connection are dropped (logged) and the job finishes with TP1's tokens."""
    model = make_model(tessera, "qwen3", workdir)
    base = generate(tessera, model, ["--tp", "1"], timeout=120)
    port = free_port()
    job = subprocess.Popen([tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
                            str(NEW_TOKENS), "--ignore-eos", "--json", "--threads", "1", "--tp", "2",
                            "--dist-init-addr", f"127.0.0.1:{port}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = wait_for_line(job.stderr, "rendezvous at")
    # The ranks get the token in their environment, never on the command line (`ps` shows it).
    tokens_seen = []
    for pid in children_of(job.pid):
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        token = next((e.split(b"=", 1)[1] for e in environ if e.startswith(b"TESSERA_JOB_TOKEN=")), b"")
        tokens_seen.append(len(token) == 32 and token not in cmdline)
    dropped = []
    for name, payload in [("junk SET", b"\x01\x05\x00\x00\x00tp0/x" + b"\x00" * 8 + b"\x04\x00\x00\x00\x00\x00\x00\x00evil"),
                          ("wrong token", b"TSRJ" + (5).to_bytes(4, "little") + b"guess"),
                          ("silent", b"")]:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as conn:
            if payload:
                conn.sendall(payload)
            try:
                closed = conn.recv(64) == b""
            except (ConnectionResetError, socket.timeout):
                closed = True
            dropped.append((name, closed))
    out, err = job.communicate(timeout=120)
    err = head + err
    ok = job.returncode == 0 and json.loads(out)["output_ids"] == base
    logged = err.count("did not present this job's token")
    token_hidden = len(tokens_seen) == 2 and all(tokens_seen)
    good = ok and all(c for _, c in dropped) and logged >= 2 and token_hidden
    print(f"stranger on the store port: job exit {job.returncode}, tokens {'same' if ok else 'DIFFER'} as TP1; "
          f"dropped {dropped}; {logged} warnings logged; token in the ranks' environment only: {token_hidden} "
          f"{'ok' if good else 'FAIL'}")
    if not good:
        print(err[-3000:])
    return good


def absent_node(tessera, workdir):
    """Node 1 is never started: node 0's rank names it when --dist-timeout runs out and the
    job exits non-zero, leaving no process behind."""
    model = make_model(tessera, "qwen3", workdir)
    node0, _ = two_node_commands(tessera, model, f"127.0.0.1:{free_port()}")
    node0[node0.index("--dist-timeout") + 1] = "4"
    t0 = time.time()
    p = subprocess.run(node0, capture_output=True, text=True, timeout=120)
    elapsed = time.time() - t0
    named = "rank 1 (node 1) did not arrive at the rendezvous store" in p.stderr
    good = p.returncode != 0 and named and elapsed < 30
    print(f"absent node 1: node 0 exit {p.returncode} after {elapsed:.1f} s, names the missing rank: {named} "
          f"{'ok' if good else 'FAIL'}")
    if not good:
        print(p.stderr[-2000:])
    return good


def make_slow_loading_model(tessera, workdir):
    """The `small` preset cut to 2 layers (~0.4 GB): it loads slowly enough that a rank stopped
    right after the groups form is still starting up."""
    model = os.path.join(workdir, "qwen3-small-2l")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([tessera, "make-model", "--arch", "qwen3", "--preset", "small", "--num-layers", "2", "--out", model],
                       check=True, capture_output=True)
    return model


def stalled_start(tessera, workdir):
    """Rank 1 stopped (SIGSTOP) right after the groups form. Resumed 3 s later, inside an
    8 s --dist-timeout, the job just finishes with TP1's tokens: nothing but that timeout
    watches a slow start. Never resumed, with a 3 s timeout, rank 0's error says where rank 1
    was (its last reported start-up stage) and the job ends, leaving no process behind. The
    model is the `small` preset cut to 2 layers (~0.4 GB): big enough that rank 1 is still
    starting up when it is stopped."""
    model = make_slow_loading_model(tessera, workdir)
    base = generate(tessera, model, ["--tp", "1"])
    ok = True
    for resume_after_s, timeout_s in ((3, 8), (None, 3)):
        cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
               "--ignore-eos", "--json", "--threads", "1", "--tp", "2", "--dist-timeout", str(timeout_s)]
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        head = wait_for_line(job.stderr, "rank 0 of 2")
        ranks = children_of(job.pid)
        if len(ranks) != 2:
            job.kill()
            print(f"stalled start: expected 2 rank processes, found {ranks}\n{head}")
            return False
        os.kill(ranks[-1], signal.SIGSTOP)
        t0 = time.time()
        if resume_after_s is not None:
            time.sleep(resume_after_s)
            os.kill(ranks[-1], signal.SIGCONT)
        try:
            out, err = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            os.kill(ranks[-1], signal.SIGCONT)
            print("stalled start: the job did not end within 60 s")
            return False
        elapsed = time.time() - t0
        err = head + err
        if resume_after_s is not None:
            ids = json.loads(out)["output_ids"] if job.returncode == 0 else None
            good = ids == base
            print(f"rank 1 stopped for {resume_after_s} s of an {timeout_s} s --dist-timeout: exit {job.returncode}, "
                  f"tokens {'same as TP1' if good else 'DIFFER'} {'ok' if good else 'FAIL'}")
        else:
            leftovers = [p for p in ranks if alive(p)]
            named = "Where the other ranks were: rank 1 (node 0): " in err and \
                any(stage in err for stage in ("loading the model", "sizing the KV pool", "forming process groups"))
            good = job.returncode != 0 and named and not leftovers and elapsed < 30
            print(f"rank 1 stopped for good, {timeout_s} s --dist-timeout: exit {job.returncode} after {elapsed:.1f} s, "
                  f"rank 1's stage named: {named}, leftover processes: {leftovers} {'ok' if good else 'FAIL'}")
            print("  rank 0 said: " + next((l for l in err.splitlines() if "Where the other ranks were" in l), "(none)"))
        if not good:
            print(err[-2000:])
        ok &= good
    return ok


def main():
    return run_case({"equivalence": equivalence, "two-node": two_node, "netns": netns, "kill": kill_rank,
                     "stranger": stranger, "absent-node": absent_node, "stalled-start": stalled_start})


if __name__ == "__main__":
    sys.exit(main())
