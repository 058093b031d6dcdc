"""Capture files (mhc-capture): many cases in one file, written by write_capture (and by
mhc_verify.torch.capture), judged by judge_file and by `mhc-verify compare`, one case selected by
--case; bad captures are errors naming the case."""
import subprocess

import h5py
import numpy as np
import pytest

import mhc_verify
from conftest import BIN

SMALL = ["--dim", "16", "--tokens", "3"]


def case(capture, op, *options):
    config, inputs, params, outputs = capture(op, *(options or SMALL))
    return {"op": op, "config": config, "inputs": inputs, "params": params, "outputs": outputs}


def test_a_capture_is_judged_case_by_case(capture, tmp_path):
    path = tmp_path / "forward.h5"
    cases = {f"{k}.{op}": case(capture, op) for k, op in enumerate(["mixes", "pre", "post"])}
    wrong = cases["1.pre"]["outputs"]["y"]
    wrong[0, 0] += 1.0
    mhc_verify.write_capture(path, cases)
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.passed) for r in results] == [("0.mixes", True), ("1.pre", False),
                                                      ("2.post", True)]
    assert results[1].repro == f"mhc-verify compare {path} --case 1.pre"
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 1 and "compare: FAIL (3 cases: 2 pass, 1 fail" in p.stdout, p.stdout
    p = subprocess.run([BIN, "compare", str(path), "--case", "2.post"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "(1 cases: 1 pass" in p.stdout, p.stdout
    p = subprocess.run([BIN, "compare", str(path), "--case", "9.nothing"], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "--case 9.nothing: no such case" in p.stderr
    assert [r.name for r in mhc_verify.judge_file(path, cases=["2.post"])] == ["2.post"]


def test_a_capture_where_nothing_could_be_decided_is_not_a_pass(capture, tmp_path):
    # Stream 0 of every column infinite: every y is infinite, its bound too, so every element is
    # undecidable and no output checked. compare says UNDECIDED and exits 3, not PASS and 0; one
    # decided case beside it makes the run a pass again.
    path = tmp_path / "infinite.h5"
    blind = case(capture, "pre")
    blind["inputs"]["x"][:, 0, :] = np.inf
    blind["outputs"]["y"][:] = np.inf
    mhc_verify.write_capture(path, {"blind": blind})
    [r] = mhc_verify.judge_file(path)
    assert r.state == "undecidable"
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 3 and "compare: UNDECIDED (1 cases: 0 pass" in p.stdout, p.stdout
    # merge reads such a report, and says the same of it alone
    subprocess.run([BIN, "compare", str(path), "--json", str(tmp_path / "blind.json")])
    p = subprocess.run([BIN, "merge", str(tmp_path / "blind.json")], capture_output=True, text=True)
    assert p.returncode == 3 and "merge: UNDECIDED" in p.stdout, p.stdout + p.stderr
    seen = tmp_path / "seen.h5"
    mhc_verify.write_capture(seen, {"seen": case(capture, "pre")})
    subprocess.run([BIN, "compare", str(seen), "--json", str(tmp_path / "seen.json")], check=True)
    p = subprocess.run([BIN, "merge", str(tmp_path / "blind.json"), str(tmp_path / "seen.json")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "merge: PASS" in p.stdout, p.stdout + p.stderr
    mhc_verify.write_capture(path, {"blind": blind, "seen": case(capture, "pre")})
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 0 and "compare: PASS (2 cases: 1 pass" in p.stdout, p.stdout


def test_names_that_are_not_utf8_come_back_as_python_file_names_do(capture, tmp_path):
    # A file and a case named with bytes that are not UTF-8 (a capture from another tool): judged,
    # named back surrogate-escaped (os.fsdecode), and that name selects the case again.
    import os
    folder = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"dir\xff"))
    os.makedirs(folder)
    path, name = os.path.join(folder, "c.h5"), os.fsdecode(b"bad\xfe")
    wrong = case(capture, "pre")
    wrong["outputs"]["y"][0, 0] += 1.0
    mhc_verify.write_capture(path, {name: wrong, "ok": case(capture, "post")})
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.passed) for r in results] == [(name, False), ("ok", True)]
    assert results[0].repro.endswith(r"/c.h5' --case $'bad\xFE'"), results[0].repro
    assert [r.name for r in mhc_verify.judge_file(path, cases=[name])] == [name]
    # The name given as the bytes themselves is the same name.
    mhc_verify.write_capture(path, {b"bad\xfe": wrong})
    assert [r.name for r in mhc_verify.judge_file(path)] == [name]
    # An error naming such a file names it escaped, as the command line does.
    with pytest.raises(ValueError, match=r"dir\\xFF/none\.h5"):
        mhc_verify.judge_file(os.path.join(folder, "none.h5"))


@pytest.mark.parametrize("options", [["--dim", "16", "--hc-eps", "1e-3", "--iters", "7"],
                                     ["--tokens", "16", "--n", "3", "--dim", "8"]])
def test_capture_records_the_command_that_writes_it_again(tmp_path, options):
    """The file's producer is the capture with every option that made the case (not check's
    defaults, nor capture's 4 tokens): run again, it writes the same case."""
    import shlex
    first, second = tmp_path / "a.h5", tmp_path / "b.h5"
    subprocess.run([BIN, "capture", "--op", "boundary", "--seed", "3", *options, "--out",
                    str(first)], check=True, capture_output=True)
    with h5py.File(first, "r") as f:
        producer = f.attrs["producer"]
    producer = producer.decode() if isinstance(producer, bytes) else str(producer)
    argv = shlex.split(producer)
    assert argv[:2] == ["mhc-verify", "capture"], producer
    subprocess.run([BIN, *argv[1:], "--out", str(second)], check=True, capture_output=True)
    with h5py.File(first, "r") as a, h5py.File(second, "r") as b:
        assert dict(a["config"].attrs) == dict(b["config"].attrs)
        for group in ("inputs", "params", "outputs"):
            names = set(a[group].keys())
            assert names == set(b[group].keys())
            for name in names:
                if isinstance(a[group][name], h5py.Dataset):
                    assert np.array_equal(a[group][name][()], b[group][name][()]), (group, name)


def test_bad_captures_name_the_case(capture, tmp_path):
    good = case(capture, "pre")
    bad = dict(good, inputs={"x": good["inputs"]["x"][:, :2], "pre_mix": good["inputs"]["pre_mix"]})
    with pytest.raises(ValueError, match=r"case 'b': inputs\['x'\]: shape"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"a": good, "b": bad})
    with pytest.raises(ValueError, match=r"case name 'a/b' holds '/'"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"a/b": good})
    with pytest.raises(ValueError, match=r"case name '\.' is '\.', HDF5's name for the file's root"):
        mhc_verify.write_capture(tmp_path / "c.h5", {".": good})
    with pytest.raises(ValueError, match=r"case name 'a' is given twice"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"a": good, b"a": good})
    with pytest.raises(ValueError, match=r"cases\['c'\]: no 'op' \(its keys: config, inputs"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"c": {k: v for k, v in good.items() if k != "op"}})
    # A misspelt key would leave the case judged under the defaults (here fp32, not bf16).
    with pytest.raises(ValueError, match=r"cases\['d'\]: unknown key\(s\) 'precison'"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"a": good, "d": dict(good, precison="bf16")})
    assert not (tmp_path / "c.h5").exists()


