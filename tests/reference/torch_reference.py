#!/usr/bin/python3
"""Independent float32 PyTorch reference for tessera's decoder models.

Implements, from the Hugging Face transformers formulas, the forward pass of
``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, the MoE
models ``Qwen3MoeForCausalLM``, ``Qwen2MoeForCausalLM`` and
``MixtralForCausalLM`` (sparse MoE blocks as in their ``*SparseMoeBlock``), and
``DeepseekV2ForCausalLM`` / ``DeepseekV3ForCausalLM`` (multi-head latent
attention in its naive form with yarn rope scaling, DeepSeek's MoE routing), reading a
model folder (``config.json`` plus one ``model.safetensors`` or several shards
listed in ``model.safetensors.index.json``) and greedily decodes from a prompt.

Everything is computed in float32; BF16/F16 weights are upcast exactly.  The
code deliberately avoids tessera and any third-party model code so that it can
serve as an independent oracle for ``tests/reference/check_numerics.py``.

Usage:
    /usr/bin/python3 tests/reference/torch_reference.py --model-path DIR \
        --prompt-ids 1,2,3 --max-new-tokens N \
        --out-logits FILE.npy --out-json FILE.json

Output contract:
    FILE.json  {"output_ids": [the N generated token ids],
                "experts_hit": {layer: distinct experts chosen over the run}} (MoE only)
    FILE.npy   float32 [P + N - 1, vocab]: rows 0..P-1 are the logits at each
               prompt position (row P-1 predicts the first new token); row
               P+i (i = 0..N-2) holds the logits after appending generated
               token i, i.e. the ones that predicted generated token i+1.
"""

import argparse
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "MixtralForCausalLM": "mixtral",
    "DeepseekV2ForCausalLM": "deepseek",
    "DeepseekV3ForCausalLM": "deepseek",
}


# ----------------------------------------------------------------------------
# safetensors loading (the format is simple enough that we parse it ourselves)
# ----------------------------------------------------------------------------

def _fp8_values(exponent_bits: int, mantissa_bits: int, finite_only: bool) -> np.ndarray:
    """float32 value of each of the 256 codes of an IEEE-like 8-bit float (torch.float8_e4m3fn
    when finite_only: no infinities, NaN only at S.1111.111; torch.float8_e5m2 otherwise)."""
    bias = (1 << (exponent_bits - 1)) - 1
    values = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = code & ((1 << mantissa_bits) - 1)
        top = (1 << exponent_bits) - 1
        if finite_only and exponent == top and mantissa == (1 << mantissa_bits) - 1:
            values[code] = np.nan
        elif not finite_only and exponent == top:
            values[code] = sign * np.inf if mantissa == 0 else np.nan
        elif exponent == 0:
            values[code] = sign * 2.0 ** (1 - bias) * mantissa / (1 << mantissa_bits)
        else:
            values[code] = sign * 2.0 ** (exponent - bias) * (1 + mantissa / (1 << mantissa_bits))
    return values


FP8_VALUES = {"F8_E4M3": _fp8_values(4, 3, True), "F8_E5M2": _fp8_values(5, 2, False)}


def _decode_tensor(raw: np.ndarray, dtype: str, shape: List[int], name: str) -> np.ndarray:
    """Turns the raw bytes of one tensor into an exact float32 array (FP8 codes as their
    values, still to be multiplied by their scales: see dequantize_fp8)."""
    if dtype in FP8_VALUES:
        values = FP8_VALUES[dtype][raw.view(np.uint8)]
    elif dtype == "F32":
        values = raw.view("<f4").astype(np.float32)
    elif dtype == "F16":
        values = raw.view("<f2").astype(np.float32)  # every f16 is exact in f32
    elif dtype == "BF16":
        # bf16 is the top half of an f32: widening is a 16-bit left shift.
        values = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(f"tensor {name}: unsupported safetensors dtype {dtype}")
    expected = int(np.prod(shape)) if shape else 1
    if values.size != expected:
        raise ValueError(f"tensor {name}: {values.size} elements, shape {shape} needs {expected}")
    return values.reshape(shape)


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """Reads every tensor of one .safetensors file as float32."""
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= data.size:
            raise ValueError(f"{path}: tensor {name} has offsets {begin}..{end} outside the data")
        tensors[name] = _decode_tensor(np.array(data[begin:end]), info["dtype"], info["shape"], name)
    return tensors


