#!/usr/bin/python3
"""/update_weights_from_disk (SGLang's, for RL): a served tiny Qwen3 (f32, seed 5) takes the
weights of the same model trained further (here: the same shapes written with seed 6), as a
client drives it over HTTP:

  update     the answer is SGLang's {success, message, num_paused_requests}; greedy tokens are
             then those of a server started on the new folder; /model_info reports the new
             model_path and weight_version; the prefix cache was flushed (a repeated prompt is
             not served from KV the old weights computed).
  refused    another model (fewer layers), a folder without weights, load_format dummy: 400,
             success false, SGLang's "Failed to update weights: ... Rolling back to original
             weights." naming the cause, and the served weights are unchanged.
  waits      sent while a long request streams (not paused): the request finishes on the old
             weights, a second update sent meanwhile runs after the first, and a request sent
             meanwhile waits and runs on the new weights.
  paused     /pause_generation retract, update, /continue_generation: the retracted request
             is recomputed on the new weights.
  errors     no model_path: 400 naming it; GET: 405; with --admin-api-key the admin key.
  layouts    TP2 (parallel label): one rank's tokens of the new weights after the update;
             --dp-size 2: every replica updates and the front combines the answers; TP2 x EP2
             on a tiny Qwen3-MoE with EPLB: the new experts' tokens; PP2: one rank's tokens,
             and a folder only the second stage cannot load is refused on both stages;
             DP-attention: both groups update in the same round, after a running request.

Usage: weight_update_serve_test.py --tessera PATH --workdir DIR [--layouts]
Exit 0 pass, 1 fail.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time

from e2e_support import Checks, Server, StreamingRequest, call, script_options, streaming_started

check = Checks()
PROMPT = [3, 14, 15, 92, 65, 35]
OTHER = [7, 7, 7, 1]
LONG = 1500  # tokens: long enough to send an update mid-way on the tiny model


def make_model(tessera, out, seed, extra=(), arch="qwen3"):
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--tokenizer", "qwen3",
                    "--dtype", "f32", "--seed", str(seed), "--out", out, *extra], check=True, capture_output=True)
    return out


def without_tensors(model, out, prefix):
    """A copy of `model` whose safetensors index leaves out the tensors named `prefix`..."""
    shutil.rmtree(out, ignore_errors=True)  # a rerun in the same work folder
    shutil.copytree(model, out)
    path = os.path.join(out, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header = {k: v for k, v in header.items() if not k.startswith(prefix)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return out


def greedy(port, prompt, n=8):
    status, text = call(port, "POST", "/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=120)
    return json.loads(text)["output_ids"] if status == 200 else f"HTTP {status}: {text}"


def update(port, body, headers=None):
    status, text = call(port, "POST", "/update_weights_from_disk", body, timeout=300, headers=headers)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def model_info(port):
    _, text = call(port, "GET", "/model_info")
    return json.loads(text)


def reference_tokens(tessera, model, workdir, name, flags=()):
    """Greedy tokens of a server started on `model`."""
    server = Server(tessera, model, list(flags), os.path.join(workdir, f"ref_{name}.log"))
    try:
        if not check(f"{name}: reference server ready", server.ready()):
            return None
        return {"prompt": greedy(server.port, PROMPT), "other": greedy(server.port, OTHER),
                "long": greedy(server.port, PROMPT, LONG)}
    finally:
        server.close()


class Background(threading.Thread):
    """A call in the background: its (status, answer)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result = fn, None

    def run(self):
        self.result = self.fn()


