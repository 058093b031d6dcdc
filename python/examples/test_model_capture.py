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


def test_a_model_with_black_box_sublayers_is_judged_at_every_mhc_stage(tmp_path):
    """The sublayers are the model's own (the harness cannot evaluate them): their captured
    inputs and outputs anchor the mHC stages around them, layer by layer. Anchored only there,
    the streams' bounds carry the mixes projection's bound through the Sinkhorn, so the planted
    bug (1e-6 inside the softmax) moves these ratios (0.002 -> 0.019 at L0.ffn.normed) without
    failing them; judging split_sinkhorn's outputs directly (the test above) catches it."""
    import mhc_blocks
    model = mhc_blocks.Model(layers=4)
    blocks = [mt.Block(b, b.attn, b.ffn, b.mhc_params()) for b in model.blocks]
    path = tmp_path / "blocks.h5"
    x = torch.randn(8, N, D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), mt.capture_blocks(path, blocks, config={"hc_mult": N, "dim": D},
                                            final_norm=model.final_norm.weight,
                                            final=model.final_norm):
        model(x)
    [result] = mhc_verify.judge_file(path)
    assert result.passed, result.message()
    judged = {s.stage for s in result.stages if s.state == "pass"}
    for layer in range(4):
        assert {f"L{layer}.attn.normed", f"L{layer}.ffn.normed", f"L{layer}.x_out"} <= judged
    assert "final.norm" in judged