def load_checkpoint(model_dir: str) -> Dict[str, torch.Tensor]:
    """Loads all weights of a model folder, single file or sharded."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        weight_map = None
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")

    tensors: Dict[str, torch.Tensor] = {}
    for file_name in files:
        for name, array in read_safetensors(os.path.join(model_dir, file_name)).items():
            if name in tensors:
                raise ValueError(f"tensor {name} appears in more than one shard")
            if weight_map is not None and weight_map.get(name) != file_name:
                raise ValueError(f"tensor {name} found in {file_name}, index says {weight_map.get(name)}")
            tensors[name] = torch.from_numpy(array)
    if weight_map is not None:
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"index lists tensors absent from the shards: {sorted(missing)[:5]}")
    return dequantize_fp8(model_dir, tensors)


def dequantize_fp8(model_dir: str, tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """An FP8 checkpoint (config.json quantization_config, quant_method fp8) as the exact model
    its codes and scales describe, as DeepSeek's fp8_cast_bf16.py dequantizes it (but kept in
    float32): W[n, k] = value(Q[n, k]) * weight_scale_inv[n // bn, k // bk], with partial
    blocks at the edges; a `weight_scale` of one value or one per row multiplies likewise."""
    with open(os.path.join(model_dir, "config.json")) as f:
        quant = json.load(f).get("quantization_config")
    if not quant or "fp8" not in quant.get("quant_method", ""):
        return tensors
    block_n, block_k = quant.get("weight_block_size") or (128, 128)
    out = {}
    for name, t in tensors.items():
        if name.endswith("_scale_inv") or name.endswith(".weight_scale"):
            continue
        prefix = name[: -len(".weight")] if name.endswith(".weight") else None
        if prefix and prefix + ".weight_scale_inv" in tensors:
            scale = tensors[prefix + ".weight_scale_inv"]
            n, k = t.shape
            expanded = scale.repeat_interleave(block_n, dim=0)[:n].repeat_interleave(block_k, dim=1)[:, :k]
            t = t * expanded
        elif prefix and prefix + ".weight_scale" in tensors:
            scale = tensors[prefix + ".weight_scale"].reshape(-1)
            t = t * (scale if scale.numel() == 1 else scale.reshape(-1, 1))
        out[name] = t
    return out


# ----------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------

@dataclass
class DecoderConfig:
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Optional[dict]
    tie_word_embeddings: bool
    qkv_bias: bool
    o_proj_bias: bool
    mlp_bias: bool
    # MoE (num_experts == 0: dense)
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    shared_expert_intermediate_size: int = 0
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple = ()
    # DeepSeek: the latent attention's sizes and the MoE routing (None for the others)
    mla: Optional[dict] = None
    routing: Optional[dict] = None
    first_k_dense_replace: int = 0

    def rope_dim(self) -> int:
        return self.mla["qk_rope_head_dim"] if self.mla else self.head_dim

    def qk_norm(self) -> bool:
        return self.arch in ("qwen3", "qwen3_moe")

    def moe_block(self) -> str:
        if self.arch == "deepseek":
            return "mlp."
        """Module name of the sparse block (HF: Mixtral's block_sparse_moe, Qwen's mlp)."""
        return "block_sparse_moe." if self.arch == "mixtral" else "mlp."

    def is_moe_layer(self, i: int) -> bool:
        """Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: sparse unless listed in
        mlp_only_layers or off the decoder_sparse_step grid; Mixtral: always."""
        if self.num_experts == 0:
            return False
        if self.arch == "mixtral":
            return True
        if self.arch == "deepseek":  # DeepseekV3DecoderLayer: dense below first_k_dense_replace
            return i >= self.first_k_dense_replace
        return i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0

    @staticmethod
    def from_json(path: str) -> "DecoderConfig":
        with open(path) as f:
            raw = json.load(f)
        architectures = raw.get("architectures") or []
        if len(architectures) != 1 or architectures[0] not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"unsupported architectures {architectures}")
        arch = SUPPORTED_ARCHITECTURES[architectures[0]]
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {raw['hidden_act']}")
        if raw.get("use_sliding_window"):
            raise ValueError("sliding-window attention is not supported by the reference")
        num_heads = raw["num_attention_heads"]
        head_dim = raw.get("head_dim") or raw["hidden_size"] // num_heads
        attention_bias = bool(raw.get("attention_bias", False))
        moe = {}
        if arch in ("qwen3_moe", "qwen2_moe"):
            moe = dict(num_experts=raw["num_experts"], top_k=raw["num_experts_per_tok"],
                       moe_intermediate_size=raw["moe_intermediate_size"],
                       norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
                       shared_expert_intermediate_size=raw.get("shared_expert_intermediate_size", 0)
                       if arch == "qwen2_moe" else 0,
                       decoder_sparse_step=raw.get("decoder_sparse_step", 1),
                       mlp_only_layers=tuple(raw.get("mlp_only_layers") or ()))
        elif arch == "mixtral":
            # MixtralConfig: intermediate_size is each expert's width; top-k always renormalised.
            moe = dict(num_experts=raw.get("num_local_experts", 8), top_k=raw["num_experts_per_tok"],
                       moe_intermediate_size=raw["intermediate_size"], norm_topk_prob=True)
        elif arch == "deepseek":
            moe = dict(num_experts=raw["n_routed_experts"], top_k=raw["num_experts_per_tok"],
                       moe_intermediate_size=raw["moe_intermediate_size"],
                       norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
                       shared_expert_intermediate_size=(raw.get("n_shared_experts") or 0) * raw["moe_intermediate_size"],
                       first_k_dense_replace=raw.get("first_k_dense_replace", 0),
                       mla={k: raw[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                "qk_rope_head_dim", "v_head_dim")},
                       routing=dict(scoring=raw.get("scoring_func", "softmax"),
                                    method=raw.get("topk_method") or "greedy",
                                    n_group=raw.get("n_group") or 1, topk_group=raw.get("topk_group") or 1,
                                    scale=float(raw.get("routed_scaling_factor", 1.0))))
            head_dim = raw["qk_nope_head_dim"] + raw["qk_rope_head_dim"]
        return DecoderConfig(
            arch=arch,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=raw.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            rms_norm_eps=float(raw["rms_norm_eps"]),
            rope_theta=float(raw.get("rope_theta", 10000.0)),
            rope_scaling=raw.get("rope_scaling"),
            # LlamaConfig, Qwen2Config and Qwen3Config all default this to False.
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases; Llama and Qwen3 follow attention_bias,
            # which in transformers also governs o_proj (Qwen2's o_proj never has one).
            qkv_bias=arch in ("qwen2", "qwen2_moe") or attention_bias,
            o_proj_bias=arch not in ("qwen2", "qwen2_moe") and attention_bias,
            mlp_bias=arch == "llama" and bool(raw.get("mlp_bias", False)),
            **moe,
        )


# ----------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------

def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """y = x W^T (+ b), the nn.Linear convention (weight is [out, in])."""
    y = x @ weight.t()
    return y + bias if bias is not None else y


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * weight over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope_inverse_frequencies(config: DecoderConfig) -> torch.Tensor:
    """inv_freq[j] = theta^(-2j/d), adjusted for the configured rope_scaling."""
    d = config.rope_dim()
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = config.rope_scaling
    rope_type = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if rope_type in (None, "default"):
        return inv_freq
    if rope_type == "linear":
        # Dividing every frequency by the factor is the same as dividing positions.
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inverse_frequencies(inv_freq, scaling)
    if rope_type == "yarn":
        return _yarn_inverse_frequencies(inv_freq, d, config.rope_theta, scaling)
    raise ValueError(f"unsupported rope_scaling type {rope_type!r}")


def _llama3_inverse_frequencies(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1 frequency remapping.

    Wavelengths shorter than original_len/high_freq_factor are kept, those
    longer than original_len/low_freq_factor are slowed down by `factor`, and
    the band in between is linearly interpolated in original_len/wavelength.
    """
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    original_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = original_len / low_freq_factor
    high_freq_wavelen = original_len / high_freq_factor

    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    interpolated = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, interpolated, scaled)


