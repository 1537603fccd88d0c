#!/usr/bin/python3
"""EPLB while serving, as a user drives it over HTTP (tiny Qwen3-MoE, TP2 = EP2, f32):

  recorder   --expert-distribution-recorder-mode per_pass with 2 redundant experts:
             POST /start_expert_distribution_record, one /generate, stop, dump. Each rank
             writes its JSON file; the counts sum to tokens x top_k x MoE layers, every pass's
             balancedness equals (mean + 1e-5) / (max + 1e-5) of its EP ranks' loads from its
             global_physical_count, /metrics shows sglang:eplb_balancedness, GET is refused.
  refused    without a recorder mode the endpoints answer 400 naming the flag and the ranks
             keep serving (a refused command must not end a follower).
  rebalance  --enable-eplb every 5 passes, one layer per pass: four streaming requests run
             while experts move; each gives one rank's greedy tokens, the log shows layers
             moved and the dumped placement is no longer the trivial one.

Usage: eplb_serve_test.py --tessera PATH --workdir DIR
Exit 0 pass, 1 fail.
"""

import argparse
import glob
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading

from e2e_support import Checks, call, free_port, make_tiny_model, stop_server, wait_ready

check = Checks()
PROMPTS = [[3, 14, 15, 92, 65, 35, 89, 79], [11, 22, 33, 44], [500, 400, 300, 200, 100, 50], [7, 7, 7, 7, 7, 1]]


