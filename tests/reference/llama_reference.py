#!/usr/bin/env python3
"""A Llama forward pass written from Hugging Face's published formulas for LlamaForCausalLM —
RMSNorm in fp32, rotary embeddings with the rope_scaling types default, linear, dynamic (NTK) and
llama3, grouped-query attention, SwiGLU, tied or untied head — in Debian's python3-torch, reading a
folder's config.json and safetensors (single or sharded) by hand. It shares no code with motley: its
tests compare motley's logits with these.

usage: llama_reference.py DIR TOKENS.json OUT.bin [--dtype float32|float64]
  TOKENS.json  [[id, ...], ...]: a batch of equal-length sequences
  OUT.bin      the logits, batch x seq x vocab, little-endian in --dtype
"""
import argparse
import json
import math
import os
import struct

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors


def read_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for f in files:
        weights.update(read_safetensors(os.path.join(folder, f)))
    return weights


def inverse_frequencies(config, seq_len):
    """Hugging Face's rope_init functions, from their published formulas (modeling_rope_utils)."""
    heads = config["num_attention_heads"]
    dim = config.get("head_dim") or config["hidden_size"] // heads
    base = config.get("rope_theta", 10000.0)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "dynamic":
        limit = config["max_position_embeddings"]
        seq_len = max(seq_len, limit)
        factor = scaling["factor"]
        base = base * ((factor * seq_len / limit) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind not in ("default", "linear", "dynamic"):
        raise SystemExit(f"reference: rope type {kind} not written here")
    return inv_freq


def rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.to(torch.float32) if dtype != torch.float64 else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(config, weights, tokens, dtype):
    w = {k: v.to(dtype) for k, v in weights.items()}
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    hidden = config["hidden_size"]
    dim = hidden // heads
    eps = config["rms_norm_eps"]
    batch, seq = tokens.shape
    x = w["model.embed_tokens.weight"][tokens]
    inv_freq = inverse_frequencies(config, seq)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    mask = torch.full((seq, seq), float("-inf"), dtype=dtype).triu(1)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(batch, seq, heads, dim).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(batch, seq, kv_heads, dim).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(batch, seq, kv_heads, dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(dim) + mask
        probs = torch.softmax(scores.to(torch.float32) if dtype != torch.float64 else scores, dim=-1).to(dtype)
        attn = (probs @ v).transpose(1, 2).reshape(batch, seq, hidden)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None:
        assert config.get("tie_word_embeddings"), "no lm_head.weight in an untied model"
        head = w["model.embed_tokens.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("tokens")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    a = ap.parse_args()
    config = json.load(open(os.path.join(a.dir, "config.json")))
    tokens = torch.tensor(json.load(open(a.tokens)), dtype=torch.int64)
    dtype = torch.float32 if a.dtype == "float32" else torch.float64
    with torch.no_grad():
        logits = forward(config, read_weights(a.dir), tokens, dtype).contiguous()
    with open(a.out, "wb") as f:
        f.write(logits.numpy().tobytes())


if __name__ == "__main__":
    main()
