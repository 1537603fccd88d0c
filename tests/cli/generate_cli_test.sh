#!/usr/bin/env bash
# The `tessera make-model` / `tessera generate` command lines as a user meets them:
# --json prints exactly one JSON object on stdout, logs stay on stderr, bad input fails with
# a message naming the flag. Usage: generate_cli_test.sh TESSERA_BINARY
set -uo pipefail
tessera=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; failures=$((failures + 1)); fi
}

"$tessera" make-model --arch llama --preset tiny --dtype bf16 --seed 1 --out "$work/m" 2>"$work/mm.err"
check "make-model writes config.json" test -s "$work/m/config.json"
check "make-model writes generation_config.json" test -s "$work/m/generation_config.json"

"$tessera" generate --model-path "$work/m" --prompt-ids 1,2,3 --max-new-tokens 5 --json \
  >"$work/out.json" 2>"$work/err.txt"
check "generate --json exits 0" test $? -eq 0
check "stdout is one JSON object with 5 output ids and timings" /usr/bin/python3 -c "
import json, sys
lines = open('$work/out.json').read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert len(j['output_ids']) == 5, j
for k in ('ttft_s', 'prefill_tokens_per_s', 'decode_tokens_per_s'):
    assert j[k] > 0, k
"
check "logs go to stderr" grep -q "loading LlamaForCausalLM" "$work/err.txt"

# Same seed, same sampled tokens; greedy is the default.
a=$("$tessera" generate --model-path "$work/m" --prompt-ids 4,5 --max-new-tokens 8 --temperature 1.0 --top-k 50 --seed 9 --json 2>/dev/null)
b=$("$tessera" generate --model-path "$work/m" --prompt-ids 4,5 --max-new-tokens 8 --temperature 1.0 --top-k 50 --seed 9 --json 2>/dev/null)
check "seeded sampling repeats" test "$(echo "$a" | /usr/bin/python3 -c 'import json,sys;print(json.load(sys.stdin)["output_ids"])')" = \
  "$(echo "$b" | /usr/bin/python3 -c 'import json,sys;print(json.load(sys.stdin)["output_ids"])')"

expect_error() {  # expect_error NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  "$tessera" "$@" >"$work/o.txt" 2>"$work/e.txt"
  local rc=$?
  check "$name exits non-zero" test $rc -ne 0
  check "$name says '$pattern'" grep -q -- "$pattern" "$work/e.txt"
}
expect_error "bad prompt id" "'x' is not a token id" generate --model-path "$work/m" --prompt-ids 1,x
expect_error "token outside the vocabulary" "outside the vocabulary" generate --model-path "$work/m" --prompt-ids 5000
expect_error "text prompt without tokenizer files" "tokenizer.json" generate --model-path "$work/m" --prompt hello
expect_error "both prompt forms" "either as text" generate --model-path "$work/m" --prompt hi --prompt-ids 1
expect_error "serve-only flag" '--dp-size 2: `tessera serve` implements it, this command does not' generate --model-path "$work/m" --prompt-ids 1 --dp 2
expect_error "SGLang feature tessera lacks" "--speculative-algorithm EAGLE: tessera does not implement speculative decoding" generate --model-path "$work/m" --prompt-ids 1 --speculative-algo EAGLE
expect_error "ambiguous prefix" "ambiguous option: --pp could match" generate --model-path "$work/m" --prompt-ids 1 --pp 2
"$tessera" generate --model-path "$work/m" --prompt-ids 1 --max-new-tokens 1 --trust-remote-code --attention-backend fa3 \
  --cuda-graph-max-bs 8 --dp 1 --moe-a2a-backend none --disable-overlap-schedule >/dev/null 2>"$work/e.txt"
