#!/usr/bin/python3
"""Measures a trained default model the way its tests will, from the saved bf16 weights.

Writes MODEL_DIR/heldout.json: WINDOWS evenly spaced 257-token windows of the held-out id
stream, the PyTorch (f32) perplexity over them and the floor the tests hold tessera to.

Usage: scripts/default-model/evaluate.py --data DIR --model MODEL_DIR
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as default_model  # noqa: E402

WINDOWS = 32
WINDOW = 257
# tessera computes in bf16, PyTorch here in f32: the floor leaves room for that, and nothing
# near the gap between a trained model (tens) and random weights (thousands).
FLOOR_MARGIN = 1.1


def heldout_windows(stream):
    return [stream[i * (len(stream) - WINDOW) // WINDOWS:][:WINDOW].astype(int).tolist()
            for i in range(WINDOWS)]


def perplexity(model, windows):
    losses = []
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor(w)
            logits = model(ids[None, :-1])[0]
            losses.append(F.cross_entropy(logits, ids[1:], reduction="sum").item())
    return math.exp(sum(losses) / sum(len(w) - 1 for w in windows))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder with heldout.bin")
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = default_model.load(args.model)
    windows = heldout_windows(np.fromfile(f"{args.data}/heldout.bin", dtype=np.uint16))
    ppl = perplexity(model, windows)
    with open(f"{args.model}/heldout.json", "w") as f:
        json.dump({"perplexity_pytorch": round(ppl, 3), "perplexity_floor": round(ppl * FLOOR_MARGIN, 3),
                   "windows": windows}, f)
    print(f"held-out perplexity (PyTorch, f32, {WINDOWS} windows of {WINDOW - 1} predictions): {ppl:.3f}")


if __name__ == "__main__":
    main()