def test_torch_capture_records_every_call_by_name(tmp_path):
    torch = pytest.importorskip("torch")
    import types

    import mhc_verify.torch as mt
    kernels = types.SimpleNamespace(pre=lambda x, pre_mix, scale=1.0: (pre_mix.unsqueeze(-1) * x).sum(-2))
    path = tmp_path / "calls.h5"
    x = torch.randn(2, 5, 4, 8, dtype=torch.float64)  # [B, T, n, d] flattens to 10 tokens
    w = torch.rand(2, 5, 4, dtype=torch.float64)
    site = mt.Site(kernels, "pre", op="pre", args=("x", "pre_mix"), returns=("y",), name="read")
    original = kernels.pre
    with mt.capture(path, [site], config={"dim": 8}):
        for _ in range(3):
            kernels.pre(x.float(), w.float(), 2.0)
    assert kernels.pre is original  # restored
    results = mhc_verify.judge_file(path)
    assert [r.name for r in results] == ["0000.read.0", "0001.read.1", "0002.read.2"]
    assert all(r.passed and r.tokens == 10 for r in results)


def test_a_torch_capture_of_no_call_is_an_error(tmp_path):
    """A caller that bound the kernel before the capture calls the original: nothing is recorded,
    and the capture says so instead of leaving no file for a later judge_file."""
    pytest.importorskip("torch")
    import types

    import mhc_verify.torch as mt
    kernels = types.SimpleNamespace(pre=lambda x, pre_mix: (pre_mix.unsqueeze(-1) * x).sum(-2))
    bound = kernels.pre
    path = tmp_path / "none.h5"
    with pytest.raises(RuntimeError, match=r"none\.h5: nothing captured, no file written: no call "
                                           r"of SimpleNamespace\.pre"):
        with mt.capture(path, [mt.Site(kernels, "pre", op="pre", args=("x", "pre_mix"),
                                       returns=("y",))]):
            bound  # a model holding the original calls it, not the patched name
    assert not path.exists() and kernels.pre is bound
    with pytest.raises(KeyError):  # an error in the block is not replaced by this one
        with mt.capture(path, [mt.Site(kernels, "pre", op="pre", args=("x", "pre_mix"),
                                       returns=("y",))]):
            raise KeyError("the model's own")
    try:  # inside an outer handler, a block that raised nothing still says so
        raise KeyError("handled")
    except KeyError:
        with pytest.raises(RuntimeError, match="nothing captured"):
            with mt.capture(path, [mt.Site(kernels, "pre", op="pre", args=("x", "pre_mix"),
                                           returns=("y",))]):
                pass


