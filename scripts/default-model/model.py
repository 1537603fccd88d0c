"""The default models in PyTorch, written from Hugging Face's Qwen3 / Qwen3-MoE modeling code
(modeling_qwen3.py, modeling_qwen3_moe.py): the training code, and the forward the tests hold
tessera's logits against. Parameter names are the checkpoint's tensor names."""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        probs = scores.float().masked_fill(causal, float("-inf")).softmax(-1).to(v.dtype)
        out = probs @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    """Qwen3MoeSparseMoeBlock: softmax router in f32, top-k, renormalized (norm_topk_prob)."""

    def __init__(self, c):
        super().__init__()
        self.top_k, self.num_experts = c["num_experts_per_tok"], c["num_experts"]
        self.norm_topk_prob = c["norm_topk_prob"]
        self.gate = nn.Linear(c["hidden_size"], self.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(c["hidden_size"], c["moe_intermediate_size"])
                                     for _ in range(self.num_experts))
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.gate(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
        # Switch-Transformer balance loss, as Qwen3-MoE's load_balancing_loss_func.
        share = F.one_hot(chosen, self.num_experts).float().sum(1).mean(0) / self.top_k
        self.aux_loss = self.num_experts * (share * probs.mean(0)).sum()
        return out.view(shape)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = SparseMoe(c) if "num_experts" in c else MLP(c["hidden_size"], c["intermediate_size"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class CausalLM(nn.Module):
    """Qwen3ForCausalLM / Qwen3MoeForCausalLM with tied embeddings."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Inner(config)
        d = config["head_dim"]
        inv_freq = 1.0 / (config["rope_theta"] ** (torch.arange(0, d, 2).float() / d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        angles = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos.to(x.dtype), sin.to(x.dtype))
        return F.linear(self.model.norm(x), self.model.embed_tokens.weight)

    def initialize(self):
        """The training's initialisation: every matrix from N(0, 0.02), norms at one."""
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)
        return self

    def aux_loss(self):
        losses = [l.mlp.aux_loss for l in self.model.layers if isinstance(l.mlp, SparseMoe)]
        return sum(losses) / len(losses) if losses else 0.0


def save_safetensors(model, path):
    """Writes every parameter as bf16 (the tied lm_head is not stored, as Hugging Face does)."""
    header, blobs, offset = {}, [], 0
    for name, p in sorted(model.named_parameters()):
        raw = p.detach().to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(p.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    meta = json.dumps(header, separators=(",", ":")).encode()
    meta += b" " * (-len(meta) % 8)
    with open(path, "wb") as f:
        f.write(len(meta).to_bytes(8, "little"))
        f.write(meta)
        for raw in blobs:
            f.write(raw)


def load(model_dir):
    """The checkpoint in model_dir as an f32 CausalLM."""
    config = json.load(open(f"{model_dir}/config.json"))
    model = CausalLM(config)
    with open(f"{model_dir}/model.safetensors", "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        data = f.read()
    state = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        bits = np.frombuffer(data[begin:end], dtype=np.uint16).astype(np.uint32) << 16
        state[name] = torch.from_numpy(bits.view(np.float32).reshape(info["shape"]).copy())
    model.load_state_dict(state)
    return model.eval()