check "GPU-only and neutral SGLang flags run" test $? -eq 0
check "GPU-only flags are named once" grep -q "accepted with no effect on this CPU engine: --attention-backend (tunes GPU machinery), --trust-remote-code (tessera never runs code from a model folder), --cuda-graph-max-bs (tunes GPU machinery)" "$work/e.txt"
printf 'model-path: %s\nmax-new-tokens: 1\n' "$work/m" >"$work/c.yaml"
"$tessera" generate --config "$work/c.yaml" --prompt-ids 1 --json >/dev/null 2>"$work/e.txt"
check "--config reads the YAML file" test $? -eq 0
expect_error "bad parallel combination" "tp_size (3) must divide num_attention_heads (4)" generate --model-path "$work/m" --prompt-ids 1 --tp 3
expect_error "unknown flag" "--frobnicate" generate --model-path "$work/m" --prompt-ids 1 --frobnicate 2
expect_error "missing model folder" "no config.json" generate --model-path "$work/none" --prompt-ids 1
expect_error "context overflow" "context length" generate --model-path "$work/m" --prompt-ids 1 --max-new-tokens 5000
expect_error "bad arch" "--arch" make-model --arch gpt2 --out "$work/x"

# --load-format dummy: config.json alone is enough (random weights, for profiling), in TP2 too.
mkdir -p "$work/config-only"
cp "$work/m/config.json" "$work/config-only/"
expect_error "a folder without weights" "no model.safetensors" generate --model-path "$work/config-only" --prompt-ids 1
for tp in 1 2; do
  "$tessera" generate --model-path "$work/config-only" --load-format dummy --tp $tp --prompt-ids 1,2,3 \
    --max-new-tokens 3 --json >"$work/dummy.json" 2>"$work/dummy.err"
  check "dummy weights generate at TP$tp, the checkpoint's size over the ranks" /usr/bin/python3 -c "
import json, os
j = json.load(open('$work/dummy.json'))
assert len(j['output_ids']) == 3 and all(0 <= t < 1000 for t in j['output_ids']), j
checkpoint_mb = os.path.getsize('$work/m/model.safetensors') / 1e6
assert abs(j['weight_mb_per_rank'] * $tp - checkpoint_mb) < 0.5, (j, checkpoint_mb)
"
  check "dummy weights are logged as such at TP$tp" grep -q "load-format dummy: random bf16 weights" "$work/dummy.err"
done
expect_error "a format tessera cannot read" "--load-format gguf is not supported" \
  generate --model-path "$work/m" --prompt-ids 1 --load-format gguf

# --model-checksum: the manifest `tessera checksum` writes verifies; a changed weight stops the
# launch with SGLang's message; the Hub forms name the file that would work.
"$tessera" checksum --model-path "$work/m" >"$work/sums.json" 2>"$work/e.txt"
check "checksum writes SGLang's manifest" /usr/bin/python3 -c "
import hashlib, json
files = json.load(open('$work/sums.json'))['files']
data = open('$work/m/model.safetensors', 'rb').read()
assert files['model.safetensors'] == {'sha256': hashlib.sha256(data).hexdigest(), 'size': len(data)}, files
assert 'config.json' in files, files
"
"$tessera" generate --model-path "$work/m" --prompt-ids 1 --max-new-tokens 1 --model-checksum "$work/sums.json" \
  >/dev/null 2>"$work/e.txt"
check "generate with a matching manifest runs" test $? -eq 0
check "the verification is logged" grep -q "model files verified against" "$work/e.txt"
cp -r "$work/m" "$work/changed"
printf 'x' | dd of="$work/changed/model.safetensors" bs=1 seek=2000 conv=notrunc 2>/dev/null
expect_error "a changed weight file" "Integrity check failed: model.safetensors: mismatch (expected=" \
  generate --model-path "$work/changed" --prompt-ids 1 --model-checksum "$work/sums.json"
expect_error "--model-checksum alone" "not the Hugging Face Hub; give the path of SGLang's checksums JSON" \
  generate --model-path "$work/m" --prompt-ids 1 --model-checksum
expect_error "--model-checksum REPO" "--model-checksum Qwen/Qwen3-8B: tessera checks the model files against a local" \
  generate --model-path "$work/m" --prompt-ids 1 --model-checksum Qwen/Qwen3-8B

echo "$pass passed, $failures failed"
[ "$failures" -eq 0 ]
