#!/usr/bin/python3
"""DP-attention end to end (--enable-dp-attention), as a user runs it.

  equivalence  `tessera generate --logits-out` (every attention-DP group runs the prompt, so every
               layer gathers and scatters all groups' rows): one rank's greedy tokens and logits
               within 1e-4 on tiny f32 models: Qwen3-MoE at TP2/DPA2, TP4/DPA2 (attention TP 2),
               TP4/DPA4, TP4/DPA4 with EP4, TP4/DPA2 with EP2, with --enable-dp-lm-head and with
               all_to_all, PP2 x TP2/DPA2 and PP2 x TP4/DPA2 with EP2; Qwen2-MoE (one dense layer)
               with --moe-dense-tp-size 1 (and its rank then holds more weights); DeepSeek-V2 and
               -V3 (MLA) at TP2/DPA2, TP4/DPA4 with EP4, --enable-dp-lm-head and PP2 x TP2/DPA2,
               -V3 at TP2/DPA2 with all_to_all and --moe-dense-tp-size 1 (SGLang's prefill layout),
               all_to_all layouts sending MoE tokens from their own group (no all-gather);
               dense Qwen3 at TP2/DPA2; live EPLB rebalancing at TP4/DPA2+EP2 and with all_to_all.
               And the scheduler path (no --logits-out: the prompt runs
               in group 0, the other groups join idle), also under PP2, gives the same tokens.
  serve        `tessera serve`: 8 concurrent greedy requests through the one HTTP front equal a
               one-rank server's, for Qwen3-MoE at TP4 with DPA2, DPA4, DPA4+EP4, DPA2+dp-lm-head,
               DPA2+all_to_all, PP2 x TP2/DPA2, DeepSeek-V3 at TP4/DPA2+EP4 and PP2 x TP2/DPA2, and
               Qwen2-MoE with --moe-dense-tp-size 1; every group ran some of them
               (tessera:dp_attention_tokens_total of each dp_rank > 0). One request only under
               DPA4 completes: one group ran its tokens, the other three only idle steps. The
               expert distribution recorder (start / stop / dump) reaches every rank of every
               group in one step (DPA2 with all_to_all, per_pass: a file from each rank).
  faults       a group that skips a round of the lockstep (TSR_DPA_FAULT=skip:1:3) makes the
               launch fail naming the group out of step with the reporting rank; one that stops joining (stall:1:3) makes it fail
               within --dist-timeout naming the missing rank, never hang; a serving launch whose
               group skips an idle round stops (non-zero) naming it.
  two-node     TP4/DPA2 serve over two "nodes" on loopback (one group per node): the front on
               node 0 routes to node 1's group; concurrent requests equal one rank's and both
               groups ran some.
  prefill-delayer  TP2/DPA2 with --enable-prefill-delayer --prefill-delayer-max-delay-passes 5: a
               lone request waits exactly 4 passes for the other group, then runs (metrics:
               4 "mixed" delays, one wait_timeout, wait_forward_passes_sum 4) and gives one
               rank's tokens; 8 concurrent requests give one rank's tokens and some prefills
               ran with both groups ready ("all"); a one-rank server with the delayer serves too;
               with overlap scheduling off (or PP) the launch is refused with SGLang's message, also
               when SGLang's deprecated SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1 turns it on.

Usage: dpa_test.py --tessera PATH --case {equivalence,serve,faults,two-node,prefill-delayer} --workdir DIR
Exit 0 pass, 1 fail.
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from tp_test import PROMPT, NEW_TOKENS, make_model, run_case, same_as_one_rank  # noqa: E402
from e2e_support import call, free_port, stop_server, wait_ready  # noqa: E402

LOGIT_TOLERANCE = 1e-4
DPA = ["--enable-dp-attention"]

LAYOUTS = {
    "qwen3-moe": [
        ["--tp", "2", "--dp", "2"] + DPA,
        ["--tp", "4", "--dp", "2"] + DPA,
        ["--tp", "4", "--dp", "4"] + DPA,
        ["--tp", "4", "--dp", "4", "--ep", "4"] + DPA,
        ["--tp", "4", "--dp", "2", "--ep", "2"] + DPA,
        ["--tp", "4", "--dp", "2", "--enable-dp-lm-head"] + DPA,
        ["--tp", "4", "--dp", "2", "--moe-a2a-backend", "all_to_all"] + DPA,
        ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA,
        ["--pp-size", "2", "--tp", "4", "--dp", "2", "--ep", "2", "--mem-fraction-static", "0.5"] + DPA,
    ],
    "qwen2-moe": [
        ["--tp", "4", "--dp", "2", "--moe-dense-tp-size", "1"] + DPA,
        ["--tp", "2", "--moe-dense-tp-size", "1"],  # replicated dense MLP under plain TP too
    ],
    "deepseek-v2": [
        ["--tp", "2", "--dp", "2"] + DPA,
        ["--tp", "4", "--dp", "2", "--ep", "4", "--enable-dp-lm-head"] + DPA,
    ],
    "deepseek-v3": [
        ["--tp", "2", "--dp", "2"] + DPA,
        ["--tp", "4", "--dp", "4", "--ep", "4"] + DPA,
        ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA,
        # SGLang's DeepSeek prefill layout in small: DeepEP's place taken by all_to_all (shared
        # experts whole on every rank), dense MLPs replicated.
        ["--tp", "2", "--dp", "2", "--moe-a2a-backend", "all_to_all", "--moe-dense-tp-size", "1"] + DPA,
    ],
    "qwen3": [
        ["--tp", "2", "--dp", "2"] + DPA,
    ],
}


def generate(tessera, model, extra, logits=None, env=None, timeout=180, report=False):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
           "--ignore-eos", "--json", "--threads", "1"] + (["--logits-out", logits] if logits else []) + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout) if report else json.loads(p.stdout)["output_ids"]


def equivalence(tessera, workdir):
    ok = True
    for arch, layouts in LAYOUTS.items():
        model = make_model(tessera, arch, workdir)
        base_logits = os.path.join(workdir, f"{arch}_one_rank.npy")
        base = generate(tessera, model, [], base_logits)
        for i, layout in enumerate(layouts):
            logits = os.path.join(workdir, f"{arch}_{i}.npy")
            ids = generate(tessera, model, layout, logits)
            ok &= same_as_one_rank(f"{arch} {' '.join(layout)}", ids, base, logits, base_logits, LOGIT_TOLERANCE)
            if "all_to_all" in layout:
                # The MoE tokens stay with their group and go straight to their experts' ranks:
                # dispatched, never all-gathered (SGLang's scattered a2a layers). The prompt runs
                # in group 0, so rank 0 may have no other group's rows to combine back.
                sent = generate(tessera, model, layout, report=True)["moe_bytes_per_token_layer"]
                good = sent["all_gather"] == 0 and sent["dispatch"] > 0
                ok &= good
                print(f"{arch} {' '.join(layout)}: MoE bytes per token and layer {sent} {'ok' if good else 'FAIL'}")
        if arch == "qwen2-moe":
            # Its dense layer replicated: every rank holds all of its MLP, not a quarter.
            split = generate(tessera, model, ["--tp", "4", "--dp", "2"] + DPA, report=True)["weight_mb_per_rank"]
            whole = generate(tessera, model, LAYOUTS[arch][0], report=True)["weight_mb_per_rank"]
            good = whole > split
            ok &= good
            print(f"qwen2-moe --moe-dense-tp-size 1: {whole:.2f} MB per rank vs {split:.2f} MB with the dense MLP "
                  f"split {'ok' if good else 'FAIL'}")
        if arch in ("qwen3-moe", "deepseek-v3"):
            for layout in (["--tp", "4", "--dp", "2"] + DPA, ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA):
                ids = generate(tessera, model, layout)
                good = ids == base
                ok &= good
                print(f"{arch} {' '.join(layout)} through the scheduler: tokens {'same' if good else 'DIFFER'} "
                      f"{'ok' if good else 'FAIL'}")
        if arch == "qwen3-moe":
            # Live EPLB rebalancing: every rank runs the same passes, idle groups included.
            for layout in (["--tp", "4", "--dp", "2", "--ep", "2"], ["--tp", "2", "--dp", "2", "--moe-a2a-backend",
                                                                     "all_to_all"]):
                layout = layout + ["--ep-num-redundant-experts", "2", "--enable-eplb", "--eplb-rebalance-num-iterations",
                                   "4"] + DPA
                logits = os.path.join(workdir, "eplb.npy")
                cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
                       str(NEW_TOKENS), "--ignore-eos", "--json", "--threads", "1", "--logits-out", logits] + layout
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
                ids = json.loads(p.stdout)["output_ids"] if p.returncode == 0 else None
                moved = p.stderr.count("[EPLBManager] rebalanced layers")
                good = ids is not None and same_as_one_rank(f"{arch} {' '.join(layout)}", ids, base, logits,
                                                            base_logits, LOGIT_TOLERANCE) and moved > 0
                ok &= good
                print(f"  rebalanced {moved} times {'ok' if good else 'FAIL'}")
            # Dynamic chunking under PP: every group's leader profiles stage 0 at once.
            layout = ["--pp-size", "2", "--tp", "2", "--dp", "2", "--enable-dynamic-chunking",
                      "--chunked-prefill-size", "16"] + DPA
            cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
                   str(NEW_TOKENS), "--ignore-eos", "--json", "--threads", "1"] + layout
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            ids = json.loads(p.stdout)["output_ids"] if p.returncode == 0 else None
            profiled = {g for g in (0, 1) if re.search(rf"\[tessera dp{g} tp{g} pp0\] \[PP Dynamic Chunk\]", p.stderr)}
            good = ids == base and profiled == {0, 1}
            ok &= good
            print(f"{arch} {' '.join(layout)}: tokens {'same' if ids == base else 'DIFFER'}, groups that profiled "
                  f"stage 0: {sorted(profiled)} {'ok' if good else 'FAIL'}")
    return ok


# ---- serving ----------------------------------------------------------------------------------

PROMPTS = [[3, 14, 15, 92, 65, 35], [11, 22, 33, 44], [500, 400, 300, 200, 100, 50], [7, 7, 7, 1],
           [2, 71, 82, 81, 82, 84, 59, 4], [90, 45, 23], [8, 8, 1, 9, 9, 2, 3], [600, 1, 600, 2, 600]]

SERVE_LAYOUTS = {
    "qwen3-moe": [
        ["--tp", "4", "--dp", "2"] + DPA,
        ["--tp", "4", "--dp", "4"] + DPA,
        ["--tp", "4", "--dp", "4", "--ep", "4"] + DPA,
        ["--tp", "4", "--dp", "2", "--enable-dp-lm-head"] + DPA,
        ["--tp", "4", "--dp", "2", "--moe-a2a-backend", "all_to_all"] + DPA,
        ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA,
    ],
    "qwen2-moe": [
        ["--tp", "4", "--dp", "2", "--moe-dense-tp-size", "1"] + DPA,
    ],
    "deepseek-v3": [
        ["--tp", "4", "--dp", "2", "--ep", "4"] + DPA,
        ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA,
    ],
}


def launch(tessera, model, port, log_path, flags, extra_env=None):
    log = open(log_path, "w")
    env = dict(os.environ, **(extra_env or {}))
    proc = subprocess.Popen([tessera, "serve", "--model-path", model, "--port", str(port), "--threads-per-rank", "1",
                             "--random-seed", "1"] + flags, stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, log


def greedy(port, prompt, new_tokens=8):
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0,
                                                     "ignore_eos": True}}
    status, data = call(port, "POST", "/generate", body, timeout=120)
    return json.loads(data)["output_ids"] if status == 200 else f"HTTP {status}: {data}"


def concurrently(port, prompts):
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: greedy(port, p), prompts))


def group_counters(port, groups):
    """(tokens, idle steps) of each DP-attention group, from the front's /metrics."""
    _, text = call(port, "GET", "/metrics")
    samples = [line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")]

    def per_group(name):
        return [sum(float(v) for k, v in samples if k.startswith(name + "{") and f'dp_rank="{g}"' in k)
                for g in range(groups)]
    return per_group("tessera:dp_attention_tokens_total"), per_group("tessera:dp_attention_idle_steps_total")


def make_served_model(tessera, arch, workdir):
    """The tiny f32 model of tp_test.make_model (same seed), with Qwen3's tokenizer for the server."""
    out = os.path.join(workdir, arch + "_served")
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--dtype", "f32", "--seed", "11",
                    "--tokenizer", "qwen3", "--out", out], check=True, capture_output=True)
    return out