def test_torch_capture_records_the_arguments_as_the_call_was_given_them(tmp_path):
    # Kernels that write into their arguments: an hc_post that writes the new streams into the
    # residual's storage (legitimate: the residual is dead after it) passes, and an hc_pre that
    # scales its reading weights in place, so that its result is twice the right one, fails.
    torch = pytest.importorskip("torch")
    import types

    import mhc_verify.torch as mt

    def pre_in_place(x, pre_mix):
        pre_mix.mul_(2.0)
        return (pre_mix.unsqueeze(-1) * x).sum(-2)

    def post_into_residual(f, residual, post, comb):
        new = post.unsqueeze(-1) * f.unsqueeze(-2) + comb.transpose(-1, -2) @ residual
        return residual.copy_(new)

    kernels = types.SimpleNamespace(pre=pre_in_place, post=post_into_residual)
    g = torch.Generator().manual_seed(5)
    x, pre_mix = torch.randn(3, 4, 8, generator=g), torch.rand(3, 4, generator=g)
    f, post, comb = torch.randn(3, 8, generator=g), torch.rand(3, 4, generator=g), torch.rand(
        3, 4, 4, generator=g)
    sites = [mt.Site(kernels, "pre", op="pre", args=("x", "pre_mix"), returns=("y",)),
             mt.Site(kernels, "post", op="post", args=("f", "residual", "post", "comb"),
                     returns=("y",))]
    path = tmp_path / "in_place.h5"
    with mt.capture(path, sites, config={"dim": 8}):
        kernels.pre(x, pre_mix)
        kernels.post(f, x, post, comb)
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.passed) for r in results] == [("0000.pre.0", False), ("0001.post.0", True)]
    assert results[0].first_divergent == "y"


STACK = ["--layers", "2", "--tokens", "3", "--batch", "2", "--dim", "16", "--heads", "2",
         "--head-dim", "4", "--experts", "4", "--top-k", "2", "--inter", "8",
         "--captured-sublayers"]


