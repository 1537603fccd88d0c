#!/usr/bin/python3
"""`tessera tokenize` and `tessera generate --prompt/--chat` as a user runs them, checked
against the golden files (ids from Hugging Face `tokenizers`, chat renderings from
python3-jinja2): every golden case goes through ONE process per mode, line by line.

Usage: tokenize_cli_test.py --tessera PATH --workdir DIR
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tokenizer", "golden")
CHAT = os.path.join(HERE, "..", "chat_templates")


def run_lines(tessera, model, flags, values):
    """Feeds one JSON value per line; returns (decoded output lines, exit code, stderr)."""
    text = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values)
    p = subprocess.run([tessera, "tokenize", "--model-path", model] + flags, input=text.encode(),
                       capture_output=True, timeout=120)
    # Only "\n" ends a line: decoded text may hold U+2028 and other characters splitlines() breaks on.
    lines = [l for l in p.stdout.decode().split("\n") if l]
    return [json.loads(l) for l in lines], p.returncode, p.stderr.decode()


def check(name, ok, failures, detail=""):
    if not ok:
        failures.append(name)
        print(f"FAIL: {name} {detail}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    tessera = os.path.abspath(a.tessera)
    failures = []
    passed = 0
    for name in ("qwen3", "llama3"):
        model = os.path.join(a.workdir, name)
        arch = "qwen3" if name == "qwen3" else "llama"
        subprocess.run([tessera, "make-model", "--arch", arch, "--preset", "tiny", "--tokenizer", name,
                        "--seed", "1", "--out", model], check=True, capture_output=True)
        cases = [c for c in json.load(open(os.path.join(GOLDEN, f"{name}.json")))["cases"] if "text" in c]
        texts = [c["text"] for c in cases]

        out, rc, err = run_lines(tessera, model, [], texts)
        bad = [c["text"] for c, o in zip(cases, out) if o != c["ids"]]
        check(f"{name} encode {len(cases)} cases", rc == 0 and len(out) == len(cases) and not bad, failures,
              f"rc={rc} mismatches={bad[:3]} {err[-500:]}")
        out, rc, _ = run_lines(tessera, model, ["--add-special-tokens"], texts)
        bad = [c["text"] for c, o in zip(cases, out) if o != c["ids_with_special"]]
        check(f"{name} encode with special tokens", rc == 0 and not bad, failures, f"{bad[:3]}")
        out, rc, _ = run_lines(tessera, model, ["--decode"], [c["ids_with_special"] for c in cases])
        bad = [c["text"] for c, o in zip(cases, out) if o != c["decoded"]]
        check(f"{name} decode", rc == 0 and not bad, failures, f"{bad[:3]}")
        out, rc, _ = run_lines(tessera, model, ["--decode", "--skip-special-tokens"],
                               [c["ids_with_special"] for c in cases])
        bad = [c["text"] for c, o in zip(cases, out) if o != c["decoded_skip_special"]]
        check(f"{name} decode skipping special tokens", rc == 0 and not bad, failures, f"{bad[:3]}")

        chats = json.load(open(os.path.join(CHAT, f"{name}.json")))["cases"]
        out, rc, err = run_lines(tessera, model, ["--chat"], [c["request"] for c in chats])
        bad = [c["name"] for c, o in zip(chats, out) if o != c["expected"]]
        check(f"{name} chat {len(chats)} conversations", rc == 0 and not bad, failures, f"{bad[:3]} {err[-300:]}")

        # A bad line answers with an error in its place and the rest still flows.
        out, rc, _ = run_lines(tessera, model, ["--decode"], [[1, 2], "not ids", [10 ** 9], [3]])
        check(f"{name} bad lines keep alignment", rc == 1 and len(out) == 4 and "error" in out[1] and
              "error" in out[2] and isinstance(out[3], str), failures, f"{out}")

        # generate: text and chat prompts go through the same tokenizer and template.
        p = subprocess.run([tessera, "generate", "--model-path", model, "--prompt", "Hello, world!", "--chat",
                            "--max-new-tokens", "4", "--json", "--threads", "1"], capture_output=True, text=True)
        j = json.loads(p.stdout) if p.returncode == 0 else {}
        rendered, _, _ = run_lines(tessera, model, ["--chat"],
                                   [{"messages": [{"role": "user", "content": "Hello, world!"}],
                                     "add_generation_prompt": True}])
        ids, _, _ = run_lines(tessera, model, [], rendered)
        check(f"{name} generate --chat uses the template", p.returncode == 0 and j.get("prompt_tokens") == len(ids[0])
              and isinstance(j.get("text"), str), failures, f"{p.stderr[-500:]}")
        passed += 7 - sum(1 for f in failures if f.startswith(name))
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