def serve_expected(tessera, model, workdir, arch):
    port = free_port()
    proc, log = launch(tessera, model, port, os.path.join(workdir, f"{arch}_one_rank.log"), [])
    try:
        if not wait_ready(port, proc):
            raise RuntimeError(f"one-rank server of {arch} did not start")
        return concurrently(port, PROMPTS)
    finally:
        stop_server(proc)
        log.close()


def serve_layout(tessera, model, workdir, name, flags, expected):
    groups = int(flags[flags.index("--dp") + 1])
    port = free_port()
    proc, log = launch(tessera, model, port, os.path.join(workdir, re.sub(r"[^a-z0-9]+", "_", name) + ".log"), flags)
    try:
        if not wait_ready(port, proc):
            print(f"{name}: server did not start FAIL")
            return False
        got = concurrently(port, PROMPTS)
        tokens, idle = group_counters(port, groups)
        # Overlap scheduling is on unless PP turns it off (SGLang's rule).
        with open(log.name) as f:
            overlapped = "overlap scheduling: steps run on their own thread" in f.read()
        overlap_ok = overlapped == ("--pp-size" not in flags)
        good = got == expected and all(t > 0 for t in tokens) and overlap_ok
        print(f"{name}: 8 concurrent requests {'same as' if got == expected else 'DIFFER from'} one rank; tokens per "
              f"group {tokens}, idle steps {idle}, overlap scheduling {'on' if overlapped else 'off'} "
              f"{'ok' if good else 'FAIL'}")
        if got != expected:
            print(f"  one rank: {expected}\n  layout:   {got}")
        return good
    finally:
        stop_server(proc)
        log.close()