def test_captured_sublayers_are_given_and_the_mhc_around_them_judged(capture):
    config, inputs, params, outputs = capture("stack", *STACK)
    assert config["sublayers"] == "captured" and "layers/0/attn/wq" not in params
    r = mhc_verify.judge("stack", config, inputs, outputs, params, save_dir=None)
    assert r.passed and "L1.x_out" in {s.stage for s in r.stages}
    assert not {"L0.attn.out", "L1.ffn.out"} & {s.stage for s in r.stages}
    outputs["L0.attn.normed"][0, 1, 3] *= 1.001
    r = mhc_verify.judge("stack", config, inputs, outputs, params, save_dir=None)
    assert r.first_divergent == "L0.attn.normed"
    # a layer is named as the Trace names it: "L00" is no stage, not L0's (it would go unjudged)
    with pytest.raises(ValueError, match=r"outputs\['L00.x_out'\]: op stack has no such output"):
        mhc_verify.judge("stack", config, inputs, dict(outputs, **{"L00.x_out": outputs["L0.x_out"]}),
                         params, save_dir=None)
    del outputs["L1.ffn.out"]
    with pytest.raises(ValueError, match=r"outputs\['L1.ffn.out'\]: missing"):
        mhc_verify.judge("stack", config, inputs, outputs, params, save_dir=None)


def test_every_boundary_of_a_stack_has_the_second_tier(capture):
    """Each layer's attn and ffn boundary (mixes, pre, post, comb) is modelled as the op boundary
    is, anchored on the kernel's own streams, and its RMSNorm on the kernel's own sublayer input: a
    token's L1.ffn.mixes off by 32 u, inside its bound, is flagged there; it reads the kernel's
    L1.x_mid."""
    config, inputs, params, outputs = capture("stack", *STACK)
    r = mhc_verify.judge("stack", config, inputs, outputs, params, save_dir=None)
    assert r.passed
    modelled = {s.stage for s in r.stages if s.noise is not None}
    assert modelled == {f"L{l}.{b}.{n}" for l in (0, 1) for b in ("attn", "ffn")
                        for n in ("mixes", "pre", "post", "comb", "normed")}
    off = dict(outputs, **{"L1.ffn.mixes": (outputs["L1.ffn.mixes"].astype(np.float64) *
                                            (1 + 32 * 2.0**-24)).astype(np.float32)})
    r = mhc_verify.judge("stack", config, inputs, off, params, save_dir=None)
    s = r.stage("L1.ffn.mixes")
    assert r.first_divergent == "L1.ffn.mixes" and s.rule == "noise" and s.ratio_max < 1, r.message()


def test_the_given_sublayer_outputs_alone_leave_nothing_to_judge(capture, tmp_path):
    """With sublayers = 'captured' each sublayer's output is given and taken as it is: a case of
    those alone would pass on nothing, whatever they hold. judge refuses it; compare counts it
    invalid and exits 2."""
    config, inputs, params, outputs = capture("stack", *STACK)
    given = {k: v * float("nan") for k, v in outputs.items() if k.endswith((".attn.out", ".ffn.out"))}
    assert len(given) == 4
    with pytest.raises(ValueError, match=r"outputs: only the sublayers' outputs.*nothing to judge"):
        mhc_verify.judge("stack", config, inputs, given, params, save_dir=None)
    path = tmp_path / "given.h5"
    mhc_verify.write_capture(path, {"0.stack": {"op": "stack", "config": config, "inputs": inputs,
                                                "params": params, "outputs": outputs}})
    with h5py.File(path, "r+") as f:  # the writer refuses such a case; another tool may not
        found = []
        f.visit(lambda name: found.append(name) if "/outputs/" in name and isinstance(
            f[name], h5py.Dataset) and not name.endswith(("attn.out", "ffn.out")) else None)
        assert found
        for name in found:
            del f[name]
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no outputs to judge besides the sublayers' given ones" in p.stderr, p.stderr
    with pytest.raises(ValueError, match=r"--case 0.stack: no outputs to judge besides the sub"):
        mhc_verify.judge_file(path)
    assert "compare: INVALID (1 cases: 0 pass, 0 fail, 1 invalid" in p.stdout, p.stdout


