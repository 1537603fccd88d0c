#!/usr/bin/python3
"""Turns the raw BPE run into the default model's tokenizer files (Hugging Face layout).

Keeps the 256 byte symbols and the first merges (6141 symbols), then the three chat tokens,
6144 ids in all, and writes tokenizer.json (GPT-2-style byte-level BPE) and
tokenizer_config.json with a ChatML chat template.

Usage: scripts/default-model/tokenizer.py RAW_BPE_JSON MODEL_DIR
"""
import json
import sys

BPE_SYMBOLS = 6141
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def byte_symbols():
    """GPT-2's printable stand-in for each byte, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raw = json.load(open(sys.argv[1]))
    vocab = {symbol: i for i, symbol in enumerate(byte_symbols())}
    merges = []
    for merge in raw["model"]["merges"]:
        if len(vocab) == BPE_SYMBOLS:
            break
        # tokenizers >= 0.20 saves a merge as a pair, older versions as "left right".
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        merged = left + right
        if merged in vocab or left not in vocab or right not in vocab:
            continue
        vocab[merged] = len(vocab)
        merges.append(f"{left} {right}")
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(SPECIAL_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    out = sys.argv[2]
    with open(f"{out}/tokenizer.json", "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in a if k != "id"} for a in added},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(f"{out}/tokenizer_config.json", "w") as f:
        json.dump(config, f, indent=2)
    print(f"{len(vocab)} BPE symbols ({len(merges)} merges) + {len(added)} special tokens")


if __name__ == "__main__":
    main()