def recorder_through_groups(tessera, model, workdir, expected):
    """The expert distribution recorder under DPA2 with all_to_all (whose recording pass sums
    counts over the EP group): start, 8 concurrent requests, stop, dump. Every rank of both
    groups must apply each command in the same step, or the collective would hang; per_pass
    mode has every rank write its own file."""
    dumps = os.path.join(workdir, "dumps")
    shutil.rmtree(dumps, ignore_errors=True)  # a rerun in the same workdir counts only its own
    os.makedirs(dumps)
    port = free_port()
    flags = ["--tp", "4", "--dp", "2", "--moe-a2a-backend", "all_to_all", "--expert-distribution-recorder-mode",
             "per_pass", "--dist-timeout", "30"] + DPA
    proc, log = launch(tessera, model, port, os.path.join(workdir, "recorder.log"), flags,
                       {"SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR": dumps})
    try:
        if not wait_ready(port, proc):
            print("recorder under DPA2: server did not start FAIL")
            return False
        # The commands arrive while both groups run requests, so a group that applied one a
        # step after the other would sum its counts alone.
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            running = [pool.submit(greedy, port, p, 96) for p in PROMPTS]
            time.sleep(0.2)
            started = call(port, "POST", "/start_expert_distribution_record")[0]
            time.sleep(0.2)
            stopped = call(port, "POST", "/stop_expert_distribution_record")[0]
            got = [r.result()[:8] for r in running]
        dumped = call(port, "POST", "/dump_expert_distribution_record")[0]
        # Also between requests.
        call(port, "POST", "/start_expert_distribution_record")
        concurrently(port, PROMPTS)
        call(port, "POST", "/stop_expert_distribution_record")
        files = sorted(os.listdir(dumps))
        ranks = sorted(int(re.sub(r".*_(\d+)\.json$", r"\1", f)) for f in files if f.endswith(".json"))
        alive = greedy(port, PROMPTS[0]) == expected[0]
    finally:
        stop_server(proc)
        log.close()
    good = (started, stopped, dumped) == (200, 200, 200) and got == expected and ranks == [0, 1, 2, 3] and alive
    print(f"recorder under DPA2 + all_to_all: start/stop/dump {started}/{stopped}/{dumped}, tokens "
          f"{'same' if got == expected else 'DIFFER'}, dumps of ranks {ranks}, serving after: {alive} "
          f"{'ok' if good else 'FAIL'}")
    return good