def blocks_model():
    torch = pytest.importorskip("torch")
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import mhc_blocks
    import mhc_verify.torch as mt
    model = mhc_blocks.Model(layers=2)
    blocks = [mt.Block(b, b.attn, b.ffn, b.mhc_params()) for b in model.blocks]
    x = torch.randn(2, 4, mhc_blocks.N, mhc_blocks.D, generator=torch.Generator().manual_seed(3))
    return torch, mt, model, blocks, x


def test_capture_blocks_splits_a_forward_into_parts_of_tokens(tmp_path):
    torch, mt, model, blocks, x = blocks_model()
    path = tmp_path / "parts.h5"
    with torch.no_grad(), mt.capture_blocks(path, blocks, {"hc_mult": 4, "dim": 16},
                                            final_norm=model.final_norm.weight,
                                            final=model.final_norm, tokens_per_case=3):
        model(x[0])
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.tokens, r.passed) for r in results] == [
        ("forward.0.tokens000000-000002", 3, True), ("forward.0.tokens000003-000003", 1, True)]
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 0 and "compare: PASS (2 cases: 2 pass" in p.stdout, p.stdout + p.stderr


def test_capture_blocks_keeps_the_forwards_that_completed(tmp_path):
    torch, mt, model, blocks, x = blocks_model()
    path = tmp_path / "raised.h5"

    def broken(mod, args, out):
        raise RuntimeError("the model's own error")

    with pytest.raises(RuntimeError, match="the model's own error"), torch.no_grad(), \
            mt.capture_blocks(path, blocks, {"hc_mult": 4, "dim": 16},
                              final_norm=model.final_norm.weight, tokens_per_case=None):
        model(x[0])
        model.blocks[1].ffn.register_forward_hook(broken)
        model(x[1])
    assert [(r.name, r.passed) for r in mhc_verify.judge_file(path)] == [("forward.0", True)]


def test_cases_are_read_one_at_a_time(capture, tmp_path):
    """The reader hands cases over as it reads them: the error names the malformed case, which
    compare counts invalid while it judges the cases before and after it (exit 2), and a case
    not asked for is never read. The library raises, naming the case."""
    import h5py
    path = tmp_path / "three.h5"
    mhc_verify.write_capture(path, {k: case(capture, "pre") for k in ("a", "b", "c")})
    with h5py.File(path, "r+") as f:
        del f["cases/b/inputs/pre_mix"]
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 2 and f"PASS {path}[a]" in p.stdout, p.stdout + p.stderr
    assert "case 'b': dataset /inputs/pre_mix" in p.stderr and f"INVALID {path}[b]" in p.stdout
    assert f"PASS {path}[c]" in p.stdout, p.stdout
    assert "compare: INVALID (3 cases: 2 pass, 0 fail, 1 invalid, 0 undecided" in p.stdout, p.stdout
    p = subprocess.run([BIN, "compare", str(path), "--case", "c"], capture_output=True, text=True)
    assert p.returncode == 0 and f"PASS {path}[c]" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([BIN, "compare", str(path), "--case", "b"], capture_output=True, text=True)
    assert p.returncode == 2 and f"INVALID {path}[b]" in p.stdout, p.stdout + p.stderr
    assert "no such case" not in p.stderr, p.stderr  # it was found, and is invalid
    assert [r.name for r in mhc_verify.judge_file(path, cases=["a", "c"])] == ["a", "c"]
    with pytest.raises(ValueError, match="case 'b'"):
        mhc_verify.judge_file(path)


def test_capture_blocks_takes_each_sites_weights_when_given(tmp_path):
    torch, mt, model, blocks, x = blocks_model()
    blocks = [mt.Block(b.module, b.attn, b.ffn, b.params, m.attn_site, m.ffn_site)
              for b, m in zip(blocks, model.blocks)]
    path = tmp_path / "sites.h5"
    with torch.no_grad(), mt.capture_blocks(path, blocks, {"hc_mult": 4, "dim": 16},
                                            final_norm=model.final_norm.weight):
        model(x[0])
    [r] = mhc_verify.judge_file(path)
    judged = {s.stage for s in r.stages if s.state == "pass"}
    assert r.passed and {f"L{l}.{s}.{w}" for l in (0, 1) for s in ("attn", "ffn")
                         for w in ("pre", "post", "comb")} <= judged


