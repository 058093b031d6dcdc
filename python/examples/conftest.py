"""Inputs of the example tests: V4.1's n = 4 and 20 rounds, random mixes and params."""
import pytest

torch = pytest.importorskip("torch")

N, ITERS, EPS = 4, 20, 1e-6


@pytest.fixture(params=[0, 1, 2])
def case(request):
    g = torch.Generator().manual_seed(request.param)
    mixes = torch.randn(64, (2 + N) * N, generator=g)
    hc_scale = torch.rand(3, generator=g) + 0.5
    hc_base = torch.randn((2 + N) * N, generator=g) * 0.1
    return mixes, hc_scale, hc_base
