"""mhc-verify from Python: judge an mHC kernel's outputs against the exact oracle with derived
per-element error bounds, in process.

    import mhc_verify
    result = mhc_verify.judge("boundary", {"dim": 64}, inputs, outputs, params)
    mhc_verify.assert_faithful("boundary", {"dim": 64}, inputs, outputs, params)

Arrays are numpy arrays or torch tensors (CPU or CUDA, copied to the host; any layout). Names,
shapes and config keys are those of the fixture files (fixtures/README.md); `mhc_verify.layout(op,
config)` lists them. A failing case is saved as a fixture (default folder `mhc-failures/`) and its
REPRO line reruns it with `mhc-verify compare`.
"""
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from . import _core

__all__ = ["judge", "assert_faithful", "judge_file", "write_capture", "layout", "ops", "Judgement",
           "Stage", "Element"]

DEFAULT_SAVE_DIR = "mhc-failures"

# Where judgements are also recorded (the pytest plugin's --mhc-report), and under which label.
_recorder = None
_label = "mhc_verify.judge"


@dataclass(frozen=True)
class Element:
    """One element of a stage: where it is, the kernel's value, the oracle's, and the bound."""
    index: int
    token: int
    got: float
    want: float
    bound: float
    ratio: float
    rule: str


@dataclass(frozen=True)
class Stage:
    """The verdict of one stage (output) of the op."""
    stage: str
    state: str
    rule: str
    reason: str
    elements: int
    failed: int
    undecidable: int
    ratio_max: float
    ratio_p99: float
    ratio_median: float
    max_ulp: float
    max_rel: float
    worst: Element
    # The second tier (statistical), where it models the stage (mixes in fp32): state, reason,
    # z_max and z_rms (error / modelled fp32 rounding noise), the limits z_limit and rms_limit
    # they were judged by, and the worst element (bound: its noise scale, ratio: its z). A flag
    # fails the stage with rule "noise". None elsewhere.
    noise: Optional[dict] = None


