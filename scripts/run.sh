#!/usr/bin/env bash
# The main job on the embedded default: generates the `small` model once (Qwen3-0.6B
# shapes, random bf16 weights, the real Qwen3 tokenizer), then starts the OpenAI-compatible
# server on 127.0.0.1:30000. Stop it with Ctrl-C (it drains in-flight requests).
# Usage: bash scripts/run.sh [extra `tessera serve` flags, e.g. --tp 2 --port 30001]
set -euo pipefail
cd "$(dirname "$0")/.."
model=build/models/qwen3-small-bf16
if [ ! -f "$model/model.safetensors" ]; then
  ./build/tessera make-model --arch qwen3 --preset small --dtype bf16 --seed 0 --out "$model"
fi
cat >&2 <<MSG
Talk to it from another shell, e.g.:
  curl -s http://127.0.0.1:30000/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "qwen3-small", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}'
MSG
exec ./build/tessera serve --model-path "$model" --served-model-name qwen3-small --host 127.0.0.1 --port 30000 "$@"