def wait_for(cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline and not cond():
        time.sleep(0.01)
    return cond()


def single_server(tessera, workdir, old, new, other, ref_old, ref_new):
    server = Server(tessera, old, ["--weight-version", "v0"], os.path.join(workdir, "update.log"))
    try:
        if not check("server ready", server.ready()):
            return
        port = server.port
        check("before: the old weights' tokens", greedy(port, PROMPT) == ref_old["prompt"])

        status, answer = update(port, {"model_path": new, "weight_version": "step-1"})
        check("update: 200 with SGLang's body", status == 200 and answer == {
            "success": True, "message": "Succeeded to update model weights. Weight version updated to step-1.",
            "num_paused_requests": 0}, f"{status} {answer}")
        check("update: greedy tokens of a server started on the new folder",
              greedy(port, PROMPT) == ref_new["prompt"] and greedy(port, OTHER) == ref_new["other"],
              f"{greedy(port, PROMPT)} vs {ref_new['prompt']}")
        info = model_info(port)
        check("update: /model_info reports the new folder and weight version",
              info.get("model_path") == new and info.get("weight_version") == "step-1", info)
        log = open(server.log_path).read()
        check("update: the prefix cache was flushed", "prefix cache flushed" in log, log[-2000:])

        # Refused updates keep the served weights.
        for name, body, cause in (
                ("another model", {"model_path": other}, "another model: its num_hidden_layers is 2"),
                ("no weights", {"model_path": workdir}, workdir),
                ("dummy", {"model_path": new, "load_format": "dummy"}, "load_format dummy cannot update weights")):
            status, answer = update(port, body)
            message = answer.get("message", "") if isinstance(answer, dict) else ""
            check(f"refused ({name}): 400, success false, SGLang's message with the cause",
                  status == 400 and answer.get("success") is False and
                  message.startswith("Failed to update weights: ") and cause in message and
                  message.endswith("Rolling back to original weights."), f"{status} {answer}")
        check("refused: the served weights are unchanged", greedy(port, PROMPT) == ref_new["prompt"])
        check("refused: the weight version is unchanged", model_info(port).get("weight_version") == "step-1")

        # Sent while a long request streams: it waits for that request, which ends on the old
        # (here: current) weights; a request sent meanwhile waits and runs on the new ones.
        long_req = StreamingRequest(port, PROMPT, LONG)
        long_req.start()
        wait_for(lambda: len(long_req.ids) >= 5)
        pending = Background(lambda: update(port, {"model_path": old, "weight_version": "v0-again"}))
        pending.start()
        time.sleep(0.2)
        second = Background(lambda: update(port, {"model_path": old, "weight_version": "v0-twice"}))
        second.start()
        time.sleep(0.2)
        waiting = Background(lambda: greedy(port, OTHER))
        waiting.start()
        time.sleep(0.3)
        check("waits: the update waits for the running request", pending.result is None and long_req.finish_reason
              is None, f"{pending.result} {long_req.finish_reason}")
        check("waits: a request sent meanwhile waits", waiting.result is None, waiting.result)
        long_req.join(300)
        pending.join(300)
        second.join(300)
        waiting.join(300)
        check("waits: the running request finished on the weights it started with",
              long_req.finish_reason == "length" and long_req.ids == ref_new["long"],
              f"{long_req.finish_reason} {len(long_req.ids)} {long_req.error}")
        check("waits: the update then succeeded", pending.result is not None and pending.result[0] == 200,
              pending.result)
        check("waits: a second update sent meanwhile ran after it",
              second.result is not None and second.result[0] == 200 and
              model_info(port).get("weight_version") == "v0-twice", f"{second.result} {model_info(port)}")
        check("waits: the request sent meanwhile ran on the new weights", waiting.result == ref_old["other"],
              f"{waiting.result} vs {ref_old['other']}")

        # Paused with retract: the retracted request is recomputed on the new weights.
        long_req = StreamingRequest(port, OTHER, 40)
        long_req.start()
        wait_for(lambda: len(long_req.ids) >= 3)
        call(port, "POST", "/pause_generation", {"mode": "retract"})
        status, answer = update(port, {"model_path": new})
        check("paused: the update answers at once", status == 200 and answer.get("success") is True,
              f"{status} {answer}")
        call(port, "POST", "/continue_generation", {})
        long_req.join(120)
        check("paused: the retracted request finishes", long_req.finish_reason == "length", long_req.finish_reason)
        check("paused: then the new weights serve", greedy(port, PROMPT) == ref_new["prompt"])
        check("paused: a weight update without weight_version keeps the last one",
              model_info(port).get("weight_version") == "v0-twice", model_info(port))

        status, text = call(port, "POST", "/update_weights_from_disk", {"load_format": "auto"})
        check("no model_path: 400 naming it", status == 400 and "model_path" in text, f"{status} {text}")
        status, _ = call(port, "GET", "/update_weights_from_disk")
        check("GET: 405", status == 405, status)
    finally:
        server.close()


def admin_key(tessera, workdir, new):
    server = Server(tessera, new, ["--api-key", "user", "--admin-api-key", "admin"],
                    os.path.join(workdir, "update_admin.log"))
    try:
        if not check("server with keys ready", server.ready()):
            return
        status, _ = update(server.port, {"model_path": new}, {"Authorization": "Bearer user"})
        check("the user key is refused (401)", status == 401, status)
        status, answer = update(server.port, {"model_path": new}, {"Authorization": "Bearer admin"})
        check("the admin key updates", status == 200 and answer.get("success") is True, f"{status} {answer}")
    finally:
        server.close()


def layouts(tessera, workdir, old, new, ref_new):
    # TP2: every rank loads its share; one rank's tokens of the new weights.
    server = Server(tessera, old, ["--tp-size", "2"], os.path.join(workdir, "update_tp2.log"))
    try:
        if check("tp2: server ready", server.ready()):
            status, answer = update(server.port, {"model_path": new})
            check("tp2: update succeeds", status == 200 and answer.get("success") is True, f"{status} {answer}")
            check("tp2: one rank's tokens of the new weights", greedy(server.port, PROMPT) == ref_new["prompt"])
            status, answer = update(server.port, {"model_path": workdir})
            check("tp2: a folder without weights is refused on every rank, the weights kept",
                  status == 400 and greedy(server.port, PROMPT) == ref_new["prompt"], f"{status} {answer}")
    finally:
        server.close()

    # --dp-size 2: the front sends the update to every replica and combines their answers.
    server = Server(tessera, old, ["--dp-size", "2"], os.path.join(workdir, "update_dp2.log"))
    try:
        if check("dp2: server ready", server.ready()):
            status, answer = update(server.port, {"model_path": new, "weight_version": "w2"})
            want = "Succeeded to update model weights. Weight version updated to w2."
            check("dp2: both replicas succeed, the answers combined", status == 200 and answer == {
                "success": True, "message": want + " | " + want, "num_paused_requests": [0, 0]}, f"{status} {answer}")
            outs = [greedy(server.port, PROMPT) for _ in range(4)]
            check("dp2: every replica serves the new weights", all(o == ref_new["prompt"] for o in outs), outs)
    finally:
        server.close()

    # EP2 on a tiny Qwen3-MoE with a rebalancing EPLB: every rank loads its experts.
    moe_old = make_model(tessera, os.path.join(workdir, "moe_old"), 5, arch="qwen3-moe")
    moe_new = make_model(tessera, os.path.join(workdir, "moe_new"), 6, arch="qwen3-moe")
    ep_flags = ["--tp-size", "2", "--ep-size", "2", "--moe-a2a-backend", "all_to_all", "--enable-eplb",
                "--ep-num-redundant-experts", "2"]
    ref_moe = reference_tokens(tessera, moe_new, workdir, "moe_new", ep_flags)
    server = Server(tessera, moe_old, ep_flags, os.path.join(workdir, "update_ep2.log"))
    try:
        if ref_moe is not None and check("ep2: server ready", server.ready()):
            before = greedy(server.port, PROMPT)
            status, answer = update(server.port, {"model_path": moe_new})
            check("ep2: update succeeds", status == 200 and answer.get("success") is True, f"{status} {answer}")
            after = greedy(server.port, PROMPT)
            check("ep2: the new experts' tokens", after == ref_moe["prompt"] and before != after,
                  f"{before} -> {after}, want {ref_moe['prompt']}")
    finally:
        server.close()

    # PP2: each stage loads its layers; a folder whose last layer only the second stage misses is
    # refused on every stage (the first had loaded its share, and drops it).
    no_last_layer = without_tensors(new, os.path.join(workdir, "no_last_layer"), "model.layers.2.")
    server = Server(tessera, old, ["--pp-size", "2"], os.path.join(workdir, "update_pp2.log"))
    try:
        if check("pp2: server ready", server.ready()):
            before = greedy(server.port, PROMPT)
            status, answer = update(server.port, {"model_path": no_last_layer})
            check("pp2: a folder the second stage cannot load is refused",
                  status == 400 and answer.get("success") is False and
                  "a later pipeline stage could not load its share" in answer.get("message", ""), f"{status} {answer}")
            check("pp2: every stage kept its weights", greedy(server.port, PROMPT) == before)
            status, answer = update(server.port, {"model_path": new})
            check("pp2: update succeeds", status == 200 and answer.get("success") is True, f"{status} {answer}")
            check("pp2: one rank's tokens of the new weights", greedy(server.port, PROMPT) == ref_new["prompt"])
    finally:
        server.close()

    # DP attention: the groups load in the same round, once each group's running requests
    # finished; a folder one rank cannot load is refused by both groups.
    server = Server(tessera, old, ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"],
                    os.path.join(workdir, "update_dpa.log"))
    try:
        if check("dpa: server ready", server.ready()):
            before = greedy(server.port, PROMPT)
            long_req = streaming_started(server.port, OTHER, 300)
            status, answer = update(server.port, {"model_path": new, "weight_version": "w2"})
            want = "Succeeded to update model weights. Weight version updated to w2."
            check("dpa: both groups succeed, the answers combined", status == 200 and answer == {
                "success": True, "message": want + " | " + want, "num_paused_requests": [0, 0]}, f"{status} {answer}")
            long_req.join(120)
            check("dpa: the running request finished first", long_req.finish_reason == "length",
                  long_req.finish_reason)
            outs = [greedy(server.port, PROMPT) for _ in range(4)]
            check("dpa: every group serves one rank's tokens of the new weights",
                  all(o == ref_new["prompt"] for o in outs) and before != ref_new["prompt"], f"{outs} {before}")
            status, answer = update(server.port, {"model_path": workdir})
            check("dpa: a folder without weights is refused by both groups, the weights kept",
                  status == 400 and answer.get("success") is False and
                  all(greedy(server.port, PROMPT) == ref_new["prompt"] for _ in range(2)), f"{status} {answer}")
    finally:
        server.close()


def main():
    args = script_options(__doc__, {"--layouts": "TP2, --dp-size 2, PP2 and DP-attention instead of one rank"})
    old = make_model(args.tessera, os.path.join(args.workdir, "old"), 5)
    new = make_model(args.tessera, os.path.join(args.workdir, "new"), 6)
    ref_new = reference_tokens(args.tessera, new, args.workdir, "new")
    if ref_new is None:
        return check.report()
    if args.layouts:
        layouts(args.tessera, args.workdir, old, new, ref_new)
    else:
        other = make_model(args.tessera, os.path.join(args.workdir, "other"), 6, ("--num-layers", "2"))
        ref_old = reference_tokens(args.tessera, old, args.workdir, "old")
        if ref_old is not None:
            check("the two folders give different tokens", ref_old["prompt"] != ref_new["prompt"])
            single_server(args.tessera, args.workdir, old, new, other, ref_old, ref_new)
            admin_key(args.tessera, args.workdir, new)
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
