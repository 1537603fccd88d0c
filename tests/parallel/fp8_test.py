#!/usr/bin/python3
"""FP8 checkpoints under tensor, pipeline and expert parallelism.

Usage: fp8_test.py --tessera PATH --case {equivalence,misaligned,kv,kv_scales,mla_kv_scales,eplb} --workdir DIR

equivalence: tiny FP8 models (e4m3, 4 x 4 scale tiles, so every TP2 shard holds whole
  blocks) greedily decode the same tokens with TP2, PP2 and (MoE) EP2 as on one rank, with
  logits within the bf16 bound: every rank dequantizes its shard with its own scales.
eplb: EP2 with live rebalancing moves FP8 experts (codes and scales) and keeps one rank's tokens.
misaligned: 32 x 32 tiles with TP2 split the tiny model's 344-wide MLP into 172-row shards;
  the launch must fail with SGLang's message naming the size and block_n, and no rank may hang.
kv: --kv-cache-dtype bf16 / fp8_e4m3 / fp8_e5m2 on f32 Qwen3 (K and V) and DeepSeek-V3 (MLA
  latents) models over a 300-token sequence, teacher forced: against f32 K/V the fp8 caches
  move the logits by their rounding only (at most KV_E4M3_FACTOR / KV_E5M2_FACTOR times what
  a bf16 cache moves them; e5m2 more than e4m3), they do move them (the cache really is
  fp8), and they hold twice the tokens of a bf16 cache.
kv_scales: the same f32 Qwen3 with K and V made 1024x larger (k_norm and v_proj up, q_norm and
  o_proj down: the same logits), beyond e4m3's range: with the checkpoint's k_scale / v_scale
  of 1024, or the same factors from --quantization-param-path (SGLang's JSON), the e4m3 cache
  is back within the bound of the kv case; without them it is far outside (the scales are
  what keeps it there); the file's factors replace the checkpoint's; a bf16 cache ignores
  them; TP2 gives one rank's tokens; a file for another TP size stops the launch.
mla_kv_scales: the same for DeepSeek-V3's cached latent, with attn_mqa.k_scale / v_scale.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tp_test import PROMPT, generate, run_case, same_as_one_rank  # noqa: E402

# FP8 layers round their inputs to bf16, so a layout is held to the bf16 bound of the
# reference check (tests/reference/check_numerics.py): 5 % of the logits' std. A shard's
# partial sums differ from one rank's in the last bits (each scale block is a rounded
# multiply-add), and now and then that moves one bf16 rounding of an activation; the flip
# reaches every later row through attention (0.04-0.11 on these models, std ~5). A shard with
# the wrong scales moves the logits by whole units.
BF16_RELATIVE_TOLERANCE = 0.05
# An fp8 KV value carries 16x (e4m3) or 32x (e5m2) the rounding error of a bf16 one; the
# logit error measured against f32 K/V grows a little less than that (12.8x / 23.7x on the
# tiny Qwen3, 6.8x / 12.9x on the tiny DeepSeek-V3, whose routing already flips under bf16).
KV_E4M3_FACTOR = 32
KV_E5M2_FACTOR = 64


def make_fp8_model(tessera, arch, workdir, block):
    out = os.path.join(workdir, f"{arch}_fp8_{block}")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--seed", "11", "--fp8-block",
                    str(block), "--out", out], check=True, capture_output=True)
    return out


def equivalence(tessera, workdir):
    ok = True
    layouts = {"qwen3": [["--tp", "2"], ["--pp-size", "2"]],
               "qwen3-moe": [["--tp", "2"], ["--tp", "2", "--ep", "2"]],
               "deepseek-v3": [["--tp", "2"]]}
    for arch, extras in layouts.items():
        model = make_fp8_model(tessera, arch, workdir, 4)
        base_logits = os.path.join(workdir, f"{arch}_one.npy")
        base = generate(tessera, model, [], base_logits)
        tolerance = BF16_RELATIVE_TOLERANCE * max(1.0, float(np.load(base_logits).std()))
        print(f"{arch} fp8: logits within {tolerance:.3f} of one rank's ({BF16_RELATIVE_TOLERANCE:g} x their std)")
        for extra in extras:
            name = "".join(extra).replace("--", "_")
            logits = os.path.join(workdir, f"{arch}{name}.npy")
            ids = generate(tessera, model, extra, logits)
            ok &= same_as_one_rank(f"{arch} fp8 {' '.join(extra)}", ids, base, logits, base_logits, tolerance)
    return ok


def eplb(tessera, workdir):
    """Live rebalancing moves FP8 experts between ranks: codes and scales travel together, so
    the tokens stay those of one rank."""
    model = make_fp8_model(tessera, "qwen3-moe", workdir, 4)
    base = generate(tessera, model, [], os.path.join(workdir, "eplb_one.npy"))
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", "16",
           "--ignore-eos", "--json", "--threads", "1", "--tp", "2", "--ep", "2", "--ep-num-redundant-experts", "2",
           "--enable-eplb", "--eplb-rebalance-num-iterations", "4", "--eplb-rebalance-layers-per-chunk", "1",
           "--log-all-ranks"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    ids = json.loads(p.stdout)["output_ids"]
    moved = [line for line in p.stderr.splitlines() if "[EPLBManager] rebalanced layers" in line]
    good = ids == base and bool(moved) and " 0 experts moved" not in "\n".join(moved)
    print(f"qwen3-moe fp8 EP2 with rebalancing: tokens {'same' if ids == base else 'DIFFER'}, {len(moved)} layer "
          f"chunks moved {'ok' if good else 'FAIL'}")
    return good


def misaligned(tessera, workdir):
    model = make_fp8_model(tessera, "qwen3", workdir, 32)
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", PROMPT, "--max-new-tokens", "4", "--tp", "2",
           "--threads", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    want = "Weight output_partition_size = 172 is not divisible by weight quantization block_n = 32"
    good = p.returncode != 0 and want in p.stderr
    print(f"tp2 over 32 x 32 blocks: exit {p.returncode}, message {'found' if want in p.stderr else 'MISSING'} "
          f"{'ok' if good else 'FAIL'}")
    if not good:
        print(p.stderr[-2000:])
    return good


def prompt_logits(tessera, model, prompt, kv_dtype, path, extra=()):
    """The logits of every row of a teacher-forced prompt with this KV cache type, and the log."""
    cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", prompt, "--max-new-tokens", "1",
           "--threads", "1", "--json", "--kv-cache-dtype", kv_dtype, "--logits-out", path, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return np.load(path), p.stderr


def kv(tessera, workdir):
    ok = True
    prompt = ",".join(str((i * 7919 + 13) % 1000) for i in range(300))
    for arch in ("qwen3", "deepseek-v3"):
        model = os.path.join(workdir, f"{arch}_f32")
        shutil.rmtree(model, ignore_errors=True)
        subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--dtype", "f32", "--seed", "11",
                        "--out", model], check=True, capture_output=True)
        logits, capacity = {}, {}
        for kv_dtype in ("auto", "bf16", "fp8_e4m3", "fp8_e5m2"):
            logits[kv_dtype], _ = prompt_logits(tessera, model, prompt, kv_dtype,
                                                os.path.join(workdir, f"{arch}_kv_{kv_dtype}.npy"))
            # --logits-out runs the model directly; the scheduler's memory plan logs the capacity.
            cmd = [tessera, "generate", "--model-path", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "1",
                   "--threads", "1", "--kv-cache-dtype", kv_dtype]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            found = re.search(r"max_total_num_tokens=(\d+)", p.stderr)
            if p.returncode != 0 or not found:
                raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode} without a memory plan:\n{p.stderr[-3000:]}")
            capacity[kv_dtype] = int(found.group(1))
        exact = logits["auto"]  # f32 K/V
        std = float(exact.std())
        error = {k: float(np.abs(logits[k] - exact).mean()) / std for k in ("bf16", "fp8_e4m3", "fp8_e5m2")}
        print(f"{arch} bf16 KV: mean|logit diff| {error['bf16']:.3%} of std (the unit below)")
        for kv_dtype, factor in (("fp8_e4m3", KV_E4M3_FACTOR), ("fp8_e5m2", KV_E5M2_FACTOR)):
            agree = float((logits[kv_dtype].argmax(1) == exact.argmax(1)).mean())
            ratio = capacity[kv_dtype] / capacity["bf16"]
            good = 0 < error[kv_dtype] <= factor * error["bf16"] and 1.99 < ratio < 2.01
            ok &= good
            print(f"{arch} {kv_dtype} KV: mean|logit diff| {error[kv_dtype]:.3%} of std = "
                  f"{error[kv_dtype] / error['bf16']:.1f} x bf16's (bound {factor}), greedy agreement {agree:.1%}, "
                  f"capacity {capacity[kv_dtype]} vs bf16 {capacity['bf16']} tokens ({ratio:.3f}x) "
                  f"{'ok' if good else 'FAIL'}")
        good = error["fp8_e5m2"] > error["fp8_e4m3"]
        ok &= good
        print(f"{arch}: e5m2 (2 mantissa bits) moves logits more than e4m3 (3) {'ok' if good else 'FAIL'}")
    return ok


def write_f32_safetensors(path, tensors):
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


KV_AMPLITUDE = 1024.0  # e4m3 saturates at 448
SCALED_PROMPT = ",".join(str((i * 7919 + 13) % 1000) for i in range(300))


def loud_models(tessera, workdir, arch, factors, scale_prefix):
    """An f32 `arch` model, its copy whose cached values are KV_AMPLITUDE times larger with the
    same logits (`factors`: per tensor suffix, a factor or a function of the tensor), and that
    copy with the checkpoint scales `<layer>.<scale_prefix>k_scale / v_scale` = KV_AMPLITUDE."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))
    from torch_reference import read_safetensors  # noqa: E402
    base = os.path.join(workdir, f"{arch}_f32")
    shutil.rmtree(base, ignore_errors=True)
    subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--dtype", "f32", "--seed", "11",
                    "--out", base], check=True, capture_output=True)
    tensors = read_safetensors(os.path.join(base, "model.safetensors"))
    for name in list(tensors):
        factor = factors.get(name.split(".", 3)[-1])
        if factor is not None:
            tensors[name] = factor(tensors[name]) if callable(factor) else tensors[name] * np.float32(factor)
    models = {"base": base}
    for label, scales in (("loud", False), ("loud_scaled", True)):
        out = os.path.join(workdir, f"{arch}_{label}")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)
        written = dict(tensors)
        if scales:
            for layer in {name.split(".")[2] for name in tensors if name.startswith("model.layers.")}:
                prefix = f"model.layers.{layer}.self_attn.{scale_prefix}"
                written[prefix + "k_scale"] = np.array(KV_AMPLITUDE, dtype=np.float32)
                written[prefix + "v_scale"] = np.array(KV_AMPLITUDE, dtype=np.float32)
        write_f32_safetensors(os.path.join(out, "model.safetensors"), written)
        models[label] = out
    return models