def test_capture_blocks_judges_each_forward_with_the_weights_it_read(tmp_path):
    # Training: the weights change between forwards (an optimiser's step), and each forward is
    # judged with the params as they were when it ran, not as they are at the end.
    torch, mt, model, blocks, x = blocks_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "steps.h5"
    with mt.capture_blocks(path, blocks, {"hc_mult": 4, "dim": 16},
                           final_norm=model.final_norm.weight, final=model.final_norm,
                           tokens_per_case=None):
        for _ in range(2):
            loss = model(x[0]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():  # two forwards after the last step read the same weights
            model(x[1])
            model(x[0])
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.passed) for r in results] == [(f"forward.{k}", True) for k in range(4)]
    with h5py.File(path, "r") as f:
        fn = [f[f"cases/forward.{k}/params/layers/0/attn/hc_fn"][()] for k in range(4)]
    assert not np.array_equal(fn[0], fn[1]) and not np.array_equal(fn[1], fn[2])
    assert np.array_equal(fn[2], fn[3])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_narrow_outputs_are_written_as_what_they_are(capture, tmp_path, dtype):
    # outputs given in bf16 or fp16 keep that format in the file, so the file is judged as the
    # arrays were (as float32 they would claim fp32 and fail), and so is a saved failing case
    torch = pytest.importorskip("torch")
    c = case(capture, "pre")
    c["outputs"] = {"y": torch.from_numpy(c["outputs"]["y"]).to(getattr(torch, dtype))}
    assert mhc_verify.judge("pre", c["config"], c["inputs"], c["outputs"], c["params"],
                            save_dir=None).passed
    path = tmp_path / "narrow.h5"
    mhc_verify.write_capture(path, {"a": c})
    [r] = mhc_verify.judge_file(path)
    assert r.passed, r.reason
    c["outputs"]["y"][0, 0] += 1.0
    saved = tmp_path / "saved"
    bad = mhc_verify.judge("pre", c["config"], c["inputs"], c["outputs"], c["params"],
                           save_dir=str(saved))
    assert not bad.passed and bad.first_divergent == "y"
    [again] = mhc_verify.judge_file(next(saved.iterdir()))
    assert not again.passed and again.first_divergent == "y"
    assert again.stages[0].ratio_max == pytest.approx(bad.stages[0].ratio_max)


def test_torch_capture_records_the_backward_of_each_call(tmp_path):
    """A Site with backward=True records what the function's own backward computes when the
    model's backward reaches it: the autograd of a faithful RMSNorm passes, one whose custom
    backward drops the statistic's term fails on grad_x, and the weight's gradient is summed over
    the call's tokens."""
    torch = pytest.importorskip("torch")
    import types

    import mhc_verify.torch as mt

    def rmsnorm(x, weight, eps=1e-20):
        r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        return weight * (x * r)

    class NoMeanTerm(torch.autograd.Function):  # d x = r w g, the statistic's term dropped
        @staticmethod
        def forward(ctx, x, weight):
            r = torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-20)
            ctx.save_for_backward(x, weight, r)
            return weight * (x * r)

        @staticmethod
        def backward(ctx, g):
            x, weight, r = ctx.saved_tensors
            return r * weight * g, (g * x * r).reshape(-1, x.shape[-1]).sum(0)

    kernels = types.SimpleNamespace(good=rmsnorm, bad=NoMeanTerm.apply)
    sites = [mt.Site(kernels, "good", op="rmsnorm", args=("x", "weight"), returns=("y",),
                     backward=True),
             mt.Site(kernels, "bad", op="rmsnorm", args=("x", "weight"), returns=("y",),
                     backward=True)]
    path = tmp_path / "backward.h5"
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 16, generator=g).requires_grad_()
    w = (torch.rand(16, generator=g) + 0.5).requires_grad_()
    with mt.capture(path, sites, config={"dim": 16}):
        (kernels.good(x, w) * torch.randn(2, 3, 16, generator=g)).sum().backward()
        (kernels.bad(x, w) * torch.randn(2, 3, 16, generator=g)).sum().backward()
    assert x.grad is not None and w.grad is not None  # the gradients passed on to the model
    results = mhc_verify.judge_file(path)
    assert [(r.name, r.passed, r.tokens) for r in results] == [
        ("0000.good.0", True, 6), ("0001.bad.0", False, 6)]
    assert results[1].first_divergent == "grad_x"


