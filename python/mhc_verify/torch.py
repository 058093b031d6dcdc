"""Capture the mHC calls of a model's forward into one file, without glue code.

    import mhc_verify.torch as mt
    sites = [mt.Site(my_kernels, "split_sinkhorn", op="split_sinkhorn",
                     args=("mixes", "hc_scale", "hc_base"), returns=("pre", "post", "comb")),
             mt.Site(my_kernels, "hc_pre", op="pre", args=("x", "pre_mix"), returns=("y",))]
    with mt.capture("forward.h5", sites, config={"hc_mult": 4, "dim": 5120}):
        model(tokens)
    # then: mhc-verify compare forward.h5, or mhc_verify.judge_file("forward.h5")

A module is a Site too: Site(module, "forward", ...) records its calls; the params it holds
are named by Site.params, Site(norm, "forward", op="rmsnorm", args=("x",), returns=("y",),
params={"weight": "weight"}), and read at each call.

Training's backward: a Site with backward=True records, for each call, the gradients the
function's own backward (autograd, or its custom backward) computes when the model's backward
reaches it, as a case of the op's backward (`<op>_backward`): the call's inputs and params, the
upstream gradients of its results (`upstream_<result>`), and the gradients of its inputs
(`grad_<input>`) and params (`grad_<param>`, summed over the call's tokens). The forward call is
not recorded then; call `loss.backward()` (or torch.autograd.grad) inside the block.

    site = mt.Site(my_kernels, "rmsnorm", op="rmsnorm", args=("x", "weight"), returns=("y",),
                   backward=True)
    with mt.capture("backward.h5", [site], config={"dim": 5120}):
        model(tokens).sum().backward()

A model whose sublayers the harness cannot evaluate (MLA, sparse attention, a real MoE) is
captured by its modules instead (capture_blocks): each Block's streams in and out and each
sublayer's input and output, through forward hooks. A forward becomes `stack` cases with
`sublayers = "captured"`: the oracle takes each sublayer's output from the capture and judges
every mHC stage around it (the reading weights and the norm through the sublayer's input, the
writing weights and the comb through the Block's output, the final collapse and norm), layer by
layer.

Each Site replaces an attribute (a function of a module or object) for the duration of the
block, records every call's arguments (copied before the call, so that a kernel writing into
them is judged on what it was given) and results by the names of the fixture layout
(mhc_verify.layout), and calls the original. Arguments beyond `args` (n, iters, eps, ...) and
names the op does not take are ignored. Case k of a site is named "<k:04d>.<site>.<call>": the
order of the forward (layer by layer), then the site, then its call count.
"""
import contextlib
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

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
    backward: bool = False  # record the backward of each call (<op>_backward) instead
    # the op's params the owner holds rather than the call's arguments, by the owner's attribute
    # (a module's weight: {"weight": "weight"}), read at each call; forward sites only
    params: Optional[Mapping[str, str]] = None


def _nothing(path, why: str) -> None:
    """A capture of nothing would leave no file, and a test judging it nothing to judge."""
    raise RuntimeError(f"{os.fspath(path)}: nothing captured, no file written: {why}")


