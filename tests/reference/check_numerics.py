#!/usr/bin/python3
"""End-to-end numerics check of tessera against the independent PyTorch reference.

Run by CTest as:
    /usr/bin/python3 tests/reference/check_numerics.py --tessera PATH/tessera \
        --arch {llama,qwen2,qwen3,qwen3-moe,qwen2-moe,mixtral,deepseek-v2,deepseek-v3} --dtype {f32,bf16} --workdir DIR
        [--fp8-block N]

Steps: build a tiny random model with `tessera make-model`, greedily decode 32
tokens from a fixed 32-token prompt with `tessera generate` and with
torch_reference.py, then require identical tokens and matching logits on the
prompt rows and the first 16 decode rows (tolerances below). For MoE models the
routing must not be degenerate: every MoE layer must have sent some token to at
least half of its experts (as the reference counts them).

For bf16 models the reference keeps f32 activations (the exact model) while
tessera, like every bf16 x bf16 -> f32 kernel, rounds each linear layer's input
to bf16; the logits tolerance is relative to the logit scale (below). Greedy
tokens must be identical, with one exception: rounding can flip a near-tie, so
if the streams diverge at a step where the reference prefers its own token by
less than the bf16 tolerance, the reference is re-run along tessera's tokens
(teacher forcing) and every gated row must still match, and every tessera token
must be the reference's argmax or within the tolerance of it. A divergence with
a larger margin fails, and so does any divergence in f32, except in a MoE model's
row that a routing flip moved (such rows are accepted up to a budget, below): that
row may choose another token, and the check goes on along tessera's tokens.

With --fp8-block N the model is an FP8 checkpoint (e4m3 codes, N x N weight_scale_inv
tiles) and the reference dequantizes it exactly; tessera multiplies bf16-rounded inputs by
the exact fp8 values (up to 16 rows: decode, small batches) or by bf16 copies of the
scaled weights (prefill), so it is judged with the bf16 tolerances. Then the same seed's bf16 model is run through both, and
tessera's fp8-vs-bf16 logit difference over the prompt rows must stay within the
reference's own (the quantization error) plus twice the bf16 tolerance: FP8 kernels may
not add error of their own beyond rounding.

Exit status: 0 pass, 1 failure (numerics mismatch, or tessera output that
breaks the format contract), 2 setup error (missing binary, failing command,
unreadable model).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Callable, List, Optional

import numpy as np

PROMPT_LEN = 32
NEW_TOKENS = 32
GATED_DECODE_ROWS = 16  # decode rows whose logits are compared (the rest are reported only)
MODEL_SEED = 7

# Tolerances on max |tessera - reference| over the gated logits rows.
#
# f32: both sides compute in f32 and differ only in summation order, which moves
#      logits by ~2e-5 on these models; 1e-3 is an absolute bound with ample room.
# bf16: the weights are identical (bf16 widens exactly to f32), but tessera
#      rounds every matmul input to bf16 (unit roundoff 2^-9 ~ 0.2%) while the
#      reference keeps f32. These are many small independent relative errors, so
#      the logit error scales with the logit magnitude: 1.4-2.6% of the logit std
#      at worst over ~50k logits (emulated and measured). 5% of max(1, std) leaves
#      ~2x headroom; real bugs (RoPE pairing, GQA mapping, a missing bias or norm)
#      move logits by tens of percent of the std. The rounding is discontinuous,
#      so a 1e-6 change in summation order can flip one rounding and grow through
#      the layers to ~1% of the std: comparing against a reference that emulates
#      the rounding is no tighter, which is why the exact model is the reference.
F32_ABS_TOLERANCE = 1e-3
BF16_RELATIVE_TOLERANCE = 0.05
# MoE in bf16: top-k routing is discontinuous, and bf16 rounding of the hidden state flips
# the choice between two experts whose router scores are within ~1% of each other. Such a
# row jumps (by up to 60% of the logit std on the tiny Qwen models, more with DeepSeek-V3's
# routed_scaling_factor 2.5) while the rest stay at the dense bf16 error; a flip early in the
# prompt also moves later rows a little through attention (9 of 32 prompt rows on the tiny
# Qwen3-MoE). So per phase at most half of the rows may exceed the bf16 tolerance: a real bug
# (wrong weights, scale or expert) moves nearly every row. f32 runs, where no flip happens,
# keep the strict per-row bound.
MOE_BF16_MAX_FLIPPED_FRACTION = 1 / 2

REFERENCE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.py")


class SetupError(Exception):
    """The check could not run (as opposed to tessera computing wrong numbers)."""


class ContractError(Exception):
    """tessera ran but its output breaks the documented format: a failure."""


def run(cmd: List[str], what: str) -> str:
    """Runs a command, returning its stdout; any failure is a setup error."""
    print(f"$ {' '.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise SetupError(f"{what}: cannot execute: {e}")
    if proc.returncode != 0:
        raise SetupError(f"{what} exited with status {proc.returncode}\n--- stderr ---\n{proc.stderr}"
                         f"--- stdout ---\n{proc.stdout}")
    return proc.stdout


def deterministic_prompt(vocab_size: int) -> List[int]:
    """32 ids spread over [1, vocab): a fixed LCG, so the prompt never depends
    on a library's random number generator."""
    state, ids = 12345, []
    for _ in range(PROMPT_LEN):
        state = (1103515245 * state + 12345) % 2**31
        ids.append(1 + state % (vocab_size - 1))
    return ids


