#!/usr/bin/python3
"""The trained default models through tessera, held against the PyTorch code that trained them.

1. Tokenizer: tessera's encoding of held-out documents equals Hugging Face tokenizers' ids
   (tokenizer_golden.jsonl, written by scripts/default-model/encode_corpus.js).
2. Forward: tessera's logits for chat prompts and its own greedy answers equal the training
   code's forward (scripts/default-model/model.py) on the same weights: within 1e-3 in f32;
   in bf16 (what `serve` runs) every greedy token is the reference's argmax or a near-tie.
3. Quality floor: held-out perplexity computed by tessera (from --logits-out) is below the
   floor recorded at training time (heldout.json), and a random-weight copy of the model
   is far above it.
4. "What does apple mean?" is answered with mostly dictionary words (/usr/share/dict/words),
   and the random copy's answer is not; TP2, PP2 (and EP2 for MoE) and `tessera serve`
   give the same answer.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "default-model"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import model as default_model  # noqa: E402
from e2e_support import Checks, call, free_port, stop_server, wait_ready  # noqa: E402

F32_TOLERANCE = 1e-3
BF16_RELATIVE_TOLERANCE = 0.05     # of max(1, std of the reference logits), as the numerics tests
DICTIONARY_WORDS_FLOOR = 0.8
QUESTIONS = ["What does apple mean?", "Tell me a fortune.", "What is a compiler in computing?"]
ANSWER_TOKENS = 32


def run_stdout(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def chat_prompt_ids(tessera, model_dir, question):
    proc = subprocess.run([tessera, "tokenize", "--model-path", model_dir, "--chat"],
                          input=json.dumps([{"role": "user", "content": question}]) + "\n",
                          check=True, capture_output=True, text=True)
    rendered = proc.stdout.strip()
    proc = subprocess.run([tessera, "tokenize", "--model-path", model_dir], input=rendered + "\n",
                          check=True, capture_output=True, text=True)
    return json.loads(proc.stdout)


def generate(tessera, model_dir, workdir, prompt_ids, max_new, dtype, name):
    """tessera's greedy tokens and every logits row (prompt and decode) for PROMPT_IDS."""
    logits_path = os.path.join(workdir, f"{name}.npy")
    out = run_stdout([tessera, "generate", "--model-path", model_dir, "--prompt-ids",
                    ",".join(map(str, prompt_ids)), "--max-new-tokens", str(max_new), "--dtype", dtype,
                    "--threads", "1", "--json", "--logits-out", logits_path])
    return json.loads(out)["output_ids"], np.load(logits_path)


def reference_logits(reference, ids):
    with torch.no_grad():
        return reference(torch.tensor([ids]))[0].numpy()


def check_tokenizer(check, tessera, model_dir):
    golden = [json.loads(line) for line in open(os.path.join(HERE, "tokenizer_golden.jsonl"))]
    proc = subprocess.run([tessera, "tokenize", "--model-path", model_dir],
                          input="".join(json.dumps(g["text"]) + "\n" for g in golden),
                          check=True, capture_output=True, text=True)
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    wrong = [i for i, (g, o) in enumerate(zip(golden, ours)) if g["ids"] != o]
    print(f"tokenizer: {len(golden) - len(wrong)} of {len(golden)} held-out documents encode as Hugging Face's")
    check("tokenizer equals Hugging Face tokenizers on held-out documents",
          len(ours) == len(golden) and not wrong, f"first differing document {wrong[:1]}")


def check_forward(check, tessera, model_dir, workdir, reference):
    for q_index, question in enumerate(QUESTIONS):
        prompt = chat_prompt_ids(tessera, model_dir, question)
        for dtype in ("float32", "bfloat16"):
            out_ids, logits = generate(tessera, model_dir, workdir, prompt, ANSWER_TOKENS, dtype,
                                       f"chat{q_index}_{dtype}")
            ids = prompt + out_ids
            ref = reference_logits(reference, ids)[:len(ids) - 1]
            got = logits[:len(ids) - 1]
            diff = float(np.abs(got - ref).max())
            tolerance = F32_TOLERANCE if dtype == "float32" else \
                BF16_RELATIVE_TOLERANCE * max(1.0, float(ref.std()))
            # Along tessera's own tokens: each is the reference's argmax, or short of it by less
            # than the tolerance (a tie that rounding may break either way).
            steps = range(len(prompt) - 1, len(ids) - 1)
            shortfalls = [float(ref[r].max() - ref[r][ids[r + 1]]) for r in steps]
            argmax_hits = sum(s == 0.0 for s in shortfalls)
            print(f"{dtype:8s} '{question}': {len(out_ids)} tokens, {argmax_hits} the reference's argmax, "
                  f"worst shortfall {max(shortfalls):.4f}; max|logit diff| {diff:.5f} (tolerance {tolerance:.4f})")
            check(f"{dtype} greedy tokens follow the reference ({question})",
                  all(s < tolerance for s in shortfalls), f"shortfalls {shortfalls}")
            check(f"{dtype} logits within tolerance ({question})", diff < tolerance, f"{diff}")


