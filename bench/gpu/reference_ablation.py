#!/usr/bin/env python3
"""Where plain PyTorch's step goes, by what motley's runtime does differently (run on a GPU from the
repository root): the reference of pytorch_reference.py at the ~850M shape (batch 16 x 1024, bf16
autocast over fp32, activation checkpointing), then with grouped-query attention by copying K and V
per query head (repeat_interleave) instead of the kernel's enable_gqa, and with AdamW unfused.
Each line is the mean step of steps 5-12. Figures: bench/reports/gpu_check.md.

  python3 bench/gpu/reference_ablation.py
"""
import sys, time, torch, torch.nn.functional as F
sys.path.insert(0, "bench/gpu")
import pytorch_reference as R
from argparse import Namespace
a = Namespace(hidden=2048, layers=16, heads=16, kv_heads=4, ffn=5632, vocab=32000, seq_len=1024, batch=16)
sdpa = F.scaled_dot_product_attention
def sdpa_repeat(q, k, v, is_causal=True, enable_gqa=False):
    per = q.shape[1] // k.shape[1]
    return sdpa(q, k.repeat_interleave(per, 1), v.repeat_interleave(per, 1), is_causal=is_causal)
def run(name, repeat=False, opt_kw=dict(fused=True), steps=12, warm=4):
    F.scaled_dot_product_attention = sdpa_repeat if repeat else sdpa
    torch.manual_seed(0)
    m = R.Llama(a).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, **opt_kw)
    ts = []
    for s in range(steps):
        b = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device="cuda"); torch.cuda.synchronize(); t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16): lg = m(b[:, :-1])
        loss = F.cross_entropy(lg.float().view(-1, a.vocab), b[:, 1:].reshape(-1)); loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        if s >= warm: ts.append(time.perf_counter() - t)
    print(f"{name}: {1e3 * sum(ts) / len(ts):.1f} ms/step", flush=True)
    del m, opt; torch.cuda.empty_cache()
run("reference")
run("gqa by repeat_interleave", repeat=True)
run("adamw unfused (foreach=False)", opt_kw=dict(foreach=False))
run("adamw foreach", opt_kw=dict(foreach=True))
run("repeat + unfused", repeat=True, opt_kw=dict(foreach=False))
