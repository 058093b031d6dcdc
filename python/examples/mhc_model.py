"""A small model that calls the kernels of mhc_kernel.py once per layer, standing in for a real
model's forward: per layer, a projection of the streams to mixes, the split and Sinkhorn, the
read (hc_pre), a tanh sublayer and the write back into the streams."""
import torch

import mhc_kernel

N, D = 4, 16


class Model(torch.nn.Module):
    def __init__(self, layers=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        m = (2 + N) * N
        self.proj = [torch.randn(m, N * D, generator=g) / (N * D) ** 0.5 for _ in range(layers)]
        self.scale = [torch.rand(3, generator=g) + 0.5 for _ in range(layers)]
        self.base = [torch.randn(m, generator=g) * 0.1 for _ in range(layers)]

    def forward(self, x):  # x [T, N, D]
        for w, s, b in zip(self.proj, self.scale, self.base):
            mixes = x.flatten(1) @ w.T
            pre, post, comb = mhc_kernel.split_sinkhorn(mixes, s, b, N)
            f = torch.tanh(mhc_kernel.hc_pre(x, pre))
            x = post.unsqueeze(-1) * f.unsqueeze(1) + comb.transpose(1, 2) @ x
        return x
