"""Capture the mHC calls of a model's forward into one file, without glue code.

    import mhc_verify.torch as mt
    sites = [mt.Site(my_kernels, "split_sinkhorn", op="split_sinkhorn",
                     args=("mixes", "hc_scale", "hc_base"), returns=("pre", "post", "comb")),
             mt.Site(my_kernels, "hc_pre", op="pre", args=("x", "pre_mix"), returns=("y",))]
    with mt.capture("forward.h5", sites, config={"hc_mult": 4, "dim": 5120}):
        model(tokens)
    # then: mhc-verify compare forward.h5, or mhc_verify.judge_file("forward.h5")

Each Site replaces an attribute (a function of a module or object) for the duration of the
block, records every call's arguments and results by the names of the fixture layout
(mhc_verify.layout), and calls the original. Arguments beyond `args` (n, iters, eps, ...) and
names the op does not take are ignored. Case k of a site is named "<k:04d>.<site>.<call>": the
order of the forward (layer by layer), then the site, then its call count.
"""
import contextlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import mhc_verify


@dataclass
class Site:
    owner: Any          # the module or object holding the function
    attr: str           # the function's attribute name
    op: str             # the op it implements (mhc_verify.ops())
    args: Sequence[str]  # names of its leading positional arguments, in order
    returns: Sequence[str]  # names of its results, in order (one name: a single result)
    name: Optional[str] = None  # in case names; default attr
    config: Optional[Mapping[str, Any]] = None  # this site's config, over capture's


def _copy(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    return value


@contextlib.contextmanager
def capture(path, sites: Sequence[Site], config: Optional[Mapping[str, Any]] = None,
            precision: str = "fp32", producer: str = "mhc_verify.torch.capture"):
    """Records every call of the sites during the block; writes one mhc-capture/1 file at its
    end (also when the block raises, with the calls made so far)."""
    cases, counts, originals = {}, {}, []

    def wrap(site: Site, fn):
        layout = mhc_verify.layout(site.op, {**(config or {}), **(site.config or {})})
        site_name = site.name or site.attr

        def recording(*a, **kw):
            result = fn(*a, **kw)
            got = result if isinstance(result, (tuple, list)) else (result,)
            named = dict(zip(site.args, a))
            named.update({k: v for k, v in kw.items() if k in site.args})
            k = counts.get(site_name, 0)
            counts[site_name] = k + 1
            cases[f"{len(cases):04d}.{site_name}.{k}"] = {
                "op": site.op, "config": {**(config or {}), **(site.config or {})},
                "precision": precision,
                "inputs": {n: _copy(v) for n, v in named.items() if n in layout["inputs"]},
                "params": {n: _copy(v) for n, v in named.items() if n in layout["params"]},
                "outputs": {n: _copy(v) for n, v in zip(site.returns, got)},
            }
            return result

        return recording

    try:
        for site in sites:
            fn = getattr(site.owner, site.attr)
            originals.append((site, fn))
            setattr(site.owner, site.attr, wrap(site, fn))
        yield cases
    finally:
        for site, fn in reversed(originals):
            setattr(site.owner, site.attr, fn)
        if cases:
            mhc_verify.write_capture(path, cases, producer)
