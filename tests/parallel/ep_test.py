#!/usr/bin/python3
"""Expert parallelism end to end, through `tessera generate` as a user runs it.

  equivalence  MoE models (tiny, f32 weights) under EP layouts give one rank's greedy tokens
               and logits within 1e-4 (only the summation order of the collectives differs):
               Qwen3-MoE with --moe-a2a-backend none at EP2, EP4, EP2 inside TP4 (moe_tp 2) and
               PP2 x EP2, and with all_to_all at TP2, TP4 and PP2 x TP2 (ep = tp); Qwen2-MoE
               (shared expert, one dense layer) and Mixtral at EP2 with both dispatchers;
               DeepSeek-V2 (MLA, softmax routing) at TP2, TP4, PP2, EP2 and DeepSeek-V3 (q
               compression, noaux_tc routing) at TP2, EP4, PP2 x EP2 and all_to_all. An EP2
               rank holds about half of the one-rank weights (only its experts); under
               all_to_all no MoE output is all-reduced (shared experts are whole per rank).
  eplb         redundant experts and every dispatch algorithm (static, dynamic, and fake
               against fake on one rank, also with live rebalancing), an
               --init-expert-location placement, and live rebalancing in the middle of a
               generation (EP2 masked and all_to_all, layer by layer, PP2 x EP2, DeepSeek-V3's
               hierarchical balancer at EP4): one rank's greedy tokens and logits within 1e-4,
               and the logs show experts moved (each chunk's transfer beside a forward pass)
               with the probe batch unchanged; with the transfer corrupted on purpose, every
               rebalance is rolled back and the tokens stay the same; with one rank's transfer
               failing, every rank keeps the old placement; above
               --eplb-min-rebalancing-utilization-threshold the rebalance is skipped.
  kill         two nodes on loopback running EP2 with all_to_all; killing node 1's rank
               mid-generation makes node 0 exit non-zero, naming the lost rank, and leaves no
               process behind.

Usage: ep_test.py --tessera PATH --case {equivalence,eplb,kill} --workdir DIR
Exit 0 pass, 1 fail.
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tp_test import PROMPT, NEW_TOKENS, free_port, kill_node1_mid_run, make_model, run_case  # noqa: E402

LOGIT_TOLERANCE = 1e-4

LAYOUTS = {
    "qwen3-moe": [
        ["--tp", "2", "--ep", "2"],
        ["--tp", "4", "--ep", "4"],
        ["--tp", "4", "--ep", "2"],
        ["--pp-size", "2", "--tp", "2", "--ep", "2"],
        ["--tp", "2", "--moe-a2a-backend", "all_to_all"],
        ["--tp", "4", "--moe-a2a-backend", "all_to_all"],
        ["--pp-size", "2", "--tp", "2", "--moe-a2a-backend", "all_to_all"],
    ],
    "qwen2-moe": [
        ["--tp", "2", "--ep", "2"],
        ["--tp", "2", "--moe-a2a-backend", "all_to_all"],
    ],
    "mixtral": [
        ["--tp", "2", "--ep", "2"],
        ["--tp", "2", "--moe-a2a-backend", "all_to_all"],
    ],
    # MLA: heads split over TP (4 heads: one per rank at TP4), the latent on every rank.
    "deepseek-v2": [
        ["--tp", "2"],
        ["--tp", "4"],
        ["--pp-size", "2"],
        ["--tp", "2", "--ep", "2"],
    ],
    "deepseek-v3": [
        ["--tp", "2"],
        ["--tp", "4", "--ep", "4"],
        ["--pp-size", "2", "--tp", "2", "--ep", "2"],
        ["--tp", "2", "--moe-a2a-backend", "all_to_all"],
    ],
}


def generate(tessera, model, extra, logits, env=None, with_log=False):
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", str(NEW_TOKENS),
           "--ignore-eos", "--json", "--threads", "1", "--logits-out", logits] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return (json.loads(p.stdout), p.stderr) if with_log else json.loads(p.stdout)


def equivalence(tessera, workdir):
    ok = True
    for arch, layouts in LAYOUTS.items():
        model = make_model(tessera, arch, workdir)
        base_logits = os.path.join(workdir, f"{arch}_one_rank.npy")
        one_rank = generate(tessera, model, [], base_logits)
        base = one_rank["output_ids"]
        for i, layout in enumerate(layouts):
            logits = os.path.join(workdir, f"{arch}_{i}.npy")
            report = generate(tessera, model, layout, logits)
            ids = report["output_ids"]
            diff = float(np.abs(np.load(logits) - np.load(base_logits)).max())
            good = ids == base and diff < LOGIT_TOLERANCE
            ok &= good
            print(f"{arch} {' '.join(layout)}: tokens {'same' if ids == base else 'DIFFER'}, "
                  f"max|logit diff| {diff:.2e} {'ok' if good else 'FAIL'}")
            if ids != base:
                print(f"  one rank: {base}\n  layout:   {ids}")
            if "all_to_all" in layout:
                # The combine returns the MoE output, shared experts included (they are whole
                # on every rank): no all-reduce of MoE outputs is left.
                payload = report["moe_bytes_per_token_layer"]["all_reduce_payload"]
                good = payload == 0
                ok &= good
                print(f"{arch} {' '.join(layout)}: MoE all-reduce payload {payload:g} B/token "
                      f"{'ok' if good else 'FAIL'}")
            if layout == ["--tp", "2", "--ep", "2"] and not arch.startswith("deepseek"):
                # Experts are most of a tiny MoE model: a rank that loaded all of them would hold
                # ~85% of the one-rank weights, one that holds its half ~50%.
                share = report["weight_mb_per_rank"] / one_rank["weight_mb_per_rank"]
                good = share < 0.6
                ok &= good
                print(f"{arch} EP2 rank weights: {share:.2f} of one rank's {'ok' if good else 'FAIL'}")
    return ok


EPLB = ["--ep-num-redundant-experts", "2"]
REBALANCE = ["--enable-eplb", "--eplb-rebalance-num-iterations", "4"]
EPLB_LAYOUTS = {
    "qwen3-moe": [
        (["--tp", "2", "--ep", "2"] + EPLB, "compare"),
        (["--tp", "2", "--ep", "2", "--ep-dispatch-algorithm", "dynamic"] + EPLB, "compare"),
        (["--tp", "2", "--moe-a2a-backend", "all_to_all", "--ep-num-redundant-experts", "4"], "compare"),
        (["--tp", "2", "--ep", "2", "--init-expert-location",
          json.dumps({"physical_to_logical_map": [[7, 6, 5, 4, 3, 2, 1, 0, 7, 0]] * 3})] + EPLB, "compare"),
        (["--tp", "2", "--ep", "2"] + EPLB + REBALANCE + ["--eplb-rebalance-layers-per-chunk", "1"], "rebalance"),
        (["--tp", "2", "--moe-a2a-backend", "all_to_all"] + EPLB + REBALANCE, "rebalance"),
        (["--pp-size", "2", "--tp", "2", "--ep", "2"] + EPLB + REBALANCE, "rebalance"),
        (["--tp", "2", "--ep", "2"] + EPLB + REBALANCE, "rollback"),
        (["--tp", "2", "--ep", "2"] + EPLB + REBALANCE, "failed-transfer"),
        (["--tp", "2", "--ep", "2"] + EPLB + REBALANCE + ["--eplb-min-rebalancing-utilization-threshold", "0.05"],
         "skip"),
    ],
    "deepseek-v3": [
        (["--tp", "4", "--ep", "4", "--ep-num-redundant-experts", "4"] + REBALANCE, "rebalance"),
    ],
}


def eplb(tessera, workdir):
    ok = True
    for arch, layouts in EPLB_LAYOUTS.items():
        model = make_model(tessera, arch, workdir)
        base_logits = os.path.join(workdir, f"{arch}_one_rank.npy")
        base = generate(tessera, model, [], base_logits)["output_ids"]
        for i, (layout, kind) in enumerate(layouts):
            logits = os.path.join(workdir, f"{arch}_eplb_{i}.npy")
            env = dict(os.environ)
            if kind == "rollback":
                env["TSR_EPLB_FAULT_CORRUPT_TRANSFER"] = "1"
            if kind == "failed-transfer":
                env["TSR_EPLB_FAULT_FAIL_TRANSFER"] = "1"
            report, log = generate(tessera, model, layout + ["--log-all-ranks"], logits, env=env, with_log=True)
            ids = report["output_ids"]
            diff = float(np.abs(np.load(logits) - np.load(base_logits)).max())
            moved = [line for line in log.splitlines() if "[EPLBManager] rebalanced layers" in line]
            rolled = [line for line in log.splitlines()
                      if "rolled back" in line or "every rank keeps the old placement" in line]
            skipped = [line for line in log.splitlines() if "[EPLBManager] Skipped ep rebalancing" in line]
            good = ids == base and diff < LOGIT_TOLERANCE
            if kind == "rebalance":
                good &= bool(moved) and not rolled and " 0 experts moved" not in "\n".join(moved)
                # Each chunk's transfer ran on its own group beside a forward pass.
                good &= all("beside the pass" in line for line in moved)
            if kind in ("rollback", "failed-transfer"):
                good &= bool(rolled) and not moved
            if kind == "skip":
                good &= bool(skipped) and not moved and not rolled
            ok &= good
            shown = " ".join(a if len(a) < 40 else a[:37] + "..." for a in layout)
            print(f"{arch} {shown} [{kind}]: tokens {'same' if ids == base else 'DIFFER'}, max|logit diff| "
                  f"{diff:.2e}, {len(moved)} layer chunks moved, {len(rolled)} rolled back {'ok' if good else 'FAIL'}")
            if ids != base:
                print(f"  one rank: {base}\n  layout:   {ids}")
        if arch == "qwen3-moe":
            # fake: the router is noise, the same on every rank and layout for the same pass/row.
            fake = ["--ep-dispatch-algorithm", "fake"]
            one = generate(tessera, model, fake, os.path.join(workdir, "fake_one.npy"))["output_ids"]
            two = generate(tessera, model, ["--tp", "2", "--ep", "2"] + EPLB + fake,
                           os.path.join(workdir, "fake_two.npy"))["output_ids"]
            # With live rebalancing too: the probe batch routes the same noise before and after
            # (no roll-back), and leaves the serving passes' noise stream alone (same tokens).
            report, log = generate(tessera, model, ["--tp", "2", "--ep", "2", "--log-all-ranks"] + EPLB + fake +
                                   REBALANCE, os.path.join(workdir, "fake_rebalance.npy"), with_log=True)
            moved = sum("[EPLBManager] rebalanced layers" in line for line in log.splitlines())
            rolled = sum("rolled back" in line for line in log.splitlines())
            rebalanced = report["output_ids"] == one and moved > 0 and rolled == 0
            good = one == two and one != base and rebalanced
            ok &= good
            print(f"qwen3-moe fake dispatch: one rank and EP2 agree ({one == two}), differ from the real router "
                  f"({one != base}); with live rebalancing: tokens {'same' if report['output_ids'] == one else 'DIFFER'}, "
                  f"{moved} layer chunks moved, {rolled} rolled back {'ok' if good else 'FAIL'}")
    return ok


def kill_mid_all_to_all(tessera, workdir):
    model = make_model(tessera, "qwen3-moe", workdir)
    addr = f"127.0.0.1:{free_port()}"

    def node(rank):
        return [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", "4000",
                "--ignore-eos", "--json", "--threads", "1", "--tp", "2", "--moe-a2a-backend", "all_to_all",
                "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", addr, "--dist-timeout", "20"]

    result = kill_node1_mid_run(node(0), node(1), "model loaded", settle_s=0.5)
    if result is None:
        return False
    n0, n1, err0, elapsed, leftovers = result
    reported = any(op in err0 for op in ("all_to_all_v", "all_gather", "all_reduce", "broadcast")) and \
        ("lost rank 1" in err0 or "no answer from rank 1" in err0)
    good = n0.returncode != 0 and n1.returncode != 0 and not leftovers and reported
    print(f"kill (EP2 all_to_all, two nodes): node 0 exit {n0.returncode} after {elapsed:.1f} s, node 1 exit "
          f"{n1.returncode}, leftover processes: {leftovers} {'ok' if good else 'FAIL'}")
    print("  node 0 said: " + next((l for l in err0.splitlines() if " E]" in l), "(no error line)"))
    return good


if __name__ == "__main__":
    sys.exit(run_case({"equivalence": equivalence, "eplb": eplb, "kill": kill_mid_all_to_all}))
