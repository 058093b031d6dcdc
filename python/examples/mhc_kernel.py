"""A stand-in for a GPU kernel: hc_split_sinkhorn written in torch, fp32 on the CPU, the way a
kernel author writes it. MHC_EXAMPLE_BUG=1 plants a real bug class: the softmax's eps inside
its division instead of after it."""
import os

import torch


def split_sinkhorn(mixes, hc_scale, hc_base, n, iters=20, eps=1e-6):
    """mixes [T, (2 + n) n] -> pre [T, n], post [T, n], comb [T, n, n], all float32."""
    planted_bug = os.environ.get("MHC_EXAMPLE_BUG") == "1"
    m = mixes.float()
    pre = torch.sigmoid(m[:, :n] * hc_scale[0] + hc_base[:n]) + eps
    post = 2 * torch.sigmoid(m[:, n:2 * n] * hc_scale[1] + hc_base[n:2 * n])
    logits = (m[:, 2 * n:] * hc_scale[2] + hc_base[2 * n:]).view(-1, n, n)
    e = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
    if planted_bug:
        comb = e / (e.sum(dim=-1, keepdim=True) + eps)
    else:
        comb = e / e.sum(dim=-1, keepdim=True) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb


def hc_pre(x, pre_mix):
    """x [T, n, d], pre_mix [T, n] -> y [T, d]: the sublayer's input, read from the streams."""
    return (pre_mix.unsqueeze(-1) * x).sum(dim=-2)