@pytest.mark.parametrize("backward", [True, False])
def test_a_site_whose_cases_cannot_be_judged_is_refused_before_any_call(tmp_path, backward):
    """A backward op is judged with fp32 intermediates only: a backward Site under a declaration
    with bf16 intermediates is refused when the capture starts, naming the site, and leaves the
    function unpatched; the same Site recording forwards is accepted."""
    torch = pytest.importorskip("torch")
    import types

    import mhc_verify.torch as mt

    kernels = types.SimpleNamespace(norm=lambda x, weight: weight * x)
    site = mt.Site(kernels, "norm", op="rmsnorm", args=("x", "weight"), returns=("y",),
                   backward=backward)
    original = kernels.norm
    precision = "inputs=bf16,weights=bf16,streams=bf16,mixes=bf16,intermediates=bf16"
    path = tmp_path / "c.h5"
    if backward:
        with pytest.raises(ValueError, match=r"site 'norm': .*rmsnorm_backward.*intermediates"):
            with mt.capture(path, [site], config={"dim": 8}, precision=precision):
                pytest.fail("the capture started")
        assert kernels.norm is original and not path.exists()
    else:
        with mt.capture(path, [site], config={"dim": 8}, precision=precision):
            kernels.norm(torch.ones(2, 8), torch.ones(8))
        assert kernels.norm is original and path.exists()


def test_a_module_site_records_the_params_its_module_holds(tmp_path):
    """A module's weight is not an argument of its forward: Site.params names it, and each call
    records its value then (the second call's after the weight changed). Without it the capture
    ends with an error that says how; a name the op lacks is refused at the start."""
    torch = pytest.importorskip("torch")

    import mhc_verify.torch as mt

    class Norm(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, d))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-20))

    norm, x = Norm(8), torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    site = dict(op="rmsnorm", args=("x",), returns=("y",))
    path = tmp_path / "held.h5"
    with torch.no_grad(), mt.capture(path, [mt.Site(norm, "forward", params={"weight": "weight"},
                                                    **site)], config={"dim": 8}):
        norm(x)
        norm.weight.mul_(2)
        norm(x)
    results = mhc_verify.judge_file(path)
    assert [r.passed for r in results] == [True, True]
    with h5py.File(path) as f:
        w = [f["cases"][name]["params/weight"][()] for name in sorted(f["cases"])]
    assert len(w) == 2 and np.allclose(w[1], 2 * w[0])
    with pytest.raises(ValueError, match=r"params\['weight'\]: missing.*params=\{'weight'"):
        with torch.no_grad(), mt.capture(tmp_path / "m.h5", [mt.Site(norm, "forward", **site)],
                                         config={"dim": 8}):
            norm(x)
    with pytest.raises(ValueError, match=r"site 'forward': params \['gain'\] are not params"):
        with mt.capture(tmp_path / "g.h5", [mt.Site(norm, "forward", params={"gain": "weight"},
                                                    **site)], config={"dim": 8}):
            pass


