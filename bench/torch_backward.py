#!/usr/bin/env python3
"""The boundary's backward in PyTorch float64 autograd on the CPU, from the seeds' formulas, at
n = 4 and the d of bench_backward.cpp: forward and backward of TOKENS tokens on THREADS threads,
median of REPEATS (after one warm-up). Usage: torch_backward.py [TOKENS] [REPEATS] [THREADS].
Prints 'd ms/token' lines."""
import statistics
import sys
import time

import torch

T = int(sys.argv[1]) if len(sys.argv) > 1 else 4
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
n, iters, eps, norm_eps = 4, 20, 1e-6, 1e-20
M = (2 + n) * n
dt = torch.float64
print(f"{'d':>6} {'ms/token':>12}")
for d in [64, 256, 1024, 5120]:
    g = torch.Generator().manual_seed(1)
    f = torch.randn(T, d, generator=g, dtype=dt, requires_grad=True)
    residual = torch.randn(T, n, d, generator=g, dtype=dt, requires_grad=True)
    post = (2 * torch.sigmoid(torch.randn(T, n, generator=g, dtype=dt))).requires_grad_()
    comb = torch.softmax(torch.randn(T, n, n, generator=g, dtype=dt), -1).requires_grad_()
    pre_mix = (torch.sigmoid(torch.randn(T, n, generator=g, dtype=dt)) + eps).requires_grad_()
    hc_fn = (torch.randn(M, n * d, generator=g, dtype=dt) / (n * d) ** 0.5).requires_grad_()
    hc_scale = (torch.rand(3, generator=g, dtype=dt) + 0.5).requires_grad_()
    hc_base = torch.randn(M, generator=g, dtype=dt).requires_grad_()

    def step():
        x = post.unsqueeze(-1) * f.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=1)
        flat = x.flatten(1)
        mixes = torch.nn.functional.linear(flat, hc_fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + norm_eps)
        pre = torch.sigmoid(mixes[:, :n] * hc_scale[0] + hc_base[:n]) + eps
        post_ = 2 * torch.sigmoid(mixes[:, n:2 * n] * hc_scale[1] + hc_base[n:2 * n])
        c = (mixes[:, 2 * n:] * hc_scale[2] + hc_base[2 * n:]).view(T, n, n).softmax(-1) + eps
        c = c / (c.sum(-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            c = c / (c.sum(-1, keepdim=True) + eps)
            c = c / (c.sum(-2, keepdim=True) + eps)
        y = torch.sum(pre_mix.unsqueeze(-1) * x, dim=1)
        loss = (x.sum() + mixes.sum() + pre.sum() + post_.sum() + c.sum() + y.sum())
        torch.autograd.grad(loss, [f, residual, post, comb, pre_mix, hc_fn, hc_scale, hc_base])

    step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(f"{d:6d} {1e3 * statistics.median(times) / T:12.3f}")
