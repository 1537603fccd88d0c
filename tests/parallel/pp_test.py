#!/usr/bin/python3
"""Pipeline parallelism end to end, through `tessera generate` as a user runs it.

  equivalence    PP = 2, 3, 4, PP2 x TP2, uneven SGLANG_PP_LAYER_PARTITION splits and dynamic
                 chunking give the same greedy tokens as one rank, with the prompt prefilled in
                 several chunks that flow through the stages (f32 tiny models with 4 layers);
                 the stages are linked by shared memory, and by Gloo with TSR_PP_OVER_GLOO=1.
  bad-partition  a partition with the wrong sum or count, or more stages than layers, fails
                 at start-up with a message naming what to change, and no process hangs.
  two-node-kill  stage 0 and stage 1 on two "nodes" (loopback, Gloo), and PP4 with two stages
                 per node (shared memory inside a node, Gloo between): the tokens equal one
                 rank's; then killing node 1's rank mid-generation makes node 0 fail within
                 the timeout naming the lost rank, instead of waiting for a step forever.
  trace          --enable-pipeline-trace writes a Chrome trace with every rank's compute, send,
                 recv and idle spans; stage 1 computes a step only after stage 0 finished it,
                 and stage 0 computes the next chunk while stage 1 works on the previous one.

Usage: pp_test.py --tessera PATH --case {equivalence,bad-partition,two-node-kill,trace} --workdir DIR
Exit 0 pass, 1 fail.
"""

import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tp_test import free_port, kill_node1_mid_run, run_case  # noqa: E402

PROMPT = ",".join(str((i * 37 + 11) % 200 + 3) for i in range(45))
NEW_TOKENS = 10
CHUNK = 16


def make_model(tessera, arch, workdir, layers=4):
    out = os.path.join(workdir, f"{arch}_{layers}l")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--dtype", "f32", "--seed", "11",
                    "--num-layers", str(layers), "--out", out], check=True, capture_output=True)
    return out


