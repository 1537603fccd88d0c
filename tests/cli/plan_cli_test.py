#!/usr/bin/python3
"""`tessera plan` as a user runs it: its start-up line equals the one `tessera generate`
logs for the same flags on this machine (TP1, TP2, PP2, EP2, all_to_all with a shared
expert), a pasted SGLang command after `--` is read as `serve` reads it, --json is one
object, a launch that does not fit exits 1 with its fix, and a single layout answers in
under a second.

Usage: plan_cli_test.py --tessera PATH --workdir DIR
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "data", "configs")
STARTUP = re.compile(r"(max_total_num_tokens=\d+, chunked_prefill_size=\d+, .*available_gpu_mem=[0-9.]+ GB)")

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


def run(cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    t = args.tessera
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    dense = os.path.join(args.workdir, "dense")
    moe = os.path.join(args.workdir, "moe")
    shared_moe = os.path.join(args.workdir, "shared_moe")
    for arch, out in (("qwen3", dense), ("qwen3-moe", moe), ("qwen2-moe", shared_moe)):
        p = run([t, "make-model", "--arch", arch, "--out", out])
        assert p.returncode == 0, p.stderr

    layouts = [("tp1", dense, []), ("tp2", dense, ["--tp", "2"]), ("pp2", dense, ["--pp-size", "2"]),
               ("moe tp2 ep2", moe, ["--tp", "2", "--ep", "2"]),
               ("shared-expert moe tp2 all_to_all", shared_moe, ["--tp", "2", "--moe-a2a-backend", "all_to_all"])]
    for name, model, flags in layouts:
        plan = run([t, "plan", "--model-path", model, "--json"] + flags)
        check(f"plan {name} succeeds", plan.returncode == 0, plan.stderr[-400:])
        if plan.returncode != 0:
            continue
        planned = json.loads(plan.stdout)["memory"]["startup_line"]
        gen = run([t, "generate", "--model-path", model, "--prompt-ids", "1,2", "--max-new-tokens", "1"] + flags)
        logged = STARTUP.search(gen.stderr)
        check(f"generate {name} logs its start-up line", gen.returncode == 0 and logged is not None, gen.stderr[-400:])
        if logged:
            check(f"plan {name} predicts the start-up line", planned == logged.group(1),
                  f"plan: {planned}\nserve: {logged.group(1)}")

    # A pasted SGLang command after `--`, with GPU-only flags, prefixes and the seed's layout.
    pasted = run([t, "plan", "--device-preset", "h20", "--prompt-len", "131072", "--json", "--",
                  "python3", "-m", "sglang.launch_server", "--model-path", os.path.join(CONFIGS, "deepseek-v3"),
                  "--trust-remote-code", "--nnodes", "4", "--node-rank", "0", "--tp", "8", "--pp-size", "4",
                  "--dist-init-addr", "10.0.0.1:5000", "--mem-fraction-static", "0.8", "--attention-backend", "fa3",
                  "--watchdog-timeout", "3600", "--chunked-prefill-size", "12288", "--enable-dynamic-chunking"])
    check("a pasted SGLang launch is planned", pasted.returncode == 0, pasted.stderr[-400:])
    if pasted.returncode == 0:
        j = json.loads(pasted.stdout)
        check("its layout is the command's", j["layout"]["world_size"] == 32 and j["layout"]["nnodes"] == 4,
              str(j["layout"]))
        pipe = j["pipeline"]
        check("its bubble is (P-1)/(P-1+M)", abs(pipe["bubble"] - 3 / (3 + pipe["micro_batches"])) < 1e-9, str(pipe))
        check("dynamic chunking cuts more chunks than 12288-token ones", pipe["micro_batches"] > 11, str(pipe))
        check("SGLang's rewrite is shown", any("overlap schedule" in r for r in j["rewrites"]), str(j["rewrites"]))

    deterministic = run([t, "plan", "--model-path", dense, "--json", "--enable-deterministic-inference", "--tp", "2"])
    try:
        planned = json.loads(deterministic.stdout)
    except ValueError:
        planned = {}
    check("deterministic inference: SGLang's rewrites and the estimates' caveat",
          deterministic.returncode == 0 and
          "Sampling backend is set to pytorch for deterministic inference." in planned.get("rewrites", []) and
          any("batch-invariant" in c for c in planned.get("caveats", [])), deterministic.stdout[-600:])

    # What does not fit: exit 1 and the fix.
    tight = run([t, "plan", "--model-path", os.path.join(CONFIGS, "deepseek-v3"), "--device-preset", "h20",
                 "--tp", "8"])
    check("a launch that does not fit exits 1", tight.returncode == 1, tight.stderr[-300:])
    check("and names the fix", "fix: set --pp-size 2 and --nnodes 2 (16 devices)" in tight.stdout, tight.stdout[-600:])
    bad = run([t, "plan", "--model-path", dense, "--tp", "3", "--nnodes", "2", "--dist-init-addr", "h:1"])
    check("SGLang's rules refuse first", bad.returncode == 2 and "tp_size must be divisible by number of nodes"
          in bad.stderr, bad.stderr[-300:])
    bad_json = run([t, "plan", "--model-path", dense, "--json", "--tp", "2", "--enable-two-batch-overlap"])
    try:
        rejected = json.loads(bad_json.stdout)["rejected"]
    except (ValueError, KeyError):
        rejected = ""
    check("a refusal with --json is one JSON object naming the rule",
          bad_json.returncode == 2 and "moe_a2a_backend='none'" in rejected, bad_json.stdout[-300:])

    # Speed: one layout of a 32-rank cluster in well under a second.
    start = time.monotonic()
    run([t, "plan", "--model-path", os.path.join(CONFIGS, "deepseek-v3"), "--device-preset", "h20", "--tp", "8",
         "--pp-size", "4", "--nnodes", "4", "--dist-init-addr", "h:1"])
    elapsed = time.monotonic() - start
    check("one layout answers in < 1 s", elapsed < 1.0, f"{elapsed:.2f} s")

    # A sweep of a 64-node cluster: ranked layouts and a plot, in under 10 s.
    svg = os.path.join(args.workdir, "sweep.svg")
    start = time.monotonic()
    sweep = run([t, "plan", "--model-path", os.path.join(CONFIGS, "deepseek-v3"), "--device-preset", "h20",
                 "--prompt-len", "32768", "--sweep", "--max-nodes", "64", "--sweep-svg", svg, "--top", "5"])
    elapsed = time.monotonic() - start
    check("a 64-node sweep answers in < 10 s", sweep.returncode == 0 and elapsed < 10.0, f"{elapsed:.2f} s {sweep.stderr[-300:]}")
    rows = [l for l in sweep.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s+\d+", l)]
    check("the sweep lists --top layouts", len(rows) == 5, sweep.stdout)
    if rows:
        first = [float(x) for x in rows[0].split()]
        check("the sweep's first layout is its fastest", all(first[6] >= float(r.split()[6]) for r in rows), sweep.stdout)
    if os.path.exists(svg):
        import xml.dom.minidom
        points = xml.dom.minidom.parse(svg).getElementsByTagName("circle")
        check("the plot has a point per device count and series", len(points) >= 2 * 4, f"{len(points)} points")
    else:
        check("the plot is written", False, svg)

    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
