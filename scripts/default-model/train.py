#!/usr/bin/python3
"""Trains one default model on the encoded corpus and writes its Hugging Face folder.

Random 256-token windows of the id stream, AdamW, linear warm-up then cosine decay over a
fixed number of steps (a step count, not a time budget, so a rerun with the same seed gives
the same weights on the same machine), bf16 autocast on CPU. Records the loss curve, the
held-out loss and greedy samples in MODEL_DIR/training.json.

Usage: scripts/default-model/train.py --arch dense|moe --data DIR --out MODEL_DIR [--steps N]
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import CausalLM, save_safetensors  # noqa: E402

VOCAB = 6144
COMMON = {
    "vocab_size": VOCAB, "hidden_size": 384, "num_hidden_layers": 8,
    "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 1024,
    "tie_word_embeddings": True, "attention_bias": False, "hidden_act": "silu",
    "bos_token_id": None, "eos_token_id": 6143, "pad_token_id": 6141, "torch_dtype": "bfloat16",
}
CONFIGS = {
    "dense": dict(COMMON, architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                  intermediate_size=1152),
    # Six layers keep the eight experts' bf16 weights under 50 MB.
    "moe": dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                num_hidden_layers=6, intermediate_size=1152, num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=320, norm_topk_prob=True, decoder_sparse_step=1,
                mlp_only_layers=[], router_aux_loss_coef=0.01, output_router_logits=False),
}
SEQ = 256


def learning_rate(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def heldout_loss(model, heldout, windows=64):
    model.eval()
    losses = []
    with torch.no_grad():
        for i in range(windows):
            start = i * (len(heldout) - SEQ - 1) // windows
            chunk = torch.from_numpy(heldout[start:start + SEQ + 1].astype(np.int64))[None]
            logits = model(chunk[:, :-1]).float()
            losses.append(F.cross_entropy(logits[0], chunk[0, 1:]).item())
    model.train()
    return float(np.mean(losses))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--data", required=True, help="folder with train.bin and heldout.bin")
    parser.add_argument("--out", required=True, help="model folder (tokenizer files already there)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    config = CONFIGS[args.arch]
    model = CausalLM(config).initialize()
    params = sum(p.numel() for p in model.parameters())
    train = np.fromfile(f"{args.data}/train.bin", dtype=np.uint16)
    heldout = np.fromfile(f"{args.data}/heldout.bin", dtype=np.uint16)
    print(f"{args.arch}: {params / 1e6:.2f}M parameters, {len(train)} training tokens, "
          f"{args.steps} steps x {args.batch} x {SEQ}", flush=True)

    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    windows = np.random.default_rng(args.seed)
    curve, started = [], time.time()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, warmup=min(200, args.steps // 10))
        starts = windows.integers(0, len(train) - SEQ - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([train[s:s + SEQ + 1] for s in starts]).astype(np.int64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        aux = model.aux_loss()
        total = loss + config.get("router_aux_loss_coef", 0.0) * aux
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0 or step == args.steps - 1:
            elapsed = time.time() - started
            curve.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(elapsed, 1)})
            print(f"step {step:5d} loss {loss.item():.4f} lr {optimizer.param_groups[0]['lr']:.2e} "
                  f"{elapsed:7.1f} s ({(step + 1) * args.batch * SEQ / elapsed:.0f} tok/s)", flush=True)

    seconds = time.time() - started
    loss = heldout_loss(model, heldout)
    os.makedirs(args.out, exist_ok=True)
    save_safetensors(model, f"{args.out}/model.safetensors")
    with open(f"{args.out}/config.json", "w") as f:
        json.dump(config, f, indent=2)
    with open(f"{args.out}/generation_config.json", "w") as f:
        json.dump({"eos_token_id": [6143, 6141], "pad_token_id": 6141, "do_sample": False}, f, indent=2)
    print(f"held-out loss {loss:.4f} (perplexity {math.exp(loss):.2f}), trained in {seconds / 60:.1f} min",
          flush=True)
    record = {"arch": args.arch, "parameters": params, "steps": args.steps, "batch": args.batch,
              "seq": SEQ, "seed": args.seed, "train_minutes": round(seconds / 60, 1),
              "heldout_loss": round(loss, 4), "heldout_perplexity": round(math.exp(loss), 3),
              "loss_curve": curve}
    with open(f"{args.out}/training.json", "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
