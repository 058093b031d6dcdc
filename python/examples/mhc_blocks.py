"""A model the harness cannot evaluate itself: its sublayers are black boxes (a causal mixing
"attention" and a gated MLP, standing in for MLA or sparse attention and a real MoE), with the mHC
around them written in torch the way a model author writes it: the streams projected to mixes,
split and Sinkhorn (mhc_kernel.split_sinkhorn, with its planted bug under MHC_EXAMPLE_BUG=1), the
read, the norm, the write back, four Blocks, then the final collapse and norm."""
import torch

import mhc_kernel

N, D, NORM_EPS = 4, 16, 1e-20
M = (2 + N) * N


def rmsnorm(x, weight):
    return weight * (x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS))


class Norm(torch.nn.Module):
    def __init__(self, g):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(D, generator=g))

    def forward(self, x):
        return rmsnorm(x, self.weight)


class Attention(torch.nn.Module):
    """Each position attends to itself and the ones before it (a black box to the harness)."""
    def __init__(self, g):
        super().__init__()
        self.q = torch.nn.Parameter(torch.randn(D, D, generator=g) / D ** 0.5)
        self.v = torch.nn.Parameter(torch.randn(D, D, generator=g) / D ** 0.5)

    def forward(self, h):  # [T, D]
        s = (h @ self.q) @ h.T / D ** 0.5
        s = s.masked_fill(torch.triu(torch.ones_like(s, dtype=torch.bool), 1), float("-inf"))
        return torch.softmax(s, dim=-1) @ (h @ self.v)


class MLP(torch.nn.Module):
    def __init__(self, g):
        super().__init__()
        self.up = torch.nn.Parameter(torch.randn(4 * D, D, generator=g) / D ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(D, 2 * D, generator=g) / (2 * D) ** 0.5)

    def forward(self, h):
        a, b = (h @ self.up.T).chunk(2, dim=-1)
        return (torch.nn.functional.silu(a) * b) @ self.down.T


class Site(torch.nn.Module):
    """One mHC site: the streams to mixes (RMS over all n d values), split and Sinkhorn."""
    def __init__(self, g):
        super().__init__()
        self.hc_fn = torch.nn.Parameter(torch.randn(M, N * D, generator=g) / (N * D) ** 0.5)
        self.hc_base = torch.nn.Parameter(0.1 * torch.randn(M, generator=g))
        self.hc_scale = torch.nn.Parameter(0.5 + torch.rand(3, generator=g))

    def forward(self, x):  # [T, N, D] -> pre, post, comb
        flat = x.flatten(1)
        r = torch.rsqrt(flat.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS)
        mixes = (flat @ self.hc_fn.T) * r
        return mhc_kernel.split_sinkhorn(mixes, self.hc_scale, self.hc_base, N)


def hc_post(f, x, post, comb):  # Y[k] = post[k] F + sum_j C[j, k] X[j]
    return post.unsqueeze(-1) * f.unsqueeze(1) + comb.transpose(1, 2) @ x


class Block(torch.nn.Module):
    def __init__(self, g):
        super().__init__()
        self.attn_site, self.ffn_site = Site(g), Site(g)
        self.attn_norm, self.ffn_norm = Norm(g), Norm(g)
        self.attn, self.ffn = Attention(g), MLP(g)

    def forward(self, x, pre_mix):  # each sublayer reads with the weights computed before it
        a_pre, a_post, a_comb = self.attn_site(x)
        x_mid = hc_post(self.attn(self.attn_norm(mhc_kernel.hc_pre(x, pre_mix))), x, a_post,
                        a_comb)
        f_pre, f_post, f_comb = self.ffn_site(x_mid)
        x_out = hc_post(self.ffn(self.ffn_norm(mhc_kernel.hc_pre(x_mid, a_pre))), x_mid, f_post,
                        f_comb)
        return x_out, f_pre

    def mhc_params(self):
        """This layer's mHC params by their fixture names (mhc_verify.torch.Block)."""
        p = {}
        for site in ("attn", "ffn"):
            s = getattr(self, site + "_site")
            p.update({f"{site}/hc_fn": s.hc_fn, f"{site}/hc_base": s.hc_base,
                      f"{site}/hc_scale": s.hc_scale,
                      f"{site}_norm/weight": getattr(self, site + "_norm").weight})
        return p


class Model(torch.nn.Module):
    def __init__(self, layers=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.blocks = torch.nn.ModuleList(Block(g) for _ in range(layers))
        self.final_norm = Norm(g)

    def forward(self, x):  # x [T, N, D]; the first Block reads stream 0
        pre = torch.zeros(x.shape[0], N)
        pre[:, 0] = 1
        for b in self.blocks:
            x, pre = b(x, pre)
        return self.final_norm(mhc_kernel.hc_pre(x, pre))
