#!/usr/bin/env bash
# The main job on the embedded default: starts the OpenAI-compatible server on 127.0.0.1:30000
# with the trained default model (models/tessera-tiny-chat, a 16M-parameter Qwen3 trained in
# this repository on Debian's public-domain dictionaries and fortunes; docs/default-model.md).
# Stop it with Ctrl-C (it drains in-flight requests).
# Usage: bash scripts/run.sh [extra `tessera serve` flags, e.g. --tp 2 --port 30001]
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/tessera-tiny-chat
cat >&2 <<MSG
Talk to it from another shell, e.g.:
  curl -s http://127.0.0.1:30000/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "tessera-tiny-chat", "messages": [{"role": "user", "content": "What does apple mean?"}], "max_tokens": 64, "temperature": 0}'
MSG
exec ./build/tessera serve --model-path "$model" --host 127.0.0.1 --port 30000 "$@"
