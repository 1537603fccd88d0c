#!/usr/bin/env bash
# Rebuilds the trained default models from Debian's public-domain text with fixed seeds and
# step counts: corpus -> BPE tokenizer -> id streams ->
# training -> held-out perplexity and floor -> chat samples through tessera.
# Usage: bash scripts/default-model/build.sh [data|dense|moe|all]   (default: all; ~1 hour per
#        model on 2 cores; `data` stops after the id streams). Needs `bash scripts/setup.sh`
#        (tessera built); writes build/default-model-data/ and models/.
set -euo pipefail
cd "$(dirname "$0")/../.."
which_models=${1:-all}
case "$which_models" in data | dense | moe | all) ;; *) echo "usage: $0 [data|dense|moe|all]" >&2; exit 2 ;; esac
data=build/default-model-data
here=scripts/default-model

bash scripts/setup.sh --corpus
(cd tests/tokenizer/golden && npm ci --silent)   # Hugging Face tokenizers, pinned
export NODE_PATH=$PWD/tests/tokenizer/golden/node_modules
mkdir -p "$data"

/usr/bin/python3 $here/corpus.py "$data"
node $here/train_tokenizer.js "$data/tokenizer-input.txt" "$data/bpe-raw.json"
/usr/bin/python3 $here/tokenizer.py "$data/bpe-raw.json" "$data"
node $here/encode_corpus.js "$data/tokenizer.json" "$data/train.jsonl" "$data/train.bin"
node $here/encode_corpus.js "$data/tokenizer.json" "$data/heldout.jsonl" "$data/heldout.bin" \
  tests/default_model/tokenizer_golden.jsonl

train() {  # arch, folder, steps
  local out=models/$2
  mkdir -p "$out"
  cp "$data/tokenizer.json" "$data/tokenizer_config.json" "$out/"
  /usr/bin/python3 $here/train.py --arch "$1" --data "$data" --out "$out" --steps "$3" --batch 8 \
    | tee "$data/$1.log"
  /usr/bin/python3 $here/evaluate.py --data "$data" --model "$out"
  /usr/bin/python3 $here/samples.py --tessera build/tessera --model "$out"
}
case "$which_models" in dense | all) train dense tessera-tiny-chat 2000 ;; esac
case "$which_models" in moe | all) train moe tessera-tiny-chat-moe 2000 ;; esac