def _copy(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    return value


@contextlib.contextmanager
def capture(path, sites: Sequence[Site], config: Optional[Mapping[str, Any]] = None,
            precision: str = "fp32", producer: str = "mhc_verify.torch.capture"):
    """Records every call of the sites during the block; writes one mhc-capture file at its
    end (also when the block raises, with the calls made so far). A block that made no call of
    any site raises RuntimeError at its end: there is nothing to write or judge."""
    cases, counts, originals = {}, {}, []

    def wrap(site: Site, fn):
        site_config = {**(config or {}), **(site.config or {})}
        site_name = site.name or site.attr
        try:  # a declaration its cases cannot be judged under: refused before any call
            mhc_verify.layout(site.op + ("_backward" if site.backward else ""), site_config,
                              precision)
        except ValueError as e:
            raise ValueError(f"site {site_name!r}: {e}") from None
        layout = mhc_verify.layout(site.op, site_config)
        held = dict(site.params or {})
        unknown = sorted(set(held) - set(layout["params"]))
        if unknown:
            raise ValueError(f"site {site_name!r}: params {unknown} are not params of op "
                             f"{site.op} ({', '.join(layout['params']) or 'none'})")
        if held and site.backward:
            raise ValueError(f"site {site_name!r}: a backward site differentiates its call's "
                             f"arguments only; pass {sorted(held)} as arguments (args) instead "
                             "of Site.params")
        for attr in held.values():
            getattr(site.owner, attr)  # an AttributeError now, not after the model ran
        if site.backward:
            return _backward_recording(site, fn, layout, site_config,
                                       precision, cases, counts)

        def recording(*a, **kw):
            named = dict(zip(site.args, a))
            named.update({k: v for k, v in kw.items() if k in site.args})
            # Copied before the call: a kernel that writes into its arguments (an hc_post into
            # the residual's storage) is judged on what it was given.
            inputs = {n: _copy(v) for n, v in named.items() if n in layout["inputs"]}
            params = {n: _copy(v) for n, v in named.items() if n in layout["params"]}
            params.update({n: _copy(getattr(site.owner, a)) for n, a in held.items()})
            result = fn(*a, **kw)
            got = result if isinstance(result, (tuple, list)) else (result,)
            k = counts.get(site_name, 0)
            counts[site_name] = k + 1
            cases[f"{len(cases):04d}.{site_name}.{k}"] = {
                "op": site.op, "config": {**(config or {}), **(site.config or {})},
                "precision": precision, "inputs": inputs, "params": params,
                "outputs": {n: _copy(v) for n, v in zip(site.returns, got)},
            }
            return result

        return recording

    raised = False  # by the block (sys.exc_info() also sees an outer handler's exception)
    try:
        for site in sites:
            fn = getattr(site.owner, site.attr)
            originals.append((site, fn))
            setattr(site.owner, site.attr, wrap(site, fn))
        yield cases
    except BaseException:
        raised = True
        raise
    finally:
        for site, fn in reversed(originals):
            setattr(site.owner, site.attr, fn)
        if cases:
            try:
                mhc_verify.write_capture(path, cases, producer)
            except ValueError as e:
                if "params[" not in str(e) or "missing" not in str(e):
                    raise
                raise ValueError(f"{e}; a Site records the call's arguments named in its args, "
                                 "and params its owner holds by Site.params (a module's weight: "
                                 "params={'weight': 'weight'})") from None
        elif not raised:
            _nothing(path, "no call of " + ", ".join(
                f"{getattr(s.owner, '__name__', type(s.owner).__name__)}.{s.attr}" for s in sites) +
                " was made through the patched name (a caller that bound the function before "
                "the capture, `from module import fn`, calls the original)")


def _backward_recording(site: Site, fn, layout, config, precision, cases, counts):
    """fn wrapped so that its backward is recorded: the call runs on detached copies of its
    tensor arguments inside an autograd Function, whose backward differentiates the copies with
    the upstream gradients (fn's own backward), records both, and passes the gradients on."""
    import torch
    site_name = site.name or site.attr

    class Tap(torch.autograd.Function):
        @staticmethod
        def forward(ctx, call, record, *tensors):
            with torch.enable_grad():
                local = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
                result = call(local)
            outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            ctx.local, ctx.outs, ctx.record = local, outs, record
            return tuple(o.detach() for o in outs)

        @staticmethod
        def backward(ctx, *upstream):
            wanted = [t for t in ctx.local if t.requires_grad]
            grads = dict(zip(map(id, wanted), torch.autograd.grad(ctx.outs, wanted, upstream,
                                                                  allow_unused=True)))
            full = [grads.get(id(t)) for t in ctx.local]
            full = [torch.zeros_like(t) if g is None else g for t, g in zip(ctx.local, full)]
            ctx.record(ctx.local, upstream, full)
            return (None, None) + tuple(full)

    def recording(*a, **kw):
        named = dict(zip(site.args, a))
        named.update({k: v for k, v in kw.items() if k in site.args})
        names = [n for n in site.args if isinstance(named.get(n), torch.Tensor)]

        def call(local):
            args = list(a)
            given = dict(zip(names, local))
            for i, n in enumerate(site.args[:len(args)]):
                if n in given:
                    args[i] = given[n]
            return fn(*args, **{k: given.get(k, v) for k, v in kw.items()})

        def record(local, upstream, grads):
            k = counts.get(site_name, 0)
            counts[site_name] = k + 1
            values = dict(zip(names, local))
            inputs = {n: _copy(values[n]) for n in names if n in layout["inputs"]}
            inputs.update({"upstream_" + r: _copy(g) for r, g in zip(site.returns, upstream)})
            cases[f"{len(cases):04d}.{site_name}.{k}"] = {
                "op": site.op + "_backward", "config": config, "precision": precision,
                "inputs": inputs,
                "params": {n: _copy(values[n]) for n in names if n in layout["params"]},
                "outputs": {"grad_" + n: _copy(g) for n, g in zip(names, grads)},
            }

        outs = Tap.apply(call, record, *[named[n] for n in names])
        return outs[0] if len(site.returns) == 1 else outs

    return recording


@dataclass
class Block:
    """One Block of a model, for capture_blocks. `module`'s forward takes the streams
    ([T, n, d] or [B, T, n, d]) first and returns the new streams (or a tuple starting with them,
    then the next Block's reading weights); `attn` and `ffn` are its sublayer modules, whose
    first argument is the normed read of the streams and whose result is the sublayer's output.
    `params`: this layer's mHC params by their fixture names (attn/hc_fn, attn/hc_base,
    attn/hc_scale, the ffn site's, attn_norm/weight, ffn_norm/weight). `attn_site`, `ffn_site`
    (optional): modules whose result is that site's (pre, post, comb); captured, they anchor the
    writes, whose bounds are otherwise those of a comb computed from uncaptured mixes (at V4.1
    sizes often infinite: the streams then undecidable)."""
    module: Any
    attn: Any
    ffn: Any
    params: Mapping[str, Any]
    attn_site: Any = None
    ffn_site: Any = None


def _first(value):
    return value[0] if isinstance(value, (tuple, list)) else value


@contextlib.contextmanager
def capture_blocks(path, blocks: Sequence[Block], config: Mapping[str, Any], final_norm=None,
                   final=None, name: str = "forward", precision: str = "fp32",
                   tokens_per_case: Optional[int] = 128,
                   producer: str = "mhc_verify.torch.capture_blocks"):
    """Records every forward through `blocks` (a model's Blocks, from its first) and writes one
    mhc-capture file at the end of the block: per forward, `stack` cases ("<name>.<k>") of at
    most `tokens_per_case` tokens (None: all in one), since with the sublayers given each token's
    stages depend on that token alone. Judging takes about 64 bytes per stage value (bench/README.md,
    "Judging limits"): 128 tokens of 4 layers at the V4.1 sizes, about 2 GB.
    `final_norm`: the weight of the norm after the last Block; `final`: the module that applies
    it (its output is judged as final.norm; omit it and final.norm is computed, not judged).
    The params are copied at each forward's start, so that through a training loop each forward
    is judged with the weights it read (forwards in a row with equal weights share one copy)."""
    if not blocks:
        raise ValueError("capture_blocks: no blocks")
    params = {f"layers/{l}/{k}": v for l, b in enumerate(blocks) for k, v in b.params.items()}
    if final_norm is not None:
        params["final_norm/weight"] = final_norm
    forwards: List[Dict[str, Any]] = []
    weights: List[Dict[str, Any]] = []  # the params as each forward read them
    handles = []
    raised = False  # by the block (sys.exc_info() also sees an outer handler's exception)

    def snapshot():  # a copy at the forward's start, shared with the last while they are equal
        import torch
        last = weights[-1] if weights else None
        if last is not None and all(
                torch.equal(v.detach().to("cpu"), last[k]) if isinstance(v, torch.Tensor)
                else v == last[k] for k, v in params.items()):
            return last
        return {k: _copy(v) for k, v in params.items()}

    def batched(t, trailing):  # [B, T, ...]: the stack's layout
        t = _copy(_first(t))
        return t.unsqueeze(0) if t.dim() == trailing + 1 else t

    def record(stage, value, trailing):
        if not forwards:
            raise RuntimeError(f"capture_blocks: {stage} ran before the first Block")
        forwards[-1][stage] = batched(value, trailing)

    def block_in(l):
        def hook(mod, args):
            if l == 0:
                forwards.append({})
                weights.append(snapshot())
            record(f"L{l}.x", args[0], 2)
        return hook

    def block_out(l):
        def hook(mod, args, out):
            record(f"L{l}.x_out", out, 2)
            if isinstance(out, (tuple, list)) and len(out) > 1:
                record(f"L{l}.next_pre_mix", out[1], 1)
        return hook

    def site_out(prefix):
        def hook(mod, args, out):
            for k, v in zip(("pre", "post", "comb"), out):
                record(prefix + k, v, 1 if k != "comb" else 2)
        return hook

    def sublayer(stage, which):
        if which == "in":
            return lambda mod, args: record(stage, args[0], 1)
        return lambda mod, args, out: record(stage, out, 1)

    try:
        for l, b in enumerate(blocks):
            handles.append(b.module.register_forward_pre_hook(block_in(l)))
            handles.append(b.module.register_forward_hook(block_out(l)))
            for site, m in (("attn", b.attn_site), ("ffn", b.ffn_site)):
                if m is not None:
                    handles.append(m.register_forward_hook(site_out(f"L{l}.{site}.")))
            for site, m in (("attn", b.attn), ("ffn", b.ffn)):
                handles.append(m.register_forward_pre_hook(sublayer(f"L{l}.{site}.normed", "in")))
                handles.append(m.register_forward_hook(sublayer(f"L{l}.{site}.out", "out")))
        if final is not None:
            handles.append(final.register_forward_hook(sublayer("final.norm", "out")))
        yield forwards
    except BaseException:
        raised = True
        if forwards:
            forwards.pop()  # the forward the error interrupted: the others are written
            weights.pop()
        raise
    finally:
        for h in handles:
            h.remove()
        cases = {}
        for k, (f, read) in enumerate(zip(forwards, weights)):
            if "L0.x" not in f:
                continue
            for l in range(1, len(blocks)):
                f.pop(f"L{l}.x", None)  # the previous Block's x_out
            last = f"L{len(blocks) - 1}."
            if last + "x_out" in f:  # the stack's outputs are its last layer's
                f["x"] = f.pop(last + "x_out")
            if last + "next_pre_mix" in f:
                f["next_pre_mix"] = f.pop(last + "next_pre_mix")
            # With the sublayers given, tokens are independent: parts of tokens_per_case each.
            flat = {s: t.reshape(1, -1, *t.shape[2:]) for s, t in f.items()}
            total = flat["L0.x"].shape[1]
            step = max(1, int(tokens_per_case or total))
            for t0 in range(0, total, step):
                part = {s: t[:, t0:t0 + step] for s, t in flat.items()}
                label = f"{name}.{k}" if step >= total else \
                    f"{name}.{k}.tokens{t0:06d}-{min(total, t0 + step) - 1:06d}"
                cases[label] = {
                    "op": "stack",
                    "config": {**config, "layers": len(blocks), "sublayers": "captured"},
                    "precision": precision, "inputs": {"x": part.pop("L0.x")}, "params": read,
                    "outputs": part}
        if cases:
            mhc_verify.write_capture(path, cases, producer)
        elif not raised:
            _nothing(path, "no forward ran through the blocks")