def _yarn_inverse_frequencies(inv_freq: torch.Tensor, d: int, base: float, scaling: dict) -> torch.Tensor:
    """DeepSeek's DeepseekV2YarnRotaryEmbedding: frequencies that turn more than beta_fast
    times over the original context are kept, fewer than beta_slow are divided by factor,
    a linear ramp over the dimension index in between."""
    factor = float(scaling["factor"])
    original = float(scaling.get("original_max_position_embeddings", 4096))

    def correction_dim(rotations: float) -> float:
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(float(scaling.get("beta_fast", 32)))), 0)
    high = min(math.ceil(correction_dim(float(scaling.get("beta_slow", 1)))), d - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1.0 - ramp
    return inv_freq / factor * (1 - keep) + inv_freq * keep


def yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last axis (neox / HF rotary layout)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


# ----------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------

class DecoderModel:
    """A dense pre-norm decoder; forward() maps token ids to float32 logits."""

    def __init__(self, model_dir: str):
        self.config = DecoderConfig.from_json(os.path.join(model_dir, "config.json"))
        tensors = load_checkpoint(model_dir)
        self.weights = self._take_expected_weights(tensors)
        self.inv_freq = rope_inverse_frequencies(self.config)
        self.experts_hit: Dict[int, set] = {}  # MoE layer -> experts chosen by any token
        self.routing: Dict[int, torch.Tensor] = {}  # MoE layer -> the last forward's top-k ids [T, k]

    def _expected_shapes(self) -> Dict[str, tuple]:
        c = self.config
        q_dim, kv_dim = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        shapes = {"model.embed_tokens.weight": (c.vocab_size, c.hidden_size),
                  "model.norm.weight": (c.hidden_size,)}
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = (c.vocab_size, c.hidden_size)
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (c.hidden_size,)
            shapes[p + "post_attention_layernorm.weight"] = (c.hidden_size,)
            if c.mla:
                shapes.update(self._mla_shapes(p + "self_attn."))
                if c.is_moe_layer(i):
                    shapes.update(self._moe_shapes(p + c.moe_block()))
                else:
                    shapes.update(self._dense_mlp_shapes(p + "mlp.", c.intermediate_size))
                continue
            shapes[p + "self_attn.q_proj.weight"] = (q_dim, c.hidden_size)
            shapes[p + "self_attn.k_proj.weight"] = (kv_dim, c.hidden_size)
            shapes[p + "self_attn.v_proj.weight"] = (kv_dim, c.hidden_size)
            shapes[p + "self_attn.o_proj.weight"] = (c.hidden_size, q_dim)
            if c.qkv_bias:
                shapes[p + "self_attn.q_proj.bias"] = (q_dim,)
                shapes[p + "self_attn.k_proj.bias"] = (kv_dim,)
                shapes[p + "self_attn.v_proj.bias"] = (kv_dim,)
            if c.o_proj_bias:
                shapes[p + "self_attn.o_proj.bias"] = (c.hidden_size,)
            if c.qk_norm():
                shapes[p + "self_attn.q_norm.weight"] = (c.head_dim,)
                shapes[p + "self_attn.k_norm.weight"] = (c.head_dim,)
            if c.is_moe_layer(i):
                shapes.update(self._moe_shapes(p + c.moe_block()))
                continue
            shapes[p + "mlp.gate_proj.weight"] = (c.intermediate_size, c.hidden_size)
            shapes[p + "mlp.up_proj.weight"] = (c.intermediate_size, c.hidden_size)
            shapes[p + "mlp.down_proj.weight"] = (c.hidden_size, c.intermediate_size)
            if c.mlp_bias:
                shapes[p + "mlp.gate_proj.bias"] = (c.intermediate_size,)
                shapes[p + "mlp.up_proj.bias"] = (c.intermediate_size,)
                shapes[p + "mlp.down_proj.bias"] = (c.hidden_size,)
        return shapes

    def _dense_mlp_shapes(self, p: str, width: int) -> Dict[str, tuple]:
        H = self.config.hidden_size
        return {p + "gate_proj.weight": (width, H), p + "up_proj.weight": (width, H),
                p + "down_proj.weight": (H, width)}

    def _mla_shapes(self, p: str) -> Dict[str, tuple]:
        c, m = self.config, self.config.mla
        H, nH = c.hidden_size, c.num_heads
        qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        shapes = {p + "kv_a_proj_with_mqa.weight": (m["kv_lora_rank"] + m["qk_rope_head_dim"], H),
                  p + "kv_a_layernorm.weight": (m["kv_lora_rank"],),
                  p + "kv_b_proj.weight": (nH * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"]),
                  p + "o_proj.weight": (H, nH * m["v_head_dim"])}
        if m["q_lora_rank"]:
            shapes[p + "q_a_proj.weight"] = (m["q_lora_rank"], H)
            shapes[p + "q_a_layernorm.weight"] = (m["q_lora_rank"],)
            shapes[p + "q_b_proj.weight"] = (nH * qk, m["q_lora_rank"])
        else:
            shapes[p + "q_proj.weight"] = (nH * qk, H)
        return shapes

    def _moe_shapes(self, p: str) -> Dict[str, tuple]:
        c = self.config
        H, I = c.hidden_size, c.moe_intermediate_size
        shapes = {p + "gate.weight": (c.num_experts, H)}
        names = ("w1", "w3", "w2") if c.arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        for e in range(c.num_experts):
            shapes[f"{p}experts.{e}.{names[0]}.weight"] = (I, H)
            shapes[f"{p}experts.{e}.{names[1]}.weight"] = (I, H)
            shapes[f"{p}experts.{e}.{names[2]}.weight"] = (H, I)
        if c.arch == "deepseek":
            if c.shared_expert_intermediate_size:
                shapes.update(self._dense_mlp_shapes(p + "shared_experts.", c.shared_expert_intermediate_size))
            if c.routing["method"] == "noaux_tc":
                shapes[p + "gate.e_score_correction_bias"] = (c.num_experts,)
        elif c.shared_expert_intermediate_size:
            S = c.shared_expert_intermediate_size
            shapes[p + "shared_expert.gate_proj.weight"] = (S, H)
            shapes[p + "shared_expert.up_proj.weight"] = (S, H)
            shapes[p + "shared_expert.down_proj.weight"] = (H, S)
            shapes[p + "shared_expert_gate.weight"] = (1, H)
        return shapes

    def _take_expected_weights(self, tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Checks names and shapes strictly, so a checkpoint the reference would
        read differently from the config (a stray bias, a missing lm_head) fails
        loudly instead of being silently ignored."""
        expected = self._expected_shapes()
        missing = sorted(set(expected) - set(tensors))
        # transformers may serialise the rotary buffer; it carries no weights.
        unexpected = sorted(n for n in set(tensors) - set(expected) if not n.endswith("rotary_emb.inv_freq"))
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match config: missing {missing[:8]}, unexpected {unexpected[:8]}")
        for name, shape in expected.items():
            if tuple(tensors[name].shape) != shape:
                raise ValueError(f"tensor {name}: shape {tuple(tensors[name].shape)}, expected {shape}")
        weights = {name: tensors[name] for name in expected}
        if self.config.tie_word_embeddings:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        return weights

    def _bias(self, name: str) -> Optional[torch.Tensor]:
        return self.weights.get(name)

    def _mla_attention(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """DeepseekV3Attention (naive form): per-head K and V from the normalised latent,
        the rope key shared by all heads, rope on de-interleaved pairs as HF's
        apply_rotary_pos_emb_interleave, softmax scale (nope + rope)^-1/2 x yarn mscale^2."""
        c, w, m, p = self.config, self.weights, self.config.mla, f"model.layers.{i}.self_attn."
        T, nH = x.shape[0], c.num_heads
        dn, dr, dv, r = m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"], m["kv_lora_rank"]
        if m["q_lora_rank"]:
            cq = rms_norm(linear(x, w[p + "q_a_proj.weight"], None), w[p + "q_a_layernorm.weight"], c.rms_norm_eps)
            q = linear(cq, w[p + "q_b_proj.weight"], None)
        else:
            q = linear(x, w[p + "q_proj.weight"], None)
        q = q.view(T, nH, dn + dr).transpose(0, 1)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        kv_a = linear(x, w[p + "kv_a_proj_with_mqa.weight"], None)
        latent = rms_norm(kv_a[:, :r], w[p + "kv_a_layernorm.weight"], c.rms_norm_eps)
        k_pe = kv_a[:, r:].view(1, T, dr)
        kv = linear(latent, w[p + "kv_b_proj.weight"], None).view(T, nH, dn + dv).transpose(0, 1)
        k_nope, v = kv[..., :dn], kv[..., dn:]

        def interleaved_rope(t: torch.Tensor) -> torch.Tensor:
            # [x0, x1, x2, ...] -> [x0, x2, ..., x1, x3, ...], then the half-split rotation.
            t = t.view(*t.shape[:-1], dr // 2, 2).transpose(-1, -2).reshape(t.shape)
            return apply_rope(t, cos, sin)

        q_pe, k_pe = interleaved_rope(q_pe), interleaved_rope(k_pe).expand(nH, T, dr)
        query = torch.cat((q_nope, q_pe), dim=-1)
        key = torch.cat((k_nope, k_pe), dim=-1)
        scale = (dn + dr) ** -0.5
        scaling = c.rope_scaling or {}
        if scaling.get("type", scaling.get("rope_type")) == "yarn" and scaling.get("mscale_all_dim"):
            scale *= yarn_mscale(float(scaling["factor"]), float(scaling["mscale_all_dim"])) ** 2
        scores = (query @ key.transpose(1, 2)) * scale
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        context = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        return linear(context.transpose(0, 1).reshape(T, nH * dv), w[p + "o_proj.weight"], None)

    def _attention(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.config.mla:
            return self._mla_attention(i, x, cos, sin)
        c, w, p = self.config, self.weights, f"model.layers.{i}.self_attn."
        seq_len = x.shape[0]
        q = linear(x, w[p + "q_proj.weight"], self._bias(p + "q_proj.bias"))
        k = linear(x, w[p + "k_proj.weight"], self._bias(p + "k_proj.bias"))
        v = linear(x, w[p + "v_proj.weight"], self._bias(p + "v_proj.bias"))
        # [T, heads*d] -> [heads, T, d]
        q = q.view(seq_len, c.num_heads, c.head_dim).transpose(0, 1)
        k = k.view(seq_len, c.num_kv_heads, c.head_dim).transpose(0, 1)
        v = v.view(seq_len, c.num_kv_heads, c.head_dim).transpose(0, 1)
        if c.qk_norm():
            # Qwen3 normalises each head's q and k before the rotation.
            q = rms_norm(q, w[p + "q_norm.weight"], c.rms_norm_eps)
            k = rms_norm(k, w[p + "k_norm.weight"], c.rms_norm_eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        # GQA: query head h reads kv head h // (num_heads / num_kv_heads).
        group = c.num_heads // c.num_kv_heads
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)

        scores = (q @ k.transpose(1, 2)) / math.sqrt(c.head_dim)
        future = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        context = torch.softmax(scores, dim=-1) @ v
        context = context.transpose(0, 1).reshape(seq_len, c.num_heads * c.head_dim)
        return linear(context, w[p + "o_proj.weight"], self._bias(p + "o_proj.bias"))

    def _swiglu(self, p: str, names, x: torch.Tensor) -> torch.Tensor:
        w = self.weights
        gate = linear(x, w[p + names[0] + ".weight"], self._bias(p + names[0] + ".bias"))
        up = linear(x, w[p + names[1] + ".weight"], self._bias(p + names[1] + ".bias"))
        return linear(torch.nn.functional.silu(gate) * up, w[p + names[2] + ".weight"], self._bias(p + names[2] + ".bias"))

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if self.config.is_moe_layer(i):
            return self._sparse_moe(i, x)
        return self._swiglu(f"model.layers.{i}.mlp.", ("gate_proj", "up_proj", "down_proj"), x)

    def _deepseek_route(self, p: str, x: torch.Tensor):
        """DeepseekV3TopkRouter / MoEGate: softmax or sigmoid scores; greedy, or the best
        groups first (group_limited_greedy: a group's best score; noaux_tc: the sum of its
        two best bias-corrected scores); the bias only chooses, the weights are the plain
        scores, renormalised if norm_topk_prob, times routed_scaling_factor. Experts of
        dropped groups are masked to -inf (as SGLang and vLLM; HF masks to 0.0, which only
        differs when every kept score is negative)."""
        c, w, rt = self.config, self.weights, self.config.routing
        logits = linear(x, w[p + "gate.weight"], None)
        scores = torch.softmax(logits, dim=-1) if rt["scoring"] == "softmax" else torch.sigmoid(logits)
        choice = scores.clone()
        if rt["method"] == "noaux_tc":
            choice = choice + w[p + "gate.e_score_correction_bias"]
        if rt["method"] != "greedy" and rt["n_group"] > 1:
            grouped = choice.view(x.shape[0], rt["n_group"], -1)
            if rt["method"] == "noaux_tc":
                group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)
            else:
                group_scores = grouped.max(dim=-1).values
            kept = torch.zeros_like(group_scores, dtype=torch.bool)
            kept.scatter_(1, group_scores.topk(rt["topk_group"], dim=-1).indices, True)
            choice = grouped.masked_fill(~kept.unsqueeze(-1), float("-inf")).view(x.shape[0], -1)
        experts = choice.topk(c.top_k, dim=-1).indices
        weights = scores.gather(1, experts)
        if c.norm_topk_prob and c.top_k > 1:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * rt["scale"], experts

    def _sparse_moe(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Qwen3MoeSparseMoeBlock / Qwen2MoeSparseMoeBlock / MixtralSparseMoeBlock:
        softmax over all experts, top-k, optional renormalisation, the weighted sum of
        the chosen experts' SwiGLU outputs (plus Qwen2-MoE's sigmoid-gated shared expert)."""
        c, w = self.config, self.weights
        p = f"model.layers.{i}.{c.moe_block()}"
        if c.arch == "deepseek":
            weights, experts = self._deepseek_route(p, x)
        else:
            probs = torch.softmax(linear(x, w[p + "gate.weight"], None), dim=-1)
            weights, experts = torch.topk(probs, c.top_k, dim=-1)
            if c.norm_topk_prob:
                weights = weights / weights.sum(dim=-1, keepdim=True)
        self.experts_hit.setdefault(i, set()).update(int(e) for e in experts.flatten())
        self.routing[i] = experts.clone()
        names = ("w1", "w3", "w2") if c.arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        out = torch.zeros_like(x)
        for e in range(c.num_experts):
            rows, slot = torch.nonzero(experts == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            y = self._swiglu(f"{p}experts.{e}.", names, x[rows])
            out.index_add_(0, rows, y * weights[rows, slot].unsqueeze(-1))
        if c.arch == "deepseek" and c.shared_expert_intermediate_size:
            out = out + self._swiglu(p + "shared_experts.", ("gate_proj", "up_proj", "down_proj"), x)
        elif c.shared_expert_intermediate_size:
            gate = torch.sigmoid(linear(x, w[p + "shared_expert_gate.weight"], None))
            out = out + gate * self._swiglu(p + "shared_expert.", ("gate_proj", "up_proj", "down_proj"), x)
        return out

    @torch.no_grad()
    def forward(self, token_ids: List[int]) -> torch.Tensor:
        """Logits [T, vocab] for every position of the sequence (no cache)."""
        return linear(self.final_hidden(token_ids), self.weights["lm_head.weight"], None)

    @torch.no_grad()
    def final_hidden(self, token_ids: List[int]) -> torch.Tensor:
        """Hidden states [T, hidden] after the final norm: what the LM head reads, and what an
        embedding model pools (the last row, at unit length, for LAST pooling)."""
        c, w = self.config, self.weights
        ids = torch.tensor(token_ids, dtype=torch.int64)
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size:
            raise ValueError(f"token ids must be non-empty and in [0, {c.vocab_size})")
        positions = torch.arange(len(token_ids), dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)  # both halves share a frequency
        cos, sin = angles.cos(), angles.sin()
        scaling = c.rope_scaling or {}
        if scaling.get("type", scaling.get("rope_type")) == "yarn":
            # DeepseekV2YarnRotaryEmbedding: cos and sin times mscale(mscale) / mscale(mscale_all_dim).
            factor = float(scaling["factor"])
            magnitude = yarn_mscale(factor, float(scaling.get("mscale", 1))) / \
                yarn_mscale(factor, float(scaling.get("mscale_all_dim", 0)))
            cos, sin = cos * magnitude, sin * magnitude

        h = w["model.embed_tokens.weight"][ids]
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            h = h + self._attention(i, rms_norm(h, w[p + "input_layernorm.weight"], c.rms_norm_eps), cos, sin)
            h = h + self._mlp(i, rms_norm(h, w[p + "post_attention_layernorm.weight"], c.rms_norm_eps))
        return rms_norm(h, w["model.norm.weight"], c.rms_norm_eps)


def greedy_decode(model: DecoderModel, prompt_ids: List[int], max_new_tokens: int):
    """Returns (generated ids, logits rows) following the module's row contract.

    The whole sequence is recomputed every step: the models are tiny and this
    keeps the reference free of any cache bookkeeping that could hide a bug.
    """
    sequence = list(prompt_ids)
    generated: List[int] = []
    rows: List[torch.Tensor] = []
    for step in range(max_new_tokens):
        logits = model.forward(sequence)
        rows.append(logits if step == 0 else logits[-1:])
        next_id = int(torch.argmax(logits[-1]))
        generated.append(next_id)
        sequence.append(next_id)
    return generated, torch.cat(rows, dim=0).numpy().astype(np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--prompt-ids", required=True, help="comma separated token ids")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--out-logits", required=True)
    parser.add_argument("--out-json", required=True)
    args = parser.parse_args()
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1")

    torch.set_num_threads(1)  # the machine is shared with compiles
    prompt_ids = [int(t) for t in args.prompt_ids.split(",") if t.strip()]
    model = DecoderModel(args.model_path)
    generated, logits = greedy_decode(model, prompt_ids, args.max_new_tokens)
    np.save(args.out_logits, logits)
    with open(args.out_json, "w") as f:
        report = {"output_ids": generated}
        if model.experts_hit:
            report["experts_hit"] = {str(i): len(e) for i, e in sorted(model.experts_hit.items())}
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