@dataclass(frozen=True)
class Judgement:
    """What judging one case found. `passed` is True only when every stage is within its bounds
    and, where the second tier models a stage, its error is the size of fp32 rounding noise."""
    op: str
    tokens: int
    precision: str
    error_model: str
    state: str
    first_divergent: str
    diagnosis: str
    deviations: List[str]
    repro: str
    saved: str
    table: str
    stages: List[Stage] = field(default_factory=list)
    zero_params: List[str] = field(default_factory=list)
    name: str = ""  # the case's name in a capture file

    @property
    def passed(self) -> bool:
        return self.state == "pass"

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(f"no stage {name!r} (judged: {', '.join(s.stage for s in self.stages)})")

    def message(self) -> str:
        """The report a failing assertion shows: verdict, worst element, stage table, diagnosis,
        REPRO."""
        where = f" case {self.name!r}" if self.name else ""
        head = (f"mhc_verify: {self.op}{where} ({self.tokens} tokens, {self.precision}, "
                f"{self.error_model} error model): {self.state.upper()}")
        lines = [head]
        if self.first_divergent:
            s = self.stage(self.first_divergent)
            if s.rule == "noise" and s.noise:  # within its bounds, flagged by the second tier
                w = s.noise["worst"]
                lines.append(f"first divergent stage {s.stage!r}: every element within its bound, "
                             f"the error flagged by the second tier ({s.noise['reason']})")
                lines.append(f"worst element: {s.stage}.flat[{w.index}] (token {w.token}): got "
                             f"{w.got!r}, want {w.want!r}, fp32 rounding noise {w.bound:.3g} "
                             f"(z = {w.ratio:.3g}, limit {s.noise['z_limit']:g})")
            else:
                w = s.worst
                lines.append(f"first divergent stage {s.stage!r}: {s.reason}")
                lines.append(f"worst element: {s.stage}.flat[{w.index}] (token {w.token}): got "
                             f"{w.got!r}, want {w.want!r} +- {w.bound:.3g} (error / bound = "
                             f"{w.ratio:.3g}, rule {w.rule})")
        lines.append("")
        lines.append(self.table.rstrip())
        if self.diagnosis:
            lines.append(f"DIAGNOSIS: {self.diagnosis}")
        if self.repro:
            lines.append(f"REPRO: {self.repro}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.message()


def _text(what: str, value: Any) -> bytes:
    """A string argument as the C++ side takes it: UTF-8, where bytes that are not UTF-8 come
    surrogate-escaped, as Python holds file names (os.fsencode) and as names come back."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got {type(value).__name__}")
    if "\0" in value:  # C++ and HDF5 would cut the text there
        raise ValueError(f"{what}: {value!r} holds a null byte")
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: {value!r} is not valid text ({e.reason} at {e.start})") from None


def _threads(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"threads: expected an int (0: every core), got {type(value).__name__}")
    if not 0 <= value < 2**32:
        raise ValueError(f"threads: {value} is not in [0, 2**32) (0: every core)")
    return int(value)


def _flag(what: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}: expected True or False, got {value!r}")
    return bool(value)


def ops() -> List[str]:
    """The ops the harness judges."""
    return list(_core.ops())


def layout(op: str, config: Optional[Mapping[str, Any]] = None,
           precision: str = "fp32") -> Dict[str, Any]:
    """The names and trailing shapes of an op's inputs, params and outputs at a configuration;
    ValueError where the op cannot be judged under `precision` (a backward op declared with
    narrower mixes, coefficients, products, accumulation or intermediates)."""
    return dict(_core.layout(_text("op", op), dict(config or {}), _text("precision", precision)))


def _host_float32(name: str, value: Any) -> "tuple[np.ndarray, str]":
    """A C-contiguous float32 copy on the host (exact: bf16 and fp16 are subsets of fp32), and
    the format the source was stored in: "fp32", "bf16" or "fp16"."""
    stored = "fp32"
    if type(value).__module__.startswith("torch"):
        import torch
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name}: expected an array or a tensor, got {type(value).__name__}")
        if value.dtype in (torch.bfloat16, torch.float16):
            stored = "bf16" if value.dtype == torch.bfloat16 else "fp16"
        elif value.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name}: dtype {value.dtype}, expected a floating tensor")
        if value.is_meta:
            raise TypeError(f"{name}: a tensor on the meta device holds no values")
        if value.layout != torch.strided:  # sparse: its dense values, as the kernel's output means
            value = value.to_dense()
        value = value.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    array = np.asarray(value)
    if array.dtype == np.float16:
        stored = "fp16"
    elif array.dtype.kind != "f":
        raise TypeError(f"{name}: dtype {array.dtype}, expected floating point")
    return np.ascontiguousarray(array, dtype=np.float32), stored


def _arrays(kind: str, given: Optional[Mapping[str, Any]]) -> "tuple[dict, dict]":
    """float32 copies by name, and the formats of those given in bf16 or fp16."""
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(f"{kind}: a mapping of names to arrays (a dict), not "
                        f"{type(given).__name__}")
    out, stored = {}, {}
    for name, value in (given or {}).items():
        out[name], fmt = _host_float32(f"{kind}[{name!r}]", value)
        if fmt != "fp32":
            stored[name] = fmt
    return out, stored


def _shape(value: Any) -> tuple:
    """An array's shape, a nested list's as numpy reads it; () for a scalar or nothing."""
    shape = getattr(value, "shape", None)
    if shape is None and isinstance(value, (list, tuple)):
        shape = np.shape(value)
    return tuple(shape or ())


def _within_limits(op: str, config: Optional[Mapping[str, Any]], inputs: Mapping[str, Any],
                   outputs: Optional[Mapping[str, Any]] = None,
                   params: Optional[Mapping[str, Any]] = None) -> None:
    """Refuses a case too large to judge before any array is copied (ValueError): every input's
    tokens within the limits, and no output or param of the op larger than its shape at the
    most tokens an input has (a broadcast view can claim any size)."""
    l = layout(op, config)
    most, seen = 1, False
    if not isinstance(inputs, Mapping) or not isinstance(outputs, (Mapping, type(None))):
        return  # refused, and named, when the case is made
    for name, trailing in l["inputs"].items():
        shape = _shape(inputs.get(name))
        if name in inputs and len(shape) >= len(trailing):  # else refused when the case is made
            seen = True
            lead = shape[:max(len(shape) - len(trailing), 0)]
            tokens = int(np.prod(lead, dtype=np.float64)) if lead else 1
            batch = lead[0] if l["leading"] == 2 and lead else 1
            _core.within_limits(op, dict(config or {}), tokens, batch)
            most = max(most, tokens)
    if not seen:  # no input says how many tokens there are: the first one wrong is named
        for name, trailing in l["inputs"].items():
            if name not in inputs:
                raise ValueError(f"inputs[{name!r}]: missing (op {op} reads {name})")
            shape = _shape(inputs[name])
            raise ValueError(f"inputs[{name!r}]: shape {shape}, expected "
                             f"(..., {', '.join(map(str, trailing))})")
    for kind, given in (("outputs", outputs), ("params", params)):
        if not isinstance(given, (Mapping, type(None))):
            break
        for name, value in (given or {}).items():
            trailing = l[kind].get(name)
            if trailing is None:
                continue  # a name the op does not have: refused when the case is made
            size = float(np.prod(tuple(getattr(value, "shape", ())), dtype=np.float64))
            if size > most * float(np.prod(trailing, dtype=np.float64)):
                raise ValueError(f"{kind}[{name!r}]: {size:.0f} elements, more than {most} "
                                 f"tokens of shape {tuple(trailing)} hold")


def judge(op: str, config: Optional[Mapping[str, Any]], inputs: Mapping[str, Any],
          outputs: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None,
          precision: str = "fp32", error_model: str = "standard",
          save_dir: Optional[str] = DEFAULT_SAVE_DIR, threads: int = 0,
          diagnose: bool = True) -> Judgement:
    """Judges `outputs` (any of the op's, by name) of an implementation of `op` on `inputs` and
    `params` under the declared `precision` (a preset, "fp32", "tf32", "bf16", "bf16-projection",
    "fp16", or parts such as "streams=bf16,mixes=bf16,products=bf16": the storage of inputs,
    weights, mixes, coefficients and streams, the projection's products and accumulation, and
    "intermediates", every result inside hc_pre, hc_post, RMSNorm and the mixes, which
    PyTorch eager rounds to the tensors' dtype: "mixes=bf16,streams=bf16,intermediates=bf16" for
    `(pre[..., None] * x).sum(-2)` on bf16 tensors).
    Params the given outputs do not read may be left out. Outputs given in bfloat16 or float16
    (torch tensors, or numpy float16) are judged with their rounding to that format in the bound;
    inputs and params in them are taken at their values, and those the declaration stores
    narrower are rounded to it, as the kernel read them. A failing case is saved under `save_dir` (None: not saved).

    `config` keys left out take DeepSeek V4.1's values: n (or hc_mult) 4, dim (d) 5120,
    sinkhorn_iters (iters) 20, hc_eps 1e-6, norm_eps 1e-20 (the RMS statistics' eps: an RMSNorm
    written with 1e-6 fails against it on activations of rms up to about 0.4 over 16 tokens or
    more at dim 5120, by the second tier); a Block's heads 8, head_dim 64,
    experts 8, top_k 2, inter 512, route_scale 1, layers 1."""
    _within_limits(op, config, inputs, outputs, params)
    if save_dir is not None and os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise ValueError(f"save_dir: {os.fspath(save_dir)!r} is not a directory")
    ins, _ = _arrays("inputs", inputs)
    outs, stored = _arrays("outputs", outputs)
    pars, _ = _arrays("params", params)
    r = _core.judge(op, dict(config or {}), ins, outs, pars, _text("precision", precision),
                    _text("error_model", error_model), stored,
                    "" if save_dir is None else _text("save_dir", save_dir), _threads(threads),
                    _flag("diagnose", diagnose), _recorder, _label)
    return _judgement(r)


def _judgement(r: dict) -> Judgement:
    def stage(s):
        noise = s.pop("noise", None)
        if noise is not None:
            noise = {**noise, "worst": Element(**noise["worst"])}
        return Stage(**{**s, "worst": Element(**s["worst"]), "noise": noise})
    stages = [stage(s) for s in r.pop("stages")]
    return Judgement(stages=stages, **r)


def judge_file(path: str, cases: Optional[List[str]] = None, error_model: str = "standard",
               threads: int = 0, diagnose: bool = True) -> List[Judgement]:
    """Judges every case of a fixture file (mhc-fixture: one case) or capture file
    (mhc-capture: many, e.g. a model's forward from mhc_verify.torch.capture), or only the
    cases named (a name the file does not hold is an error, as a list judged empty would pass).
    Each Judgement's REPRO line reruns its case with `mhc-verify compare`."""
    if isinstance(cases, (str, bytes)):
        raise TypeError(f"cases: a list of case names, not one {type(cases).__name__} ({cases!r})")
    names = [_text(f"cases[{i}]", c) for i, c in enumerate(cases or [])]
    where = _text("path", path)
    results = [_judgement(r) for r in _core.judge_file(where, names,
                                                       _text("error_model", error_model),
                                                       _threads(threads),
                                                       _flag("diagnose", diagnose), _recorder,
                                                       _label)]
    missing = sorted(set(cases or []) - {r.name for r in results})
    if missing:
        raise ValueError(f"{os.fspath(path)}: no such case: {', '.join(map(repr, missing))}")
    return results


def write_capture(path: str, cases: Mapping[str, Mapping[str, Any]],
                  producer: str = "mhc_verify.write_capture") -> None:
    """Writes many cases as one mhc-capture file (atomically). `cases` maps a case name (no
    '/'; names sort in judging order) to a dict with the arguments of judge(): op, config,
    inputs, params, outputs, precision."""
    names, payload = [], []
    keys = {"op", "config", "inputs", "params", "outputs", "precision"}
    for name, case in cases.items():
        unknown = sorted(map(str, set(case) - keys))
        if unknown:  # a misspelt key would otherwise leave its case judged under the defaults
            raise ValueError(f"cases[{name!r}]: unknown key(s) {', '.join(map(repr, unknown))} "
                             f"(a case has {', '.join(sorted(keys))})")
        ins, _ = _arrays("inputs", case.get("inputs"))
        outs, stored = _arrays("outputs", case.get("outputs"))
        pars, _ = _arrays("params", case.get("params"))
        # a str (surrogate-escaped bytes allowed) or the bytes themselves
        names.append(_text("a case's name", os.fsdecode(name) if isinstance(name, bytes) else str(name)))
        if "op" not in case:
            raise ValueError(f"cases[{name!r}]: no 'op' (its keys: {', '.join(map(str, case))})")
        payload.append({"op": _text(f"cases[{name!r}]['op']", case["op"]),
                        "config": dict(case.get("config") or {}), "inputs": ins,
                        "outputs": outs, "params": pars, "stored": stored,
                        "precision": _text(f"cases[{name!r}]['precision']",
                                           case.get("precision", "fp32"))})
    _core.write_capture(_text("path", path), names, payload, _text("producer", producer))


def assert_faithful(op: str, config: Optional[Mapping[str, Any]], inputs: Mapping[str, Any],
                    outputs: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None,
                    **options: Any) -> Judgement:
    """judge(), raising AssertionError with the full report unless every stage passes."""
    result = judge(op, config, inputs, outputs, params, **options)
    if not result.passed:
        raise AssertionError(result.message())
    return result
