#!/usr/bin/env python3
"""The plain-PyTorch baseline for `motley train` on a GPU (issue: Runtime I, GPU part).

The same Llama as motley's runtime (RMSNorm, rotary embeddings, GQA, SwiGLU, untied head, HF
initialisation std 0.02), the same batch, sequence length and precision (bf16 autocast over fp32
weights, AdamW fused), activation checkpointing per layer as motley does. Tokens are random ids:
the comparison is of speed, not of learning. Prints tokens/s and MFU over the steps after warm-up.

  python3 bench/gpu/pytorch_reference.py --hidden 768 --layers 12 --heads 12 --kv-heads 4 \
      --ffn 2048 --vocab 32000 --seq-len 1024 --batch 16 --steps 100 --peak-tflops 989
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Layer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        d, kv = a.hidden, a.kv_heads * (a.hidden // a.heads)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv, bias=False)
        self.v = torch.nn.Linear(d, kv, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, a.ffn, bias=False)
        self.up = torch.nn.Linear(d, a.ffn, bias=False)
        self.down = torch.nn.Linear(a.ffn, d, bias=False)
        self.n1 = torch.nn.RMSNorm(d, eps=1e-5)
        self.n2 = torch.nn.RMSNorm(d, eps=1e-5)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h, kvh, hd = self.a.heads, self.a.kv_heads, self.a.hidden // self.a.heads
        y = self.n1(x)
        q = self.q(y).view(b, s, h, hd).transpose(1, 2)
        k = self.k(y).view(b, s, kvh, hd).transpose(1, 2)
        v = self.v(y).view(b, s, kvh, hd).transpose(1, 2)
        rot = lambda t: torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), -1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kvh != h)
        x = x + self.o(att.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.embed = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = torch.nn.RMSNorm(a.hidden, eps=1e-5)
        self.head = torch.nn.Linear(a.hidden, a.vocab, bias=False)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        s, hd = tokens.shape[1], self.a.hidden // self.a.heads
        inv = 1.0 / 10000 ** (torch.arange(0, hd, 2, device=tokens.device, dtype=torch.float64) / hd)
        f = torch.outer(torch.arange(s, device=tokens.device, dtype=torch.float64), inv)
        emb = torch.cat((f, f), -1)
        x = self.embed(tokens)
        cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        for layer in self.layers:
            x = checkpoint(layer, x, cos, sin, use_reentrant=False)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("hidden", 768), ("layers", 12), ("heads", 12), ("kv-heads", 4), ("ffn", 2048),
                          ("vocab", 32000), ("seq-len", 1024), ("batch", 16), ("steps", 100), ("warmup", 10)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM: 989)")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Llama(a).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = a.batch * a.seq_len
    times = []
    for step in range(a.steps):
        batch = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    tok_s = tokens_per_step * len(times) / sum(times)
    # Model FLOPs per token: 6 x parameters + attention (12 x layers x hidden x seq, causal counted full).
    flops = 6 * n_params + 12 * a.layers * a.hidden * a.seq_len
    print(f"pytorch: {n_params / 1e6:.1f}M parameters, {tok_s:,.0f} tokens/s, "
          f"MFU {100 * tok_s * flops / (a.peak_tflops * 1e12):.1f}% (peak {a.peak_tflops} TFLOP/s), "
          f"final loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