def serve(tessera, workdir):
    ok = True
    for arch, layouts in SERVE_LAYOUTS.items():
        model = make_served_model(tessera, arch, workdir)
        expected = serve_expected(tessera, model, workdir, arch)
        for flags in layouts:
            ok &= serve_layout(tessera, model, workdir, f"{arch} {' '.join(flags)}", flags, expected)
        if arch != "qwen3-moe":
            continue
        ok &= recorder_through_groups(tessera, model, workdir, expected)
        # One request at a time: the other groups have nothing to do and must not hold it up
        # (under PP their idle rounds travel down the stages too); SIGTERM then stops every rank.
        for name, flags in (("DPA4", ["--tp", "4", "--dp", "4"] + DPA),
                            ("PP2 x TP2/DPA2", ["--pp-size", "2", "--tp", "2", "--dp", "2"] + DPA)):
            groups = int(flags[flags.index("--dp") + 1])
            port = free_port()
            proc, log = launch(tessera, model, port, os.path.join(workdir, f"one_request_{groups}.log"), flags)
            try:
                ready = wait_ready(port, proc)
                start = time.time()
                got = [greedy(port, PROMPTS[0]), greedy(port, PROMPTS[1])] if ready else None
                elapsed = time.time() - start
                tokens, idle = group_counters(port, groups) if ready else ([], [])
                # round_robin: one request in each of two groups; every group waited on another's.
                good = (got == expected[:2] and sum(t > 0 for t in tokens) == 2 and len(idle) == groups and
                        all(i > 0 for i in idle) and elapsed < 30)
            finally:
                stop_server(proc)
                log.close()
            good &= proc.returncode == 0
            ok &= good
            print(f"one request at a time under {name}: tokens {'same' if got == expected[:2] else 'DIFFER'} in "
                  f"{elapsed:.1f} s; tokens per group {tokens}, idle steps {idle}; exit {proc.returncode} after "
                  f"SIGTERM {'ok' if good else 'FAIL'}")
    return ok