def scales_file(workdir, name, model_type, layers, tp_size, factor):
    """SGLang's --quantization-param-path JSON with one factor for every rank and layer."""
    path = os.path.join(workdir, name)
    per_rank = {str(layer): factor for layer in range(layers)}
    with open(path, "w") as f:
        json.dump({"model_type": model_type, "kv_cache": {"dtype": "float8_e4m3fn",
                                                          "scaling_factor": {str(r): per_rank for r in range(tp_size)}}},
                  f)
    return path


def scaled_cache_checks(tessera, workdir, models, label, same_tokens_under_tp):
    """The checks both attention kinds pass with KV_AMPLITUDE times larger cached values.
    `same_tokens_under_tp`: whether TP2 must also decode one rank's greedy tokens."""
    config = json.load(open(os.path.join(models["base"], "config.json")))
    layers, model_type = config["num_hidden_layers"], config["model_type"]
    a = KV_AMPLITUDE

    def logits(model, kv_dtype, extra=(), tag=""):
        return prompt_logits(tessera, model, SCALED_PROMPT, kv_dtype,
                             os.path.join(workdir, f"{os.path.basename(model)}_{kv_dtype}{tag}.npy"), extra)

    exact, _ = logits(models["base"], "auto")
    std = float(exact.std())

    def error(x):
        return float(np.abs(x - exact).mean()) / std

    unit = error(logits(models["base"], "bf16")[0])
    same = error(logits(models["loud"], "auto")[0])
    scaled, log = logits(models["loud_scaled"], "fp8_e4m3")
    unscaled = error(logits(models["loud"], "fp8_e4m3")[0])
    bf16_ignores = np.array_equal(logits(models["loud_scaled"], "bf16")[0], logits(models["loud"], "bf16")[0])
    from_file, file_log = logits(models["loud"], "fp8_e4m3",
                                 ["--quantization-param-path", scales_file(workdir, "loud.json", model_type, layers, 1, a)],
                                 "_file")
    replaced = error(logits(models["loud_scaled"], "fp8_e4m3",
                            ["--quantization-param-path", scales_file(workdir, "one.json", model_type, layers, 1, 1.0)],
                            "_file_one")[0])
    bound = KV_E4M3_FACTOR * unit
    checks = [
        (f"K and V x{a:g} with f32 K/V: the same logits ({same:.2e} of std)", same < 1e-3),
        (f"e4m3 with the checkpoint's k_scale = v_scale = {a:g}: {error(scaled) / unit:.1f} x the bf16 cache's "
         f"error (bound {KV_E4M3_FACTOR})", 0 < error(scaled) <= bound),
        (f"e4m3 without the scales: {unscaled / unit:.1f} x (must exceed the bound)", unscaled > bound),
        ("a bf16 cache ignores the scales", bf16_ignores),
        ("the start-up log counts the checkpoint's scaled layers",
         re.search(r"k_scale / v_scale from the checkpoint in (\d+) of \1 layers", log) is not None),
        (f"e4m3 with --quantization-param-path's {a:g}: {error(from_file) / unit:.1f} x", 0 < error(from_file) <= bound),
        ("the start-up log counts the file's layers",
         re.search(r"from the --quantization-param-path file in (\d+) of \1 layers", file_log) is not None),
        (f"the file's 1.0 replaces the checkpoint's {a:g}: {replaced / unit:.1f} x (must exceed the bound)",
         replaced > bound),
    ]
    # Every rank scales its heads' K and V (or its replicated latent) alike: TP2 stays within the
    # bound, with the checkpoint's scales and with the file's (one entry per TP rank).
    two_ranks = scales_file(workdir, "loud_tp2.json", model_type, layers, 2, a)
    tp2 = error(logits(models["loud_scaled"], "fp8_e4m3", ["--tp", "2"], "_tp2")[0])
    tp2_file = error(logits(models["loud"], "fp8_e4m3", ["--tp", "2", "--quantization-param-path", two_ranks],
                            "_tp2_file")[0])
    checks += [(f"TP2 with the checkpoint's scales: {tp2 / unit:.1f} x", 0 < tp2 <= bound),
               (f"TP2 with --quantization-param-path's: {tp2_file / unit:.1f} x", 0 < tp2_file <= bound)]
    ok = True
    for text, good in checks:
        print(f"{label} {text}: {'ok' if good else 'FAIL'}")
        ok &= good
    # The amplitude is a power of two: divided by its scale, every cached value is the original
    # model's, so decoding (the absorbed MLA form included) gives its tokens and logits.
    flags = ["--kv-cache-dtype", "fp8_e4m3"]
    original, scaled_run = (os.path.join(workdir, f"{label}_decode_{n}.npy") for n in ("original", "scaled"))
    ok &= same_as_one_rank(f"{label} decode, e4m3 cache, scaled by the checkpoint against the original model",
                           generate(tessera, models["loud_scaled"], flags, scaled_run),
                           generate(tessera, models["base"], flags, original), scaled_run, original)
    if same_tokens_under_tp:
        one, two, two_file = (os.path.join(workdir, f"{label}_scaled_{n}.npy") for n in ("tp1", "tp2", "tp2_file"))
        base_ids = generate(tessera, models["loud_scaled"], flags, one)
        ok &= same_as_one_rank(f"{label} TP2, e4m3 cache with the checkpoint's scales",
                               generate(tessera, models["loud_scaled"], flags + ["--tp", "2"], two), base_ids, two, one)
        ok &= same_as_one_rank(f"{label} TP2, e4m3 cache with --quantization-param-path's scales",
                               generate(tessera, models["loud"],
                                        flags + ["--tp", "2", "--quantization-param-path", two_ranks], two_file),
                               base_ids, two_file, one)
    # A file for another TP size stops every rank at start-up with SGLang's message.
    cmd = [tessera, "generate", "--model-path", models["loud"], "--prompt-ids", PROMPT, "--max-new-tokens", "2",
           "--threads", "1", "--tp", "2", "--kv-cache-dtype", "fp8_e4m3", "--quantization-param-path",
           scales_file(workdir, "loud_tp1.json", model_type, layers, 1, a)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    want = "Loaded dictionary has TP size 1 but LLM engine is currently running with TP size 2."
    good = p.returncode != 0 and want in p.stderr
    print(f"{label} TP2 with a one-rank file: exit {p.returncode}, message {'found' if want in p.stderr else 'MISSING'} "
          f"{'ok' if good else 'FAIL'}")
    return ok and good


def kv_scales(tessera, workdir):
    a = KV_AMPLITUDE
    factors = {"self_attn.k_norm.weight": a, "self_attn.q_norm.weight": 1 / a, "self_attn.v_proj.weight": a,
               "self_attn.o_proj.weight": 1 / a}
    return scaled_cache_checks(tessera, workdir, loud_models(tessera, workdir, "qwen3", factors, ""), "qwen3",
                               same_tokens_under_tp=True)


def mla_kv_scales(tessera, workdir):
    """DeepSeek-V3's cached latent [c_kv ; k_pe] made KV_AMPLITUDE larger: kv_a_layernorm and the
    rope rows of kv_a_proj_with_mqa up; kv_b_proj (keys' nope part and values) and the rope rows
    of q_b_proj down."""
    probe = os.path.join(workdir, "probe")
    shutil.rmtree(probe, ignore_errors=True)
    subprocess.run([tessera, "make-model", "--arch", "deepseek-v3", "--preset", "tiny", "--dtype", "f32",
                    "--out", probe], check=True, capture_output=True)
    c = json.load(open(os.path.join(probe, "config.json")))
    r, dr, dn = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"]
    a = np.float32(KV_AMPLITUDE)

    def rope_rows_up(w):
        w = w.copy()
        w[r:r + dr] *= a
        return w

    def q_rope_rows_down(w):
        w = w.reshape(-1, dn + dr, w.shape[-1]).copy()
        w[:, dn:] /= a
        return w.reshape(-1, w.shape[-1])

    factors = {"self_attn.kv_a_layernorm.weight": a, "self_attn.kv_b_proj.weight": 1 / a,
               "self_attn.kv_a_proj_with_mqa.weight": rope_rows_up, "self_attn.q_b_proj.weight": q_rope_rows_down}
    # Its greedy tokens under TP2 are not held to one rank's: with any fp8 cache, an e4m3 rounding
    # that the all-reduce's last bits move flips a near-tie of the tiny model's router within a
    # few tokens (so with scales of 1 on the unscaled model too).
    return scaled_cache_checks(tessera, workdir, loud_models(tessera, workdir, "deepseek-v3", factors, "attn_mqa."),
                               "deepseek-v3", same_tokens_under_tp=False)


def main():
    return run_case({"equivalence": equivalence, "misaligned": misaligned, "kv": kv, "kv_scales": kv_scales,
                     "mla_kv_scales": mla_kv_scales, "eplb": eplb})


if __name__ == "__main__":
    sys.exit(main())