def stream_ids(port, prompt, n):
    """Token ids of a streamed greedy /generate."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/generate", body=json.dumps({
        "input_ids": prompt, "stream": True,
        "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}).encode(),
        headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    ids = []
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data:") and line != "data: [DONE]":
            ids = json.loads(line[5:])["output_ids"]
    conn.close()
    return ids


def one_rank_ids(tessera, model, prompt, n):
    p = subprocess.run([tessera, "generate", "--model-path", model, "--prompt-ids", ",".join(map(str, prompt)),
                        "--max-new-tokens", str(n), "--ignore-eos", "--json", "--threads", "1"],
                       capture_output=True, text=True, timeout=120, check=True)
    return json.loads(p.stdout)["output_ids"]


def start_server(tessera, model, workdir, name, extra):
    port = free_port()
    dumps = os.path.join(workdir, name + "_dumps")
    shutil.rmtree(dumps, ignore_errors=True)  # a rerun in the same folder starts clean
    os.makedirs(dumps)
    log_path = os.path.join(workdir, name + ".log")
    log = open(log_path, "w")
    env = dict(os.environ, SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=dumps)
    server = subprocess.Popen([tessera, "serve", "--model-path", model, "--port", str(port), "--tp", "2", "--ep", "2",
                               "--threads", "1", "--max-total-tokens", "4096", "--ep-num-redundant-experts", "2",
                               *extra], stdout=log, stderr=subprocess.STDOUT, env=env)
    return server, port, dumps, log, log_path


def stop(server, log):
    stop_server(server)
    log.close()


def recorder_case(tessera, model, workdir, config):
    server, port, dumps, log, log_path = start_server(
        tessera, model, workdir, "recorder",
        ["--expert-distribution-recorder-mode", "per_pass", "--expert-balancedness-report-mode", "both"])
    try:
        if not check("recorder server starts", wait_ready(port, server), open(log_path).read()[-2000:]):
            return
        check("GET does not change the recorder", call(port, "GET", "/start_expert_distribution_record")[0] == 405)
        status, text = call(port, "POST", "/start_expert_distribution_record")
        check("start", status == 200 and text == "Start recording the expert distribution.\n", f"{status} {text!r}")
        prompt, n = PROMPTS[0], 8
        status, _ = call(port, "POST", "/generate", {"input_ids": prompt,
                                                     "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                                         "ignore_eos": True}})
        check("generate while recording", status == 200)
        check("stop", call(port, "POST", "/stop_expert_distribution_record")[0] == 200)
        status, text = call(port, "POST", "/dump_expert_distribution_record")
        check("dump", status == 200 and text == "Dump expert distribution record.\n", f"{status} {text!r}")
        files = sorted(glob.glob(os.path.join(dumps, "expert_distribution_recorder_*.json")))
        check("per_pass: every rank writes its file",
              sorted(f.rsplit("_", 1)[1] for f in files) == ["0.json", "1.json"], str(files))
        dump = json.load(open(next(f for f in files if f.endswith("_0.json"))))
        records = dump["records"]
        top_k, moe_layers, experts = config["num_experts_per_tok"], config["num_hidden_layers"], config["num_experts"]
        tokens = sum(r["num_tokens"] for r in records)
        routed = sum(sum(sum(row) for row in r["logical_count"]) for r in records)
        check("the recorded passes hold the prompt and the decode steps", tokens == len(prompt) + n - 1,
              f"{tokens} tokens in {len(records)} passes")
        check("counts sum to tokens x top_k x MoE layers", routed == tokens * top_k * moe_layers,
              f"{routed} vs {tokens} x {top_k} x {moe_layers}")
        slots = experts + 2
        worst = 0.0
        for r in records:
            values = []
            for layer in r["global_physical_count"]:
                loads = [sum(layer[:slots // 2]), sum(layer[slots // 2:])]
                if sum(loads):
                    values.append((sum(loads) / 2 + 1e-5) / (max(loads) + 1e-5))
            worst = max(worst, abs(sum(values) / len(values) - r["balancedness"]))
        check("balancedness is mean / max of the EP ranks' loads", worst < 1e-9, f"max error {worst}")
        metrics = call(port, "GET", "/metrics")[1]
        check("/metrics shows sglang:eplb_balancedness", "sglang:eplb_balancedness_count" in metrics)
        check("the log has the balancedness line", "[Expert Balancedness] forward_pass_id=" in open(log_path).read())
    finally:
        stop(server, log)


def refused_case(tessera, model, workdir):
    """Without a recorder mode the endpoints answer 400 naming the flag, and every rank lives on."""
    server, port, dumps, log, log_path = start_server(tessera, model, workdir, "refused", [])
    try:
        if not check("plain EP2 server starts", wait_ready(port, server), open(log_path).read()[-2000:]):
            return
        status, text = call(port, "POST", "/start_expert_distribution_record")
        check("start without a recorder mode is a 400 naming the flag",
              status == 400 and "--expert-distribution-recorder-mode" in text, f"{status} {text!r}")
        status, _ = call(port, "POST", "/generate", {"input_ids": PROMPTS[1],
                                                     "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        check("the server still generates afterwards", status == 200 and server.poll() is None, f"{status}")
    finally:
        stop(server, log)


def rebalance_case(tessera, model, workdir):
    n = 24
    want = [one_rank_ids(tessera, model, p, n) for p in PROMPTS]
    server, port, dumps, log, log_path = start_server(
        tessera, model, workdir, "rebalance",
        ["--enable-eplb", "--eplb-rebalance-num-iterations", "5", "--eplb-rebalance-layers-per-chunk", "1"])
    try:
        if not check("rebalance server starts", wait_ready(port, server), open(log_path).read()[-2000:]):
            return
        got = [None] * len(PROMPTS)
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, stream_ids(port, PROMPTS[i], n)))
                   for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        for i in range(len(PROMPTS)):
            check(f"request {i} streams one rank's greedy tokens across rebalances", got[i] == want[i],
                  f"\n  one rank {want[i]}\n  served   {got[i]}")
        text = open(log_path).read()
        moved = text.count("[EPLBManager] rebalanced layers")
        check("layers were moved while the requests ran", moved >= 2, f"{moved} chunks moved")
        check("no rebalance was rolled back", "rolled back" not in text)
        check("dump after rebalancing", call(port, "POST", "/dump_expert_distribution_record")[0] == 200)
        files = glob.glob(os.path.join(dumps, "expert_distribution_recorder_*.json"))
        placement = json.load(open(files[0]))["last_physical_to_logical_map"] if files else []
        trivial = [p % 8 for p in range(10)]
        check("the placement in force is no longer the trivial one", any(row != trivial for row in placement),
              str(placement))
    finally:
        stop(server, log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    tessera = os.path.abspath(a.tessera)
    os.makedirs(a.workdir, exist_ok=True)
    model = make_tiny_model(tessera, a.workdir, "qwen3-moe")
    config = json.load(open(os.path.join(model, "config.json")))
    recorder_case(tessera, model, a.workdir, config)
    refused_case(tessera, model, a.workdir)
    rebalance_case(tessera, model, a.workdir)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