# ---- faults -----------------------------------------------------------------------------------

def faults(tessera, workdir):
    model = make_model(tessera, "qwen3-moe", workdir)
    ok = True
    # A skipped round is seen from both sides: group 0's ranks name group 1 (ahead), group 1's
    # name group 0 (behind); whichever reports first stops the launch.
    for fault, wanted in (("skip:1:3", r"DP-attention lockstep broken: .*attn_dp group [01] .*is at round [34]"),
                          ("stall:1:3", r"DP-attention round 3: the groups did not all join the step: .*not "
                                        r"arrived: rank 1.*attn_dp group 1 \(TP rank 1\)")):
        env = dict(os.environ, TSR_DPA_FAULT=fault)
        cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens",
               str(NEW_TOKENS), "--ignore-eos", "--json", "--threads", "1", "--tp", "2", "--dp", "2",
               "--dist-timeout", "5"] + DPA
        start = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        elapsed = time.time() - start
        named = re.search(wanted, p.stderr) is not None
        good = p.returncode != 0 and named and elapsed < 60
        ok &= good
        print(f"TSR_DPA_FAULT={fault}: exit {p.returncode} after {elapsed:.1f} s, error names the group: {named} "
              f"{'ok' if good else 'FAIL'}")
        print("  said: " + next((l for l in p.stderr.splitlines() if " E]" in l), "(no error line)")[:400])
    # A serving launch: idle rounds run all the time, so the skipped round comes without a
    # request; the launch must end (non-zero), not go on out of step.
    model = make_served_model(tessera, "qwen3-moe", workdir)
    port = free_port()
    log_path = os.path.join(workdir, "serve_skip.log")
    proc, log = launch(tessera, model, port, log_path, ["--tp", "2", "--dp", "2", "--dist-timeout", "5"] + DPA,
                       {"TSR_DPA_FAULT": "skip:1:200"})
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        stop_server(proc)
        log.close()
    with open(log_path) as f:
        text = f.read()
    named = re.search(r"stopping the job: DP-attention lockstep broken: .*attn_dp group", text) is not None
    good = proc.returncode not in (0, None) and named
    ok &= good
    print(f"serve with TSR_DPA_FAULT=skip:1:200: exit {proc.returncode}, the job stopped naming the group: {named} "
          f"{'ok' if good else 'FAIL'}")
    return ok