def run_generate(tessera, model, extra, env_extra=None, timeout=180, prompt=PROMPT, chunk=CHUNK):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", prompt, "--max-new-tokens", str(NEW_TOKENS),
           "--ignore-eos", "--json", "--threads", "1", "--chunked-prefill-size", str(chunk)] + extra
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def generate(tessera, model, extra, env_extra=None, **kwargs):
    p = run_generate(tessera, model, extra, env_extra, **kwargs)
    if p.returncode != 0:
        raise RuntimeError(f"generate {' '.join(extra)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    j = json.loads(p.stdout)
    link = re.search(r"pp group over (\w+)", p.stderr)  # rank 0's start-up line
    j["pp_link"] = link.group(1) if link else None
    return j


def equivalence(tessera, workdir):
    ok = True
    layouts = [
        ("pp2", ["--pp-size", "2"], {}),
        ("pp3", ["--pp-size", "3"], {}),
        ("pp4", ["--pp-size", "4"], {}),
        ("pp2 x tp2", ["--pp-size", "2", "--tp", "2"], {}),
        ("pp2 partition 1,3", ["--pp-size", "2"], {"SGLANG_PP_LAYER_PARTITION": "1,3"}),
        ("pp3 partition 2,1,1", ["--pp-size", "3"], {"SGLANG_PP_LAYER_PARTITION": "2,1,1"}),
        ("pp2 async depth 1, micro-batch 1", ["--pp-size", "2", "--pp-async-batch-depth", "1",
                                              "--pp-max-micro-batch-size", "1"], {}),
        ("pp3 over gloo", ["--pp-size", "3"], {"TSR_PP_OVER_GLOO": "1"}),
    ]
    # Random tiny qwen3 models repeat one token; llama and qwen2 give varied greedy outputs.
    for arch in ("llama", "qwen2"):
        model = make_model(tessera, arch, workdir)
        base = generate(tessera, model, [])
        if len(set(base["output_ids"])) < 3:
            print(f"{arch}: the one-rank output {base['output_ids']} is too uniform to compare")
            ok = False
        if len(base["prefill_chunks"]) < 3:
            print(f"{arch}: expected the {len(PROMPT.split(','))}-token prompt in chunks of {CHUNK}, "
                  f"got {base['prefill_chunks']}")
            ok = False
        for name, extra, env_extra in layouts:
            got = generate(tessera, model, extra, env_extra)
            same = got["output_ids"] == base["output_ids"]
            # Stages on one node pass hidden states through shared memory unless told otherwise.
            link = "gloo" if env_extra.get("TSR_PP_OVER_GLOO") == "1" else "shm"
            good = same and got["pp_link"] == link
            ok &= good
            print(f"{arch} {name}: tokens {'same' if same else 'DIFFER'}, chunks {got['prefill_chunks']}, "
                  f"pp link {got['pp_link']} (expected {link}), ttft {got['ttft_s']:.3f} s {'ok' if good else 'FAIL'}")
            if not same:
                print(f"  pp1: {base['output_ids']}\n  got: {got['output_ids']}")
    # Dynamic chunking aligns chunks to 64 tokens: a longer prompt, chunks of 128.
    model = make_model(tessera, "llama", workdir)
    long_prompt = {"prompt": ",".join(str((i * 53 + 7) % 900 + 3) for i in range(300)), "chunk": 128}
    base = generate(tessera, model, [], **long_prompt)
    for smooth in ("1", "0.75"):
        got = generate(tessera, model, ["--pp-size", "2", "--enable-dynamic-chunking"],
                       {"SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR": smooth}, **long_prompt)
        same = got["output_ids"] == base["output_ids"]
        good = same and len(got["prefill_chunks"]) >= 3 and sum(got["prefill_chunks"]) == 300
        ok &= good
        print(f"llama pp2 dynamic chunking (smooth {smooth}, fit {'used' if got['dynamic_chunking'] else 'fell back'}): "
              f"tokens {'same' if same else 'DIFFER'}, chunks {got['prefill_chunks']} {'ok' if good else 'FAIL'}")
    return ok


def bad_partition(tessera, workdir):
    model = make_model(tessera, "qwen3", workdir)
    cases = [
        ("sum", ["--pp-size", "2"], {"SGLANG_PP_LAYER_PARTITION": "1,1"}, "SGLANG_PP_LAYER_PARTITION"),
        ("count", ["--pp-size", "2"], {"SGLANG_PP_LAYER_PARTITION": "2,1,1"}, "SGLANG_PP_LAYER_PARTITION"),
        ("not a number", ["--pp-size", "2"], {"SGLANG_PP_LAYER_PARTITION": "a,b"}, "SGLANG_PP_LAYER_PARTITION"),
        ("more stages than layers", ["--pp-size", "5"], {}, "layers"),
        ("trace without pp", ["--enable-pipeline-trace", os.path.join(workdir, "t.json")], {}, "--pp-size"),
    ]
    ok = True
    for name, extra, env_extra, pattern in cases:
        try:
            p = run_generate(tessera, model, extra, env_extra, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"{name}: HUNG")
            ok = False
            continue
        good = p.returncode != 0 and pattern in p.stderr
        ok &= good
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print(f"{name}: exit {p.returncode}, says {last!r} {'ok' if good else 'FAIL'}")
    return ok


def two_node_commands(tessera, model, addr, new_tokens, pp=2):
    def cmd(node):
        return [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
                str(new_tokens), "--ignore-eos", "--json", "--threads", "1", "--chunked-prefill-size", str(CHUNK),
                "--pp-size", str(pp), "--nnodes", "2", "--node-rank", str(node), "--dist-init-addr", addr,
                "--dist-timeout", "20"]
    return cmd(0), cmd(1)


def two_node_kill(tessera, workdir):
    model = make_model(tessera, "llama", workdir)
    base = generate(tessera, model, [])
    ok = True
    # PP2: one stage per node, Gloo between them. PP4: two stages per node, which pass their
    # hidden states through shared memory, Gloo only at the node boundary.
    for pp, link in ((2, "gloo"), (4, "gloo+shm")):
        node0, node1 = two_node_commands(tessera, model, f"127.0.0.1:{free_port()}", NEW_TOKENS, pp)
        n1 = subprocess.Popen(node1, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        n0 = subprocess.run(node0, capture_output=True, text=True, timeout=120)
        n1.communicate(timeout=60)
        got = json.loads(n0.stdout)["output_ids"] if n0.returncode == 0 else None
        found = re.search(r"pp group over ([\w+]+)", n0.stderr)
        good = got == base["output_ids"] and n1.returncode == 0 and found is not None and found.group(1) == link
        ok &= good
        print(f"two nodes, pp {pp}: node 0 exit {n0.returncode}, node 1 exit {n1.returncode}, tokens "
              f"{'same' if got == base['output_ids'] else 'DIFFER'}, pp link {found.group(1) if found else None} "
              f"(expected {link}) {'ok' if good else 'FAIL'}")
        if not good:
            print(n0.stderr[-2000:])

    node0, node1 = two_node_commands(tessera, model, f"127.0.0.1:{free_port()}", 3500)
    result = kill_node1_mid_run(node0, node1, "Prefill batch", settle_s=0.3)
    if result is None:
        return False
    n0, n1, err0, elapsed, leftovers = result
    reported = "gloo group 'pp" in err0 and "rank 1" in err0
    good = n0.returncode != 0 and n1.returncode != 0 and not leftovers and reported
    print(f"kill: node 0 exit {n0.returncode} after {elapsed:.1f} s, node 1 exit {n1.returncode}, "
          f"leftover processes: {leftovers} {'ok' if good else 'FAIL'}")
    print("  node 0 said: " + next((line for line in err0.splitlines() if " E]" in line), "(no error line)"))
    return ok and good


def trace(tessera, workdir):
    model = make_model(tessera, "llama", workdir)
    path = os.path.join(workdir, "pipeline_trace.json")
    if os.path.exists(path):
        os.remove(path)
    got = generate(tessera, model, ["--pp-size", "2", "--enable-pipeline-trace", path])
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = {}
    for e in events:
        if e.get("ph") == "X":
            spans.setdefault(e["pid"], []).append(e)
    ok = sorted(spans) == [0, 1]
    names = {pid: {e["name"] for e in es} for pid, es in spans.items()}
    ok &= names.get(0, set()) >= {"compute", "send", "recv"} and names.get(1, set()) >= {"compute", "send", "recv"}
    compute = {pid: {e["args"]["step"]: e for e in es if e["name"] == "compute" and e["args"]["step"] >= 0}
               for pid, es in spans.items()}
    n_chunks = len(got["prefill_chunks"])
    steps = sorted(set(compute.get(0, {})) & set(compute.get(1, {})))
    ok &= len(steps) >= n_chunks + NEW_TOKENS - 1
    # Causality: stage 1 starts step k only after stage 0 finished it.
    for k in steps:
        a, b = compute[0][k], compute[1][k]
        if b["ts"] < a["ts"] + a["dur"] - 1:
            print(f"step {k}: stage 1 started at {b['ts']} before stage 0 finished at {a['ts'] + a['dur']}")
            ok = False
    # Chunked pipeline prefill: stage 0 starts chunk k+1 before stage 1 finishes chunk k.
    overlapped = sum(1 for k in range(n_chunks - 1)
                     if k + 1 in compute[0] and k in compute[1]
                     and compute[0][k + 1]["ts"] < compute[1][k]["ts"] + compute[1][k]["dur"])
    ok &= overlapped >= 1
    print(f"trace: {len(events)} events, ranks {sorted(spans)}, span kinds {sorted(names.get(1, []))}, "
          f"{len(steps)} steps on both stages, prefill chunks {got['prefill_chunks']}, "
          f"{overlapped} chunk hand-offs overlapped {'ok' if ok else 'FAIL'}")
    return ok


def main():
    return run_case({"equivalence": equivalence, "bad-partition": bad_partition, "two-node-kill": two_node_kill,
                     "trace": trace})


if __name__ == "__main__":
    sys.exit(main())