def generated_ids(stdout: str, prompt: List[int], source: str, error=ContractError) -> List[int]:
    """Extracts the new tokens from a {"output_ids": [...]} JSON document.

    A list that repeats the prompt first is accepted too, since either
    convention is reasonable for a generate command."""
    try:
        ids = [int(t) for t in json.loads(stdout)["output_ids"]]
    except (ValueError, KeyError, TypeError) as e:
        raise error(f"{source}: stdout is not one JSON object with integer \"output_ids\" ({e}):\n{stdout[:2000]}")
    if len(ids) == len(prompt) + NEW_TOKENS and ids[:len(prompt)] == prompt:
        ids = ids[len(prompt):]
    return ids


def load_logits(path: str, vocab_size: int, source: str, error=ContractError,
                rows: int = PROMPT_LEN + NEW_TOKENS - 1) -> np.ndarray:
    expected = (rows, vocab_size)
    try:
        logits = np.load(path)
    except (OSError, ValueError) as e:
        raise error(f"{source}: cannot read logits {path}: {e}")
    if logits.shape != expected or logits.dtype != np.float32:
        raise error(f"{source}: logits {path} are {logits.dtype}{list(logits.shape)}, expected float32{list(expected)}")
    return logits


def first_mismatch(a: List[int], b: List[int]) -> Optional[int]:
    """Index of the first differing token of two equally long lists, or None."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def tolerance_for(dtype: str, ref_logits: np.ndarray, gated_rows: int) -> float:
    gated = ref_logits[:gated_rows]
    std = float(gated.std())
    print(f"reference logits over gated rows: std {std:.4f}, mean {float(gated.mean()):.4f}, "
          f"max|logit| {float(np.abs(gated).max()):.4f}")
    if dtype == "f32":
        print(f"tolerance (f32): max|diff| < {F32_ABS_TOLERANCE:g} (absolute)")
        return F32_ABS_TOLERANCE
    tolerance = BF16_RELATIVE_TOLERANCE * max(1.0, std)
    print(f"tolerance (bf16): max|diff| < {BF16_RELATIVE_TOLERANCE:g} x max(1, std) = {tolerance:.4f}")
    return tolerance


# Set by main() for MoE models in bf16 (see MOE_BF16_MAX_FLIPPED_FRACTION).
ROUTING_FLIPS_ALLOWED = False


def describe_rows(name: str, rows: range, diff: np.ndarray, tolerance: float, gated: bool) -> bool:
    """Prints one phase of the comparison; returns whether it is within tolerance."""
    if len(rows) == 0:
        print(f"  {name:<16} (no rows comparable)")
        return True
    per_row = diff[rows.start:rows.stop].max(axis=1)
    worst = rows.start + int(per_row.argmax())
    above = [rows.start + i for i, d in enumerate(per_row) if not d < tolerance]
    if ROUTING_FLIPS_ALLOWED and above and len(above) <= MOE_BF16_MAX_FLIPPED_FRACTION * len(rows):
        print(f"  {name:<16} {len(above)} of {len(rows)} rows over the tolerance: routing flips, accepted "
              f"(at most {MOE_BF16_MAX_FLIPPED_FRACTION:g} of the rows)")
        above = []
    verdict = ("ok" if not above else f"FAIL from row {above[0]} ({len(above)} rows over)") if gated else "info only"
    print(f"  {name:<16} rows {rows.start:>2}..{rows.stop - 1:<2}  max|diff| {per_row.max():.3e} (row {worst:>2})"
          f"  mean|diff| {diff[rows.start:rows.stop].mean():.3e}  {verdict}")
    return not above


def compare_logits(tessera_logits: np.ndarray, ref_logits: np.ndarray, same_prefix: int, tolerance: float) -> bool:
    """Compares the prompt rows and the gated decode rows that describe the same
    sequence on both sides (decode row P+i needs generated tokens 0..i equal)."""
    if not np.isfinite(tessera_logits).all():
        bad_row = int(np.argwhere(~np.isfinite(tessera_logits))[0][0])
        print(f"  tessera logits contain NaN/Inf (first in row {bad_row})")
        return False
    gated_end = PROMPT_LEN + min(GATED_DECODE_ROWS, same_prefix)
    diff = np.abs(tessera_logits.astype(np.float64) - ref_logits.astype(np.float64))
    ok_prompt = describe_rows("prompt", range(0, PROMPT_LEN), diff, tolerance, gated=True)
    ok_decode = describe_rows(f"decode[0:{gated_end - PROMPT_LEN}]", range(PROMPT_LEN, gated_end), diff, tolerance, gated=True)
    describe_rows(f"decode[{gated_end - PROMPT_LEN}:]", range(gated_end, PROMPT_LEN + same_prefix), diff, tolerance, gated=False)
    return ok_prompt and ok_decode


def reference_preference(ref_logits: np.ndarray, step: int, ref_token: int, other_token: int) -> float:
    """How much the reference prefers its greedy token over another one at a step."""
    row = ref_logits[PROMPT_LEN - 1 + step]
    return float(row[ref_token] - row[other_token])


def routing_flipped(tessera_logits: np.ndarray, ref_logits: np.ndarray, row: int, tolerance: float) -> bool:
    """Whether a row of a MoE model in bf16 jumped from the reference's (a routing flip, see
    MOE_BF16_MAX_FLIPPED_FRACTION): such a row can pick another token by any margin."""
    return ROUTING_FLIPS_ALLOWED and not float(np.abs(tessera_logits[row] - ref_logits[row]).max()) < tolerance


def tokens_are_near_ties(tessera_ids: List[int], tessera_logits: np.ndarray, forced_logits: np.ndarray,
                         tolerance: float) -> bool:
    """Along tessera's own tokens, each must be the reference's argmax or within
    `tolerance` of it, i.e. a tie that rounding can flip, or come from a routing-flipped row
    (whose count compare_logits bounds)."""
    ok = True
    for step, token in enumerate(tessera_ids):
        row = PROMPT_LEN - 1 + step
        shortfall = float(forced_logits[row].max() - forced_logits[row][token])
        if shortfall > 0:
            if shortfall < tolerance:
                verdict = "near-tie, accepted"
            elif routing_flipped(tessera_logits, forced_logits, row, tolerance):
                verdict = "its row is a routing flip, accepted"
            else:
                verdict, ok = "beyond tolerance", False
            print(f"  step {step}: tessera token {token} is {shortfall:.4g} below the reference argmax "
                  f"{int(forced_logits[row].argmax())} ({verdict})")
    return ok


def judge(dtype: str, tessera_ids: List[int], tessera_logits: np.ndarray, ref_ids: List[int],
          ref_logits: np.ndarray, reference_along: Callable[[List[int]], np.ndarray]) -> bool:
    """Applies the pass rules, printing the summary; True on pass."""
    tolerance = tolerance_for(dtype, ref_logits, PROMPT_LEN + GATED_DECODE_ROWS)
    diverged_at = first_mismatch(tessera_ids, ref_ids)
    if diverged_at is None:
        print(f"greedy tokens: all {NEW_TOKENS} identical")
        return compare_logits(tessera_logits, ref_logits, NEW_TOKENS - 1, tolerance)
    preference = reference_preference(ref_logits, diverged_at, ref_ids[diverged_at], tessera_ids[diverged_at])
    print(f"greedy tokens: first mismatch at generated token {diverged_at} (tessera {tessera_ids[diverged_at]}, "
          f"reference {ref_ids[diverged_at]}); the reference prefers its token by {preference:.4g}\n"
          f"  tessera:   {tessera_ids}\n  reference: {ref_ids}")
    flipped = routing_flipped(tessera_logits, ref_logits, PROMPT_LEN - 1 + diverged_at, tolerance)
    if dtype == "bf16" and (preference < tolerance or flipped):
        cause = "a routing flip in the row that chose it" if flipped else "a near-tie within the bf16 tolerance"
        print(f"the divergence is {cause}: re-running the reference along tessera's tokens")
        forced_logits = reference_along(tessera_ids)
        tokens_ok = tokens_are_near_ties(tessera_ids, tessera_logits, forced_logits, tolerance)
        return compare_logits(tessera_logits, forced_logits, NEW_TOKENS - 1, tolerance) and tokens_ok
    compare_logits(tessera_logits, ref_logits, diverged_at, tolerance)  # shows where the logits drift apart
    return False


def check_routing(reference_report: dict, model_dir: str) -> None:
    """MoE models only: a check whose tokens all went to one or two experts would not
    exercise the routing, so require every MoE layer to reach half of its experts."""
    hits = reference_report.get("experts_hit")
    if hits is None:
        return
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    experts = config.get("num_experts") or config.get("num_local_experts") or config.get("n_routed_experts")
    print(f"experts hit per MoE layer (of {experts}): {hits}")
    degenerate = {layer: n for layer, n in hits.items() if n < experts / 2}
    if degenerate:
        raise SetupError(f"the routing is degenerate on layers {degenerate}: the test model does not exercise MoE")


def check_against_bf16_original(tessera: str, args, prompt: List[int], fp8_tessera: np.ndarray,
                                 fp8_reference: np.ndarray, tolerance: float) -> bool:
    """FP8 vs the bf16 model of the same seed over the prompt rows: tessera's difference is the
    quantization error the reference measures, within twice the bf16 tolerance."""
    original = os.path.join(args.workdir, "bf16_original")
    shutil.rmtree(original, ignore_errors=True)
    run([tessera, "make-model", "--arch", args.arch, "--preset", "tiny", "--dtype", "bf16",
         "--seed", str(args.seed), "--out", original], "tessera make-model (bf16 original)")
    vocab_size = fp8_tessera.shape[1]
    prompt_arg = ",".join(map(str, prompt))
    tessera_path = os.path.join(args.workdir, "bf16_original_tessera.npy")
    ref_path = os.path.join(args.workdir, "bf16_original_reference.npy")
    run([tessera, "generate", "--model-path", original, "--prompt-ids", prompt_arg, "--max-new-tokens", "1",
         "--ignore-eos", "--json", "--threads", "1", "--logits-out", tessera_path], "tessera generate (bf16 original)")
    run([sys.executable, REFERENCE_SCRIPT, "--model-path", original, "--prompt-ids", prompt_arg,
         "--max-new-tokens", "1", "--out-logits", ref_path,
         "--out-json", os.path.join(args.workdir, "bf16_original_reference.json")], "torch_reference.py (bf16 original)")
    rows = slice(0, PROMPT_LEN)
    bf16_tessera = np.load(tessera_path)[rows]
    bf16_reference = np.load(ref_path)[rows]
    if bf16_tessera.shape != (PROMPT_LEN, vocab_size) or bf16_reference.shape != (PROMPT_LEN, vocab_size):
        raise ContractError(f"bf16 original logits have shapes {bf16_tessera.shape} / {bf16_reference.shape}")
    reference_error = float(np.abs(fp8_reference[rows] - bf16_reference).max())
    tessera_error = float(np.abs(fp8_tessera[rows] - bf16_tessera).max())
    bound = reference_error + 2 * tolerance
    print(f"fp8 vs bf16 original over the prompt rows: reference max|diff| {reference_error:.4f} "
          f"(the quantization error), tessera {tessera_error:.4f}, bound {bound:.4f}")
    if reference_error == 0.0:
        print("FAIL: the fp8 model computes exactly what the bf16 model does: the weights were not quantized")
        return False
    if tessera_error > bound:
        print("FAIL: tessera's fp8 logits move further from the bf16 original than quantization explains")
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tessera", required=True, help="path to the tessera binary")
    parser.add_argument("--arch", required=True, choices=["llama", "qwen2", "qwen3", "qwen3-moe", "qwen2-moe", "mixtral",
                                                            "deepseek-v2", "deepseek-v3"])
    parser.add_argument("--dtype", required=True, choices=["f32", "bf16"])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--fp8-block", type=int, default=0, help="write and check an FP8 checkpoint with N x N blocks")
    parser.add_argument("--seed", type=int, default=MODEL_SEED, help="make-model seed of the tiny model")
    args = parser.parse_args()

    try:
        tessera = os.path.abspath(args.tessera)
        if not (os.path.isfile(tessera) and os.access(tessera, os.X_OK)):
            raise SetupError(f"tessera binary not found or not executable: {tessera}")
        model_dir = os.path.join(args.workdir, "model")
        shutil.rmtree(model_dir, ignore_errors=True)  # never test a stale model
        os.makedirs(args.workdir, exist_ok=True)
        fp8_args = ["--fp8-block", str(args.fp8_block)] if args.fp8_block else []
        run([tessera, "make-model", "--arch", args.arch, "--preset", "tiny", "--dtype", args.dtype,
             "--seed", str(args.seed), "--out", model_dir] + fp8_args, "tessera make-model")
        try:
            with open(os.path.join(model_dir, "config.json")) as f:
                vocab_size = int(json.load(f)["vocab_size"])
        except (OSError, ValueError, KeyError) as e:
            raise SetupError(f"cannot read vocab_size from {model_dir}/config.json: {e}")

        prompt = deterministic_prompt(vocab_size)
        prompt_arg = ",".join(map(str, prompt))
        tessera_logits_path = os.path.join(args.workdir, "tessera_logits.npy")
        ref_logits_path = os.path.join(args.workdir, "reference_logits.npy")
        ref_json_path = os.path.join(args.workdir, "reference.json")
        forced_logits_path = os.path.join(args.workdir, "reference_forced_logits.npy")
        forced_json_path = os.path.join(args.workdir, "reference_forced.json")
        for stale in (tessera_logits_path, ref_logits_path, ref_json_path, forced_logits_path, forced_json_path):
            if os.path.exists(stale):
                os.remove(stale)

        # --ignore-eos: the reference never stops early, so neither may tessera.
        stdout = run([tessera, "generate", "--model-path", model_dir, "--prompt-ids", prompt_arg,
                      "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos", "--json", "--threads", "1",
                      "--logits-out", tessera_logits_path], "tessera generate")
        tessera_ids = generated_ids(stdout, prompt, "tessera generate")
        run([sys.executable, REFERENCE_SCRIPT, "--model-path", model_dir, "--prompt-ids", prompt_arg,
             "--max-new-tokens", str(NEW_TOKENS), "--out-logits", ref_logits_path,
             "--out-json", ref_json_path], "torch_reference.py")
        with open(ref_json_path) as f:
            ref_text = f.read()
        ref_ids = generated_ids(ref_text, prompt, "torch_reference.py", error=SetupError)
        check_routing(json.loads(ref_text), model_dir)
        tessera_logits = load_logits(tessera_logits_path, vocab_size, "tessera generate")
        ref_logits = load_logits(ref_logits_path, vocab_size, "torch_reference.py", error=SetupError)
        if len(tessera_ids) != NEW_TOKENS or not all(0 <= t < vocab_size for t in tessera_ids):
            raise ContractError(f"tessera generate returned {len(tessera_ids)} new tokens {tessera_ids}, "
                                f"expected {NEW_TOKENS} ids in [0, {vocab_size})")

        def reference_along(tokens: List[int]) -> np.ndarray:
            """Reference logits rows for prompt + tokens[:-1] (teacher forcing)."""
            run([sys.executable, REFERENCE_SCRIPT, "--model-path", model_dir,
                 "--prompt-ids", ",".join(map(str, prompt + tokens[:-1])), "--max-new-tokens", "1",
                 "--out-logits", forced_logits_path, "--out-json", forced_json_path],
                "torch_reference.py (teacher-forced)")
            return load_logits(forced_logits_path, vocab_size, "torch_reference.py", error=SetupError)

        global ROUTING_FLIPS_ALLOWED
        judged_as = "bf16" if args.fp8_block else args.dtype
        ROUTING_FLIPS_ALLOWED = judged_as == "bf16" and args.arch in ("qwen3-moe", "qwen2-moe", "mixtral",
                                                                       "deepseek-v2", "deepseek-v3")
        print(f"\n== numerics: arch {args.arch}, dtype {args.dtype}"
              f"{f', fp8 blocks {args.fp8_block}' if args.fp8_block else ''}, vocab {vocab_size}, "
              f"prompt {PROMPT_LEN} tokens, {NEW_TOKENS} new tokens ==")
        passed = judge(judged_as, tessera_ids, tessera_logits, ref_ids, ref_logits, reference_along)
        if args.fp8_block:
            passed = check_against_bf16_original(tessera, args, prompt, tessera_logits, ref_logits,
                                                 tolerance_for("bf16", ref_logits, PROMPT_LEN)) and passed
    except SetupError as e:
        print(f"SETUP ERROR: {e}", file=sys.stderr)
        return 2
    except ContractError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print(f"RESULT: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