def two_node(tessera, workdir):
    model = make_served_model(tessera, "qwen3-moe", workdir)
    expected = serve_expected(tessera, model, workdir, "two_node")
    addr = f"127.0.0.1:{free_port()}"
    port = free_port()
    common = ["--tp", "4", "--dp", "2", "--nnodes", "2", "--dist-init-addr", addr, "--dist-timeout", "30"] + DPA
    token = {"TESSERA_JOB_TOKEN": f"dpa-two-node-{os.getpid()}"}  # the same on every node of one job
    node1, log1 = launch(tessera, model, free_port(), os.path.join(workdir, "node1.log"), common + ["--node-rank", "1"],
                         token)
    node0, log0 = launch(tessera, model, port, os.path.join(workdir, "node0.log"), common + ["--node-rank", "0"], token)
    try:
        if not wait_ready(port, node0):
            print("two nodes: node 0 did not start FAIL")
            return False
        got = concurrently(port, PROMPTS)
        tokens, idle = group_counters(port, 2)
        good = got == expected and all(t > 0 for t in tokens)
        print(f"two nodes x TP2 (TP4/DPA2): 8 concurrent requests {'same as' if got == expected else 'DIFFER from'} "
              f"one rank; tokens per group {tokens} {'ok' if good else 'FAIL'}")
        # SIGTERM on node 0 alone: node 1's group cannot run without it, so it drains and stops too.
        stop_server(node0)
        try:
            node1.wait(30)
        except subprocess.TimeoutExpired:
            pass
        followed = node0.returncode == 0 and node1.returncode == 0
        print(f"SIGTERM on node 0: node 0 exit {node0.returncode}, node 1 stopped by itself with exit "
              f"{node1.returncode} {'ok' if followed else 'FAIL'}")
        return good and followed
    finally:
        stop_server(node0)
        stop_server(node1)
        log0.close()
        log1.close()


# ---- the prefill delayer ------------------------------------------------------------------------

def delayer_outcomes(port):
    """{(dp_rank or None, estimation, allow, reason, ran): count} and {dp_rank: wait passes sum}."""
    _, text = call(port, "GET", "/metrics")
    outcomes, waited = {}, {}
    for line in text.splitlines():
        group = re.search(r'dp_rank="(\d+)"', line)
        g = int(group.group(1)) if group else None
        m = re.match(r'sglang:prefill_delayer_outcomes_total\{.*input_estimation="(\w+)",output_allow="(\w+)",'
                     r'output_reason="(\w*)",actual_execution="(\w+)".*\} (\S+)$', line)
        if m:
            outcomes[(g,) + m.groups()[:4]] = float(m.group(5))
        m = re.match(r"sglang:prefill_delayer_wait_forward_passes_sum\{.*\} (\S+)$", line)
        if m:
            waited[g] = float(m.group(1))
    return outcomes, waited


def refused(tessera, model, flags, needle, env=None):
    out = subprocess.run([tessera, "serve", "--model-path", model, "--port", str(free_port())] + flags,
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))
    return out.returncode != 0 and needle in out.stdout + out.stderr