def tessera_perplexity(tessera, model_dir, workdir, windows):
    nll, count = 0.0, 0
    for i, window in enumerate(windows):
        _, logits = generate(tessera, model_dir, workdir, window[:-1], 1, "bfloat16", f"heldout{i}")
        rows = logits[:len(window) - 1].astype(np.float64)
        peak = rows.max(1, keepdims=True)
        log_z = peak[:, 0] + np.log(np.exp(rows - peak).sum(1))
        nll += float((log_z - rows[np.arange(len(rows)), window[1:]]).sum())
        count += len(rows)
    return math.exp(nll / count)


def random_copy(model_dir, workdir):
    """The same folder with freshly initialised weights (the training code's initialisation)."""
    out = os.path.join(workdir, "random-weights")
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(model_dir, name)) as src, open(os.path.join(out, name), "w") as dst:
            dst.write(src.read())
    torch.manual_seed(1)
    model = default_model.CausalLM(json.load(open(os.path.join(model_dir, "config.json")))).initialize()
    default_model.save_safetensors(model, os.path.join(out, "model.safetensors"))
    return out


def answer(tessera, model_dir, question, max_new=48, layout=()):
    out = run_stdout([tessera, "generate", "--model-path", model_dir, "--chat", "--prompt", question,
                    "--max-new-tokens", str(max_new), "--threads", "1", "--json", *layout])
    return json.loads(out)["text"]


def dictionary_share(text, dictionary):
    words = re.findall(r"[A-Za-z]+", text)
    known = [w for w in words if w.lower() in dictionary]
    return len(known) / max(1, len(words)), len(words)


def check_quality(check, tessera, model_dir, workdir):
    heldout = json.load(open(os.path.join(model_dir, "heldout.json")))
    floor = heldout["perplexity_floor"]
    ppl = tessera_perplexity(tessera, model_dir, workdir, heldout["windows"])
    print(f"held-out perplexity: tessera {ppl:.3f}, PyTorch at training {heldout['perplexity_pytorch']}, "
          f"floor {floor}")
    check("held-out perplexity below the recorded floor", ppl < floor, f"{ppl} >= {floor}")
    random_dir = random_copy(model_dir, workdir)
    random_ppl = tessera_perplexity(tessera, random_dir, workdir, heldout["windows"][:4])
    print(f"held-out perplexity of random weights: {random_ppl:.1f}")
    check("random weights fail the perplexity floor", random_ppl > 10 * floor, f"{random_ppl}")

    if not os.path.exists("/usr/share/dict/words"):
        check("word list /usr/share/dict/words installed (bash scripts/setup.sh --deps)", False)
        return
    dictionary = {w.strip().lower() for w in open("/usr/share/dict/words", encoding="utf-8", errors="replace")}
    text = answer(tessera, model_dir, "What does apple mean?")
    share, words = dictionary_share(text, dictionary)
    print(f"'What does apple mean?' -> {text!r}: {share:.0%} of {words} words in the dictionary")
    check("apple answered with mostly dictionary words", share >= DICTIONARY_WORDS_FLOOR and words >= 5,
          f"{share:.2f} of {words}")
    layouts = [["--tp-size", "2"], ["--pp-size", "2"]]
    if "num_experts" in json.load(open(os.path.join(model_dir, "config.json"))):
        layouts.append(["--tp-size", "2", "--ep-size", "2"])
    for layout in layouts:
        layout_text = answer(tessera, model_dir, "What does apple mean?", layout=layout)
        print(f"{' '.join(layout)}: {'same answer' if layout_text == text else repr(layout_text)}")
        check(f"{' '.join(layout)} answers as one rank does", layout_text == text)
    random_text = answer(tessera, random_dir, "What does apple mean?")
    random_share, random_words = dictionary_share(random_text, dictionary)
    print(f"random weights -> {random_text!r}: {random_share:.0%} of {random_words} words")
    check("random weights fail the dictionary-word check",
          random_share < DICTIONARY_WORDS_FLOOR or random_words < 5, f"{random_share:.2f}")
    return text


def check_serve(check, tessera, model_dir, workdir, expected):
    port = free_port()
    log = open(os.path.join(workdir, "serve.log"), "w")
    server = subprocess.Popen([tessera, "serve", "--model-path", model_dir, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not check("server ready", wait_ready(port, server)):
            return
        status, body = call(port, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "What does apple mean?"}],
            "max_tokens": 48, "temperature": 0})
        content = json.loads(body)["choices"][0]["message"]["content"] if status == 200 else body
        print(f"serve: {content!r}")
        check("serve answers as generate does", status == 200 and content == expected, f"{status} {content!r}")
    finally:
        stop_server(server)
        log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--model", required=True, help="a trained default model folder")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--serve", action="store_true", help="also check `tessera serve`'s answer")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(1)
    check = Checks()
    reference = default_model.load(args.model)
    check_tokenizer(check, args.tessera, args.model)
    check_forward(check, args.tessera, args.model, args.workdir, reference)
    expected = check_quality(check, args.tessera, args.model, args.workdir)
    if args.serve and expected is not None:
        check_serve(check, args.tessera, args.model, args.workdir, expected)
    print(check.summary())
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
