#!/usr/bin/env bash
# The main job on the embedded default: generates the `small` benchmark model (Qwen3-0.6B
# shapes, random bf16 weights, the real Qwen3 tokenizer) once, then runs offline generation.
# Usage: bash scripts/run.sh [extra `tessera generate` flags]
set -euo pipefail
cd "$(dirname "$0")/.."
model=build/models/qwen3-small-bf16
if [ ! -f "$model/model.safetensors" ]; then
  ./build/tessera make-model --arch qwen3 --preset small --dtype bf16 --seed 0 --out "$model"
fi
exec ./build/tessera generate --model-path "$model" \
  --prompt-ids 9707,11,1879,0,358,1079,264,4128,1614,13 --max-new-tokens 32 "$@"