def prefill_delayer(tessera, workdir):
    model = make_served_model(tessera, "qwen3-moe", workdir)
    expected = serve_expected(tessera, model, workdir, "qwen3-moe")
    ok = True
    port = free_port()
    flags = ["--tp", "2", "--dp", "2", "--enable-prefill-delayer", "--prefill-delayer-max-delay-passes", "5",
             "--dist-timeout", "30"] + DPA
    proc, log = launch(tessera, model, port, os.path.join(workdir, "delayer_dpa2.log"), flags)
    try:
        if not wait_ready(port, proc):
            print("prefill delayer under DPA2: server did not start FAIL")
            return False
        lone = greedy(port, PROMPTS[0])  # round_robin: group 0; group 1 has nothing
        outcomes, waited = delayer_outcomes(port)
        delays = outcomes.get((0, "mixed", "false", "delay", "false"), 0)
        timeouts = outcomes.get((0, "mixed", "true", "wait_timeout", "true"), 0)
        good = lone == expected[0] and delays == 4 and timeouts == 1 and waited.get(0) == 4
        print(f"a lone request under DPA2: tokens {'same' if lone == expected[0] else 'DIFFER'}, delayed {delays:g} "
              f"passes, wait_timeout {timeouts:g}, wait_forward_passes_sum {waited.get(0)} {'ok' if good else 'FAIL'}")
        ok &= good
        got = concurrently(port, PROMPTS)
        outcomes, _ = delayer_outcomes(port)
        together = sum(n for (g, e, allow, reason, ran), n in outcomes.items()
                       if e == "all" and allow == "true" and ran == "true")
        good = got == expected and together >= 1
        print(f"8 concurrent requests under DPA2: {'same as' if got == expected else 'DIFFER from'} one rank; "
              f"prefills with every group ready: {together:g} {'ok' if good else 'FAIL'}")
        ok &= good
        with open(log.name) as f:
            described = "PrefillDelayer initialized with max_delay_passes=5" in f.read()
        ok &= described
        print(f"start-up line: {'PrefillDelayer initialized ... ok' if described else 'missing FAIL'}")
    finally:
        stop_server(proc)
        log.close()
    ok &= proc.returncode == 0

    port = free_port()
    proc, log = launch(tessera, model, port, os.path.join(workdir, "delayer_one_rank.log"),
                       ["--enable-prefill-delayer"])
    try:
        got = concurrently(port, PROMPTS) if wait_ready(port, proc) else None
        outcomes, _ = delayer_outcomes(port) if got else ({}, {})
        ran = sum(n for (g, e, allow, reason, actual), n in outcomes.items() if allow == "true" and actual == "true")
        good = got == expected and ran >= 1
        print(f"one rank with the delayer: {'same' if got == expected else 'DIFFER'} tokens, allowed prefills {ran:g} "
              f"{'ok' if good else 'FAIL'}")
        ok &= good
    finally:
        stop_server(proc)
        log.close()

    needle = "To use PrefillDelayer, disable_overlap_schedule must be False"
    for extra in (["--disable-overlap-schedule"], ["--pp-size", "2"]):
        good = refused(tessera, model, ["--enable-prefill-delayer"] + extra, needle)
        print(f"--enable-prefill-delayer {' '.join(extra)}: {'refused' if good else 'NOT refused'} "
              f"{'ok' if good else 'FAIL'}")
        ok &= good
    # SGLang's deprecated spelling turns the delayer on too (so the same rule refuses it).
    good = refused(tessera, model, ["--disable-overlap-schedule"], needle,
                   {"SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE": "1"})
    print(f"SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1 --disable-overlap-schedule: "
          f"{'refused' if good else 'NOT refused'} {'ok' if good else 'FAIL'}")
    ok &= good
    return ok


if __name__ == "__main__":
    sys.exit(run_case({"equivalence": equivalence, "serve": serve, "faults": faults, "two-node": two_node,
                       "prefill-delayer": prefill_delayer}))
