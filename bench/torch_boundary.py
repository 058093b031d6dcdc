#!/usr/bin/env python3
"""The sublayer boundary in PyTorch float64 on the CPU, from the seeds' formulas, for comparison
with the oracle's throughput. Usage: torch_boundary.py TOKENS REPEATS THREADS. Prints one line:
'torch-float64 <median seconds> <tokens/s>'."""
import sys
import time

import torch

T, repeats, threads = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
n, d, iters, eps, norm_eps = 4, 5120, 20, 1e-6, 1e-20
M = (2 + n) * n
g = torch.Generator().manual_seed(1)
f = torch.randn(T, d, generator=g, dtype=torch.float64)
residual = torch.randn(T, n, d, generator=g, dtype=torch.float64)
post = 2 * torch.sigmoid(torch.randn(T, n, generator=g, dtype=torch.float64))
comb = torch.softmax(torch.randn(T, n, n, generator=g, dtype=torch.float64), -1)
pre_mix = torch.sigmoid(torch.randn(T, n, generator=g, dtype=torch.float64)) + eps
hc_fn = torch.randn(M, n * d, generator=g, dtype=torch.float64) / (n * d) ** 0.5
hc_scale = torch.rand(3, generator=g, dtype=torch.float64) + 0.5
hc_base = torch.randn(M, generator=g, dtype=torch.float64)


def boundary():
    x = post.unsqueeze(-1) * f.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=1)
    flat = x.flatten(1)
    mixes = torch.nn.functional.linear(flat, hc_fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
    pre = torch.sigmoid(mixes[:, :n] * hc_scale[0] + hc_base[:n]) + eps
    post_ = 2 * torch.sigmoid(mixes[:, n:2 * n] * hc_scale[1] + hc_base[n:2 * n])
    c = (mixes[:, 2 * n:] * hc_scale[2] + hc_base[2 * n:]).view(T, n, n)
    c = c.softmax(-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    y = torch.sum(pre_mix.unsqueeze(-1) * x, dim=1)
    return x, y, mixes, pre, post_, c


boundary()  # warm-up
times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    boundary()
    times.append(time.perf_counter() - t0)
times.sort()
med = times[len(times) // 2]
print(f"torch-float64 {med:.4f} {T / med:.0f}")
