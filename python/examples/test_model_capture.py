"""A whole forward captured into one file and judged: every split_sinkhorn and hc_pre call of a
4-layer model, recorded by mhc_verify.torch.capture (no glue), judged with judge_file (and by
`mhc-verify compare FILE` from a shell)."""
import torch

import mhc_kernel
import mhc_verify
import mhc_verify.torch as mt
from mhc_model import D, N, Model

SITES = [
    mt.Site(mhc_kernel, "split_sinkhorn", op="split_sinkhorn",
            args=("mixes", "hc_scale", "hc_base"), returns=("pre", "post", "comb")),
    mt.Site(mhc_kernel, "hc_pre", op="pre", args=("x", "pre_mix"), returns=("y",)),
]


def test_a_captured_forward_is_faithful(tmp_path):
    path = tmp_path / "forward.h5"
    x = torch.randn(8, N, D, generator=torch.Generator().manual_seed(1))
    with mt.capture(path, SITES, config={"hc_mult": N, "dim": D}):
        Model(layers=4)(x)
    results = mhc_verify.judge_file(path)
    assert [r.name for r in results] == [f"{2 * k + i:04d}.{s}.{k}" for k in range(4)
                                         for i, s in enumerate(("split_sinkhorn", "hc_pre"))]
    failed = [r for r in results if not r.passed]
    assert not failed, "\n\n".join(r.message() for r in failed)
