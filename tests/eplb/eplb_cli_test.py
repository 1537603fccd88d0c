#!/usr/bin/python3
"""`tessera eplb` against the PyTorch reference of DeepSeek's balancer (tests/reference/
eplb_reference.py): the README's worked example, random skewed loads, and tie-heavy loads
(small integers, all-equal rows), on the hierarchical and the global path; phy2log, log2phy
and logcnt must be identical. Bad lines get an {"error"} line in their place and exit 1.

Usage: eplb_cli_test.py --tessera PATH
Exit 0 pass, 1 fail.
"""

import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from eplb_reference import rebalance_experts  # noqa: E402


def cases():
    yield {"weight": [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                      [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]],
           "num_replicas": 16, "num_groups": 4, "num_nodes": 2, "num_gpus": 8}
    rng = random.Random(5)
    for i in range(60):
        groups = rng.choice([1, 2, 4, 8])
        experts = groups * rng.choice([2, 4])
        nodes = rng.choice([n for n in (1, 2, 4) if experts % n == 0])
        gpus = nodes * rng.choice([1, 2])
        replicas = experts + gpus * rng.choice([0, 1, 2])
        if replicas % gpus or replicas % nodes or (experts // nodes) > replicas // nodes:
            continue
        layers = rng.randint(1, 3)
        kind = i % 3
        if kind == 0:
            weight = [[round(rng.expovariate(0.02), 1) for _ in range(experts)] for _ in range(layers)]
        elif kind == 1:  # ties everywhere
            weight = [[rng.randint(0, 3) for _ in range(experts)] for _ in range(layers)]
        else:
            weight = [[7] * experts for _ in range(layers)]
        yield {"weight": weight, "num_replicas": replicas, "num_groups": groups, "num_nodes": nodes,
               "num_gpus": gpus}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    inputs = list(cases())
    lines = "\n".join(json.dumps(c) for c in inputs) + "\n"
    p = subprocess.run([args.tessera, "eplb"], input=lines, capture_output=True, text=True, timeout=120)
    outputs = [json.loads(line) for line in p.stdout.splitlines()]
    ok = True
    if len(outputs) != len(inputs):
        print(f"FAIL: {len(inputs)} lines in, {len(outputs)} out; stderr {p.stderr[-2000:]}")
        return 1
    for c, out in zip(inputs, outputs):
        want = rebalance_experts(c["weight"], c["num_replicas"], c["num_groups"], c["num_nodes"], c["num_gpus"])
        if "error" in out:
            ok = False
            print(f"FAIL: {c}: {out['error']}")
            continue
        for name, tensor in zip(("phy2log", "log2phy", "logcnt"), want):
            if out[name] != tensor.tolist():
                ok = False
                print(f"FAIL {name}: {json.dumps(c)}\n  tessera   {out[name]}\n  reference {tensor.tolist()}")
    readme = outputs[0]["phy2log"]
    if readme != [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1], [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]:
        ok = False
        print(f"FAIL: the README example gives {readme}")
    bad = subprocess.run([args.tessera, "eplb"], input='{"weight": [[1, 2]], "num_replicas": 3}\nnot json\n',
                         capture_output=True, text=True, timeout=60)
    errors = [json.loads(line) for line in bad.stdout.splitlines()]
    if bad.returncode != 1 or len(errors) != 2 or not all("error" in e for e in errors):
        ok = False
        print(f"FAIL: bad lines gave exit {bad.returncode}, {bad.stdout!r}")
    print(f"{len(inputs)} placements compared with the reference: {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
