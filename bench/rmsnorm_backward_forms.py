#!/usr/bin/env python3
"""Faithful fp32 forms of RMSNorm's gradient of x under the second tier (docs/semantics.md, "RMSNorm's
gradient"): torch autograd (rsqrt, division), float64 cast, the closed form with sequential, numpy's,
8- and 32-lane sums, normalised x first, an rsqrt 2 ulp high; on normal, t(3), outlier-channel and
bf16 data, rms 1e-3 to 3e3, d 512 and 5120, 16 tokens. Prints each form's largest z and root mean
square of z, and every judgement that fails (none should).
Usage: PYTHONPATH=build/python python3 bench/rmsnorm_backward_forms.py"""
import itertools

import numpy as np
import torch

import mhc_verify

f32 = np.float32
EPS = 1e-20

def lanes_sum(v, S):  # fp32 strided lanes then tree, over last axis
    d = v.shape[-1]; pad = (-d) % S
    v = np.concatenate([v, np.zeros(v.shape[:-1] + (pad,), f32)], -1).astype(f32)
    A = v.reshape(v.shape[:-1] + (-1, S)); acc = np.zeros(v.shape[:-1] + (S,), f32)
    for r in range(A.shape[-2]): acc = (acc + A[..., r, :]).astype(f32)
    while acc.shape[-1] > 1: acc = (acc[..., 0::2] + acc[..., 1::2]).astype(f32)
    return acc[..., 0]

def seq_sum(v):
    acc = np.zeros(v.shape[:-1], f32)
    for i in range(v.shape[-1]): acc = (acc + v[..., i]).astype(f32)
    return acc

def impl(name, x, w, g):
    d = x.shape[-1]
    if name in ("autograd", "autograd_div"):
        X = torch.tensor(x, requires_grad=True); W = torch.tensor(w)
        ms = X.square().mean(-1, keepdim=True) + EPS
        y = (X * torch.rsqrt(ms) if name == "autograd" else X / torch.sqrt(ms)) * W
        y.backward(torch.tensor(g)); return X.grad.numpy()
    if name == "f64":
        x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
        r = 1 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + EPS); a = w64 * g64
        return (r * a - r ** 3 / d * (a * x64).sum(-1, keepdims=True) * x64).astype(f32)
    summ = {"closed_seq": seq_sum, "closed_l8": lambda v: lanes_sum(v, 8), "closed_l32": lambda v: lanes_sum(v, 32),
            "xhat_l32": lambda v: lanes_sum(v, 32), "closed_np": lambda v: v.sum(-1, dtype=f32), "rsqrt2ulp": lambda v: lanes_sum(v, 16)}[name]
    S = summ((x * x).astype(f32))[..., None]
    r = (f32(1) / np.sqrt((S / f32(d) + f32(EPS)).astype(f32))).astype(f32)
    if name == "rsqrt2ulp": r = (r * f32(1 + 2 ** -22)).astype(f32)
    a = (w * g).astype(f32)
    if name == "xhat_l32":
        xh = (x * r).astype(f32); m = (summ((a * xh).astype(f32))[..., None] / f32(d)).astype(f32)
        return (r * (a - (xh * m).astype(f32)).astype(f32)).astype(f32)
    dot = summ((a * x).astype(f32))[..., None]
    c = ((r * r * r).astype(f32) / f32(d) * dot).astype(f32)
    return ((r * a).astype(f32) - (c * x).astype(f32)).astype(f32)

def data(dist, rms, d, T, rng):
    if dist == "gauss": x = rng.standard_normal((T, d))
    elif dist == "t3": x = rng.standard_t(3, (T, d))
    elif dist == "outliers":
        x = rng.standard_normal((T, d)); x[:, :2] = 300 * np.sign(rng.standard_normal((T, 2)))
    elif dist == "bf16":
        x = torch.tensor(rng.standard_normal((T, d)), dtype=torch.float32).bfloat16().float().numpy()
    x = x / np.sqrt((x ** 2).mean(-1, keepdims=True)) * rms
    if dist == "bf16": x = torch.tensor(x, dtype=torch.float32).bfloat16().float().numpy()
    g = rng.standard_normal((T, d)); g[:, 3] *= 100
    w = rng.uniform(0.5, 1.5, d)
    return x.astype(f32), w.astype(f32), g.astype(f32)

impls = ["autograd", "autograd_div", "f64", "closed_seq", "closed_l8", "closed_l32", "xhat_l32", "closed_np", "rsqrt2ulp"]
worst = {}
n = 0
fails = []
for d, dist, rms, seed in itertools.product([512, 5120], ["gauss", "t3", "outliers", "bf16"], [1e-3, 0.05, 1.0, 40.0, 3e3], [0, 1]):
    rng = np.random.default_rng(seed * 1000 + d)
    x, w, g = data(dist, rms, d, 16, rng)
    for name in impls:
        if name == "closed_seq" and d == 5120 and seed == 1: continue
        gx = impl(name, x, w, g)
        r = mhc_verify.judge("rmsnorm_backward", {"dim": d, "norm_eps": EPS}, {"x": x, "upstream_y": g}, {"grad_x": gx}, {"weight": w}, save_dir=None)
        s = r.stage("grad_x"); n += 1
        z = (s.noise["z_max"], s.noise["z_rms"]) if s.noise else (0, 0)
        k = name; worst[k] = (max(worst.get(k, (0, 0))[0], z[0]), max(worst.get(k, (0, 0))[1], z[1]))
        if not r.passed: fails.append((name, d, dist, rms, seed, s.rule, s.reason[:160]))
print(f"{n} judgements")
for k, v in worst.items(): print(f"{k:14s} z_max {v[0]:.3f} z_rms {v[1]:.3f}")
print("fails:", len(fails))
for f in fails[:20]:
    print(f)