def _boundary_autograd(torch, d, seed, post_factor=2.0):
    """The boundary in torch float32 from the seeds' formulas, and its autograd gradients for
    random upstream gradients of every output: the program a training step records."""
    n, iters, eps, norm_eps, T, M = 4, 20, 1e-6, 1e-20, 8, 24
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g)
    ins = dict(f=rnd(T, d), residual=rnd(T, n, d) * 10.0 ** (seed % 3),
               post=2 * torch.sigmoid(rnd(T, n)), comb=torch.softmax(3 * rnd(T, n, n), -1),
               pre_mix=torch.sigmoid(rnd(T, n)) + eps)
    params = dict(hc_fn=rnd(M, n * d) / (n * d) ** 0.5,
                  hc_scale=torch.rand(3, generator=g) + 0.5, hc_base=rnd(M))
    L = {k: v.clone().requires_grad_() for k, v in {**ins, **params}.items()}
    x = L["post"].unsqueeze(-1) * L["f"].unsqueeze(-2) + torch.sum(
        L["comb"].unsqueeze(-1) * L["residual"].unsqueeze(-2), dim=1)
    flat = x.flatten(1)
    mixes = torch.nn.functional.linear(flat, L["hc_fn"]) * torch.rsqrt(
        flat.square().mean(-1, keepdim=True) + norm_eps)
    s, b = L["hc_scale"], L["hc_base"]
    pre = torch.sigmoid(mixes[:, :n] * s[0] + b[:n]) + eps
    post = post_factor * torch.sigmoid(mixes[:, n:2 * n] * s[1] + b[n:2 * n])
    c = (mixes[:, 2 * n:] * s[2] + b[2 * n:]).view(T, n, n).softmax(-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    y = torch.sum(L["pre_mix"].unsqueeze(-1) * x, dim=1)
    outs = dict(x=x, mixes=mixes, pre=pre, post=post, comb=c, y=y)
    ups = {k: rnd(*v.shape) for k, v in outs.items()}
    grads = torch.autograd.grad(list(outs.values()), list(L.values()), list(ups.values()))
    inputs = {**ins, **{"upstream_" + k: v for k, v in ups.items()}}
    return inputs, params, {"grad_" + k: v for k, v in zip(L, grads)}


@pytest.mark.parametrize("d", [16, 5120])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_float32_autograd_of_the_boundary_passes(d, seed):
    """What torch's float32 autograd computes for the boundary (the recorded backward: partials
    rounded, every consumer's gradient accumulated) lies within the composed bounds, at the V4.1
    width too; the same with post's factor 2 dropped from forward and backward fails on the
    gradients it reaches."""
    torch = pytest.importorskip("torch")
    inputs, params, grads = _boundary_autograd(torch, d, seed)
    r = mhc_verify.judge("boundary_backward", {"n": 4, "d": d}, inputs, grads, params,
                         save_dir=None)
    assert r.passed, r.message()
    inputs, params, grads = _boundary_autograd(torch, d, seed, post_factor=1.0)
    assert not mhc_verify.judge("boundary_backward", {"n": 4, "d": d}, inputs, grads, params,
                                save_dir=None, diagnose=False).passed


def test_compare_judges_the_cases_after_one_too_large(capture, tmp_path):
    """A case beyond --case-operations is refused before it runs, as its own invalid entry; the
    smaller case after it is judged (they need about 9e5 and 5e3 operations to judge)."""
    path = tmp_path / "sizes.h5"
    mhc_verify.write_capture(path, {"0.big": case(capture, "pre", "--dim", "512", "--tokens", "64"),
                                    "1.small": case(capture, "pre")})
    p = subprocess.run([BIN, "compare", "--case-operations", "1e5", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "case '0.big': too large to judge" in p.stderr and "--case-operations" in p.stderr
    assert f"PASS {path}[1.small]" in p.stdout, p.stdout
    assert "compare: INVALID (2 cases: 1 pass, 0 fail, 1 invalid, 0 undecided" in p.stdout, p.stdout


def test_compare_refuses_a_case_with_no_outputs(capture, tmp_path):
    """A case with nothing to judge would pass vacuously: compare names it, counts it invalid
    (not failed) and exits 2; the other cases of the file are still judged."""
    path = tmp_path / "empty.h5"
    mhc_verify.write_capture(path, {"0.pre": case(capture, "pre"), "1.pre": case(capture, "pre")})
    with h5py.File(path, "r+") as f:  # the writers refuse this; another tool may not
        found = []
        f.visit(lambda name: found.append(name) if name.endswith("1.pre/outputs/y") else None)
        assert len(found) == 1
        del f[found[0]]
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--case 1.pre: no outputs to judge" in p.stderr and "/outputs/{y}" in p.stderr
    assert "compare: INVALID (2 cases: 1 pass, 0 fail, 1 invalid, 0 undecided" in p.stdout, p.stdout
