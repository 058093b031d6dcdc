"""After: the same kernel judged by mhc_verify against the exact oracle with derived per-element
bounds. The faithful kernel passes; the planted bug (MHC_EXAMPLE_BUG=1) fails, and the message
names the stage, the worst element, the diagnosis and a REPRO line."""
import mhc_verify

from conftest import EPS, ITERS, N
from mhc_kernel import split_sinkhorn


def test_split_sinkhorn_faithful(case):
    mixes, hc_scale, hc_base = case
    pre, post, comb = split_sinkhorn(mixes, hc_scale, hc_base, N, ITERS, EPS)
    mhc_verify.assert_faithful(
        "split_sinkhorn", {"hc_mult": N, "sinkhorn_iters": ITERS, "hc_eps": EPS},
        inputs={"mixes": mixes}, params={"hc_scale": hc_scale, "hc_base": hc_base},
        outputs={"pre": pre, "post": post, "comb": comb})
