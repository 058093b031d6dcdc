"""mhc_verify.judge and assert_faithful on every op: faithful outputs pass, plausible wrong ones
fail with a report that names the stage, the worst element, the diagnosis and a REPRO line that
reruns the case."""
import os
import subprocess

import h5py
import numpy as np
import pytest

import mhc_verify
from conftest import BIN

SMALL = ["--dim", "16", "--tokens", "3"]
BLOCK = ["--dim", "16", "--tokens", "3", "--heads", "2", "--head-dim", "4", "--experts", "4",
         "--inter", "8"]
CASES = {
    "split_sinkhorn": SMALL, "mixes": SMALL, "pre": SMALL, "post": SMALL, "rmsnorm": SMALL,
    "boundary": SMALL, "block": BLOCK, "stack": BLOCK + ["--layers", "2"],
}
CASES.update({op + "_backward": ["--dim", "4", "--tokens", "3"]
              for op in ["split_sinkhorn", "mixes", "pre", "post", "rmsnorm", "boundary"]})
CASES.update({"block_backward": BLOCK, "stack_backward": BLOCK + ["--layers", "2"]})


def test_every_op_of_the_cli_is_covered():
    assert sorted(mhc_verify.ops()) == sorted(CASES)


@pytest.mark.parametrize("op", sorted(CASES))
def test_faithful_outputs_pass(capture, op, tmp_path):
    config, inputs, params, outputs = capture(op, *CASES[op])
    r = mhc_verify.assert_faithful(op, config, inputs, outputs, params, save_dir=str(tmp_path))
    assert r.passed and r.state == "pass" and not r.repro
    judged = [s for s in r.stages if s.state == "pass"]
    end_to_end = [s.stage for s in judged if not s.stage.startswith("anchored.")]
    assert len(end_to_end) == len(outputs)  # every output given, and only those
    # The split judged again from the kernel's own mixes (docs/semantics.md, "Anchored stages").
    anchored = {"pre", "post", "comb"} & set(outputs) if "mixes" in outputs else set()
    assert {s.stage for s in judged} - set(end_to_end) == {"anchored." + n for n in anchored}
    assert all(s.ratio_max <= 1 for s in judged)
    assert not os.listdir(tmp_path)  # nothing saved for a pass


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_perturbed_output_fails_with_a_report(capture, op, tmp_path):
    config, inputs, params, outputs = capture(op, *CASES[op])
    name = sorted(outputs)[0]
    wrong = outputs[name].copy()
    wrong.reshape(-1)[0] = wrong.reshape(-1)[0] * 1.01 + 0.01  # one element, 1% off
    outputs[name] = wrong
    with pytest.raises(AssertionError) as e:
        mhc_verify.assert_faithful(op, config, inputs, outputs, params, save_dir=str(tmp_path))
    text = str(e.value)
    assert "FAIL" in text and "worst element:" in text and "+-" in text
    assert "REPRO: mhc-verify compare " in text
    # The REPRO line reruns the same case from the saved fixture, and fails there too.
    repro = text.split("REPRO: ")[1].splitlines()[0].split()
    p = subprocess.run([BIN] + repro[1:], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr


def test_cases_that_differ_only_in_config_precision_or_dtype_are_saved_apart(capture, tmp_path):
    # Each saved file reruns its own case: the name covers what the verdict depends on.
    config, inputs, params, outputs = capture("rmsnorm", *SMALL)
    wrong = {"y": outputs["y"] * np.float32(1.05)}
    other_eps = dict(config, norm_eps=1e-6)
    judged = [mhc_verify.judge("rmsnorm", c, inputs, o, params, precision=p, save_dir=str(tmp_path))
              for c, o, p in [(config, wrong, "fp32"), (other_eps, wrong, "fp32"),
                              (config, wrong, "bf16"),
                              (config, {"y": wrong["y"].astype(np.float16)}, "fp32")]]
    assert all(not r.passed for r in judged)
    assert len({r.saved for r in judged}) == len(judged) == len(os.listdir(tmp_path))
    for r in judged:
        [again] = mhc_verify.judge_file(r.saved)
        assert again.precision == r.precision
        assert [s.ratio_max for s in again.stages] == [s.ratio_max for s in r.stages]


def test_nested_lists_are_judged_as_the_arrays_they_hold(capture):
    config, inputs, params, outputs = capture("pre", *SMALL)
    as_arrays = mhc_verify.judge("pre", config, inputs, outputs, params, save_dir=None)
    as_lists = mhc_verify.judge("pre", config, {k: v.tolist() for k, v in inputs.items()},
                                {k: v.tolist() for k, v in outputs.items()}, params, save_dir=None)
    assert as_arrays.passed and as_lists.passed
    assert [s.ratio_max for s in as_lists.stages] == [s.ratio_max for s in as_arrays.stages]


def test_a_failure_names_its_count_once_and_the_worst_element_by_flat_index(capture):
    config, inputs, params, outputs = capture("pre", *SMALL)
    wrong = outputs["y"].copy()
    wrong.reshape(-1)[5] += 1
    r = mhc_verify.judge("pre", config, inputs, {"y": wrong}, params, save_dir=None)
    text = r.message()
    assert text.count("1 of 48 elements fail") == 1
    assert "worst element: y.flat[5] (token 0)" in text


def test_text_with_a_null_byte_is_refused_whole(capture, tmp_path):
    config, inputs, params, outputs = capture("pre", *SMALL)
    with pytest.raises(ValueError, match=r"path: 'a\\x00b' holds a null byte"):
        mhc_verify.judge_file("a\0b")
    with pytest.raises(ValueError, match=r"save_dir: .* holds a null byte"):
        mhc_verify.judge("pre", config, inputs, outputs, params, save_dir=str(tmp_path) + "/a\0b")
    with pytest.raises(ValueError, match=r"a case's name: 'a\\x00b' holds a null byte"):
        mhc_verify.write_capture(tmp_path / "c.h5", {"a\0b": dict(op="pre", config=config,
                                                                  inputs=inputs, outputs=outputs)})
    assert not os.listdir(tmp_path)


def test_a_save_dir_that_is_a_file_is_refused_before_judging(capture, tmp_path):
    config, inputs, params, outputs = capture("pre", *SMALL)
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=r"save_dir: '.*/f' is not a directory"):
        mhc_verify.judge("pre", config, inputs, outputs, params, save_dir=str(tmp_path / "f"))


def test_a_planted_eps_bug_is_diagnosed(tmp_path):
    # The softmax eps inside the division: the outputs come from our own mutant kernel.
    case = tmp_path / "bug.h5"
    subprocess.run([BIN, "capture", "--kernel", "mutant:softmax_eps_inside", "--op",
                    "split_sinkhorn", "--n", "3", "--hc-eps", "0.01", "--out", str(case)],
                   check=True, capture_output=True)
    import h5py
    with h5py.File(case) as f:
        config = {k: v.item() for k, v in f["config"].attrs.items()}
        inputs = {"mixes": f["inputs/mixes"][()]}
        params = {k: f["params"][k][()] for k in f["params"]}
        outputs = {k: f["outputs"][k][()] for k in f["outputs"]}
    r = mhc_verify.judge("split_sinkhorn", config, inputs, outputs, params, save_dir=None)
    assert not r.passed and r.first_divergent in ("pre", "post", "comb")
    assert "softmax_eps_in_sum" in r.diagnosis and not r.repro  # save_dir=None: nothing saved


def test_params_an_output_does_not_read_may_be_omitted(capture):
    config, inputs, params, outputs = capture("mixes", *SMALL)
    r = mhc_verify.judge("mixes", config, inputs, {"mixes": outputs["mixes"]},
                         {"hc_fn": params["hc_fn"]}, save_dir=None)
    assert r.passed and sorted(r.zero_params) == ["hc_base", "hc_scale"]
    with pytest.raises(ValueError, match=r"params\['hc_scale'\]: missing"):
        mhc_verify.judge("mixes", config, inputs, {"pre": outputs["pre"]},
                         {"hc_fn": params["hc_fn"]}, save_dir=None)


def test_layouts_accept_leading_dimensions_and_any_strides(capture):
    config, inputs, params, outputs = capture("pre", *SMALL)
    # [3 tokens] as [1, 3], and x through a transposed view (not contiguous)
    x = np.asfortranarray(inputs["x"])[None]
    assert not x.flags.c_contiguous
    r = mhc_verify.judge("pre", config, {"x": x, "pre_mix": inputs["pre_mix"][None]},
                         {"y": outputs["y"][None]}, save_dir=None)
    assert r.passed and r.tokens == 3


def test_sparse_tensors_are_their_values_and_meta_tensors_are_named(capture):
    torch = pytest.importorskip("torch")
    config, inputs, params, outputs = capture("pre", *SMALL)
    y = torch.from_numpy(outputs["y"])
    r = mhc_verify.judge("pre", config, inputs, {"y": y.to_sparse()}, save_dir=None)
    assert r.passed
    with pytest.raises(TypeError, match=r"outputs\['y'\]: a tensor on the meta device"):
        mhc_verify.judge("pre", config, inputs, {"y": y.to("meta")}, save_dir=None)


@pytest.mark.parametrize("change, message", [
    (lambda i, o, p: i.__setitem__("x", i["x"][:, :2]), r"inputs\['x'\]: shape \(3, 2, 16\), expected \(\.\.\., 4, 16\)"),
    (lambda i, o, p: i.pop("pre_mix"), r"inputs\['pre_mix'\]: missing"),
    (lambda i, o, p: i.__setitem__("w", i["x"]), r"inputs\['w'\]: op pre has no such inputs"),
    (lambda i, o, p: p.__setitem__("weight", i["x"]),
     r"params\['weight'\]: op pre has no such params \(it takes none\)"),
    (lambda i, o, p: o.__setitem__("z", o["y"]), r"outputs\['z'\]: op pre has no such output"),
    (lambda i, o, p: o.__setitem__("y", o["y"][:2]), r"outputs\['y'\]: 2 tokens, but inputs\['x'\] has 3"),
    (lambda i, o, p: i.__setitem__("x", i["x"].astype(np.int32)), r"dtype int32, expected floating"),
    (lambda i, o, p: o.clear(), r"outputs: none given"),
    (lambda i, o, p: i.clear(), r"inputs\['x'\]: missing"),
])
def test_bad_inputs_are_errors_naming_the_tensor(capture, change, message):
    config, inputs, params, outputs = capture("pre", *SMALL)
    change(inputs, outputs, params)
    with pytest.raises((ValueError, TypeError), match=message):
        mhc_verify.judge("pre", config, inputs, outputs, params, save_dir=None)


def test_nan_and_inf_inputs_are_data_judged_as_from_a_fixture(capture, tmp_path):
    # As in a fixture: a NaN input is judged (a kernel that hides it behind a number fails), an
    # infinite one gives an infinite bound (undecidable, never failed).
    config, inputs, params, outputs = capture("pre", *SMALL)
    inputs["x"][0, 0, 0] = np.nan  # y[0, 0] = sum_k pre_mix[0, k] x[0, k, 0] is NaN
    hidden = mhc_verify.judge("pre", config, inputs, outputs, params, save_dir=str(tmp_path))
    assert hidden.state == "fail" and [s.rule for s in hidden.stages] == ["nan_agrees"]
    repro = hidden.repro.split()  # the saved fixture fails through the CLI too
    p = subprocess.run([BIN] + repro[1:], capture_output=True, text=True)
    assert p.returncode == 1 and "first divergent stage y" in p.stdout, p.stdout + p.stderr
    propagated = {"y": outputs["y"].copy()}
    propagated["y"][0, 0] = np.nan
    r = mhc_verify.judge("pre", config, inputs, propagated, params, save_dir=None)
    assert r.passed and r.state == "pass"
    inputs["x"][0, 0, 0] = np.inf
    propagated["y"][0, 0] = np.inf
    r = mhc_verify.judge("pre", config, inputs, propagated, params, save_dir=None)
    assert r.state == "undecidable" and [s.rule for s in r.stages] == ["unbounded"]


def test_config_errors(capture):
    config, inputs, params, outputs = capture("pre", *SMALL)
    with pytest.raises(ValueError, match=r"config\['hc_multt'\]: unknown"):
        mhc_verify.judge("pre", {**config, "hc_multt": 4}, inputs, outputs, save_dir=None)
    with pytest.raises(ValueError, match="unknown op"):
        mhc_verify.judge("prex", config, inputs, outputs, save_dir=None)


@pytest.mark.parametrize("key, value, error, message", [
    ("hc_mult", "4", TypeError, r"config\['hc_mult'\]: expected an integer, got str"),
    ("hc_mult", 4.5, TypeError, r"config\['hc_mult'\]: expected an integer, got float"),
    ("hc_mult", True, TypeError, r"config\['hc_mult'\]: expected an integer, got a bool"),
    ("dim", 2 ** 70, ValueError, r"config\['dim'\]: 1180591620717411303424 is out of range"),
    ("hc_eps", "1e-6", TypeError, r"config\['hc_eps'\]: expected a number, got str"),
    ("hc_eps", None, TypeError, r"config\['hc_eps'\]: expected a number, got NoneType"),
])
def test_config_values_of_the_wrong_type_name_their_key(key, value, error, message):
    # pybind11's own cast error was an OSError naming no key ("Unable to cast Python instance").
    with pytest.raises(error, match=message):
        mhc_verify.layout("pre", {key: value})


@pytest.mark.parametrize("options, error, message", [
    ({"threads": -1}, ValueError, r"threads: -1 is not in \[0, 2\*\*32\)"),
    ({"threads": 1.5}, TypeError, r"threads: expected an int \(0: every core\), got float"),
    ({"threads": True}, TypeError, r"threads: expected an int \(0: every core\), got bool"),
    ({"precision": "\ud800"}, ValueError, r"precision: '\\ud800' is not valid text"),
    ({"error_model": 3}, TypeError, r"error_model: expected a str, got int"),
    ({"save_dir": "a\ud800b"}, ValueError, r"save_dir: 'a\\ud800b' is not valid text"),
    ({"diagnose": "no"}, TypeError, r"diagnose: expected True or False, got 'no'"),
])
def test_arguments_of_the_wrong_kind_are_named(capture, options, error, message):
    # pybind11's own error was "incompatible function arguments", naming no argument.
    config, inputs, params, outputs = capture("pre", *SMALL)
    with pytest.raises(error, match=message):
        mhc_verify.judge("pre", config, inputs, outputs, params, **options)


@pytest.mark.parametrize("args, message", [
    (("\ud800",), r"path: '\\ud800' is not valid text"),
    (("x.h5", ["ok", "\ud800"]), r"cases\[1\]: '\\ud800' is not valid text"),
])
def test_judge_file_names_its_argument_of_the_wrong_kind(args, message):
    with pytest.raises(ValueError, match=message):
        mhc_verify.judge_file(*args)


def test_judge_file_refuses_cases_it_cannot_find(capture, tmp_path):
    """A case name the file does not hold, or one name given as a str, would judge nothing: an
    empty list, which `all(...)` passes. Errors instead, as compare --case exits 2."""
    path = tmp_path / "two.h5"
    mhc_verify.write_capture(path, {n: {"op": "pre", "config": c, "inputs": i, "params": p,
                                        "outputs": o}
                                    for n, (c, i, p, o) in
                                    [("c1", capture("pre", *SMALL)), ("c2", capture("pre", *SMALL))]})
    assert [r.name for r in mhc_verify.judge_file(path, ["c2"])] == ["c2"]
    with pytest.raises(ValueError, match=r"no such case: 'zz'"):
        mhc_verify.judge_file(path, ["c1", "zz"])
    with pytest.raises(TypeError, match=r"cases: a list of case names, not one str \('c1'\)"):
        mhc_verify.judge_file(path, "c1")


def test_config_takes_numpy_scalars():
    l = mhc_verify.layout("pre", {"hc_mult": np.int64(2), "dim": np.int32(8),
                                  "hc_eps": np.float32(1e-6)})
    assert l["inputs"]["x"] == (2, 8)


def test_the_gil_is_released_while_judging(capture):
    # Another Python thread keeps running while a judgement works in C++: the longest pause it sees
    # is a small part of the judgement's time (holding the GIL, the call would pause it throughout).
    import threading
    import time
    config, inputs, params, outputs = capture("mixes", "--dim", "2048", "--tokens", "1024")
    took = []

    def work():
        t = time.perf_counter()
        assert mhc_verify.judge("mixes", config, inputs, outputs, params, save_dir=None).passed
        took.append(time.perf_counter() - t)

    worker = threading.Thread(target=work)
    last, pause = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():
        now = time.perf_counter()
        pause, last = max(pause, now - last), now
    worker.join()
    assert took and took[0] > 0.1  # long enough to see the difference
    assert pause < took[0] / 2, (pause, took[0])


def test_too_large_is_refused_before_judging():
    with pytest.raises(ValueError, match=r"--case-memory"):
        x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (300000, 4, 5120), (0, 0, 0))
        mhc_verify.judge("mixes", {}, {"x": x}, {"mixes": np.zeros((300000, 24), np.float32)},
                         save_dir=None)


@pytest.mark.parametrize("where", ["later input", "output", "param"])
def test_a_broadcast_view_past_the_limits_is_refused_before_copying(where):
    # Views that claim 2^27 tokens of zero bytes: only the first input used to be measured, and
    # the rest were copied (16 GiB) before their shapes were checked.
    def huge(*trailing):
        return np.broadcast_to(np.float32(0), (1 << 27,) + trailing)
    T, config = 4, {"dim": 16}
    inputs = {"f": np.zeros((T, 16), np.float32), "residual": np.zeros((T, 4, 16), np.float32),
              "post": np.zeros((T, 4), np.float32), "comb": np.zeros((T, 4, 4), np.float32)}
    outputs, params, op = {"y": np.zeros((T, 4, 16), np.float32)}, None, "post"
    if where == "later input":
        inputs["comb"], match = huge(4, 4), r"--case-memory"
    elif where == "output":
        outputs["y"], match = huge(4, 16), r"outputs\['y'\]: 8589934592 elements, more than 4 tokens"
    else:
        op, inputs = "mixes", {"x": np.zeros((T, 4, 16), np.float32)}
        outputs = {"mixes": np.zeros((T, 24), np.float32)}
        params, match = {"hc_fn": huge(24, 64)}, r"params\['hc_fn'\]: .* elements, more than 4"
    with pytest.raises(ValueError, match=match):
        mhc_verify.judge(op, config, inputs, outputs, params, save_dir=None)


def test_layout_lists_names_and_shapes():
    l = mhc_verify.layout("boundary", {"dim": 8})
    assert l["inputs"]["residual"] == (4, 8) and l["params"]["hc_fn"] == (24, 32)
    assert list(l["outputs"]) == ["x", "mixes", "pre", "post", "comb", "y"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["pre", "split_sinkhorn", "mixes", "boundary"])
def test_narrow_outputs_carry_their_rounding(capture, op, dtype):
    """Right outputs handed over rounded to bf16 or fp16 pass: their bounds carry the rounding, and
    the second tier, a model of fp32 noise, does not judge them (the rounding dwarfs it)."""
    torch = pytest.importorskip("torch")
    config, inputs, params, outputs = capture(op, *SMALL)
    narrow = {k: torch.from_numpy(v).to(getattr(torch, dtype)) for k, v in outputs.items()}
    r = mhc_verify.judge(op, config, inputs, narrow, params, save_dir=None)
    assert r.passed, r.message()
    # the same values given as float32 claim fp32 storage: the rounding is then an error
    wide = {k: v.float() for k, v in narrow.items()}
    r32 = mhc_verify.judge(op, config, inputs, wide, params, save_dir=None)
    assert not r32.passed
    if dtype == "float16":  # numpy's float16 says the same
        as_numpy = {k: v.numpy() for k, v in narrow.items()}
        r16 = mhc_verify.judge(op, config, inputs, as_numpy, params, save_dir=None)
        assert r16.passed


@pytest.mark.parametrize("stage", ["x", "mixes"])
def test_a_stage_others_are_anchored_on_may_be_handed_over_narrow(capture, stage):
    """The boundary's mixes are modelled from the kernel's x, its split from the kernel's mixes:
    that stage alone handed over in fp16 (its values then not those the kernel went on with) takes
    those models away, and the right outputs pass."""
    torch = pytest.importorskip("torch")
    config, inputs, params, outputs = capture("boundary", *SMALL)
    given = dict(outputs, **{stage: torch.from_numpy(outputs[stage]).half()})
    r = mhc_verify.judge("boundary", config, inputs, given, params, save_dir=None)
    assert r.passed, r.message()


@pytest.mark.parametrize("op", ["pre", "post"])
def test_a_declared_bf16_output_is_rounded_once(capture, op):
    # Under the bf16 declaration a stream output's rounding to bf16 is in its bound already: the
    # values given as a bf16 tensor are judged exactly as given as float32, not with a second
    # rounding on top. So a kernel that truncates to bf16 (an error of up to an ulp, where
    # rounding to nearest is within half of one) fails in either container.
    torch = pytest.importorskip("torch")
    config, inputs, params, _ = capture(op, "--dim", "256", "--tokens", "4", "--precision", "bf16")
    if op == "pre":  # y[c] = sum_k pre_mix[k] x[k, c] (docs/semantics.md, "hc_pre")
        exact = np.einsum("tk,tkc->tc", inputs["pre_mix"].astype(np.float64), inputs["x"])
    else:  # Y[k, c] = post[k] F[c] + sum_j C[j, k] R[j, c] ("hc_post")
        exact = (inputs["post"].astype(np.float64)[:, :, None] * inputs["f"][:, None, :] +
                 np.einsum("tjk,tjc->tkc", inputs["comb"].astype(np.float64), inputs["residual"]))
    nearest = torch.from_numpy(exact).bfloat16()
    cut = torch.from_numpy((exact.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32))
    assert (cut != nearest.float()).any()

    def judged(value):
        return mhc_verify.judge(op, config, inputs, {"y": value}, params, precision="bf16",
                                save_dir=None)
    near16, near32 = judged(nearest), judged(nearest.float())
    assert near16.passed and near32.passed
    assert near16.stage("y").ratio_max == near32.stage("y").ratio_max
    for value in (cut.bfloat16(), cut):
        r = judged(value)
        assert not r.passed and r.first_divergent == "y"


def test_a_second_tier_failure_is_not_explained_by_deviations_that_leave_it_alone(tmp_path):
    # A Sinkhorn in the log domain (exact in real arithmetic, every eps in place) loses accuracy on
    # the smallest entries: within the first tier's bounds, flagged by the second. The diagnosis
    # may name only deviations that change the comb; those of pre and post alone leave it as the
    # semantics compute it, so they explain nothing (they were named before).
    torch = pytest.importorskip("torch")
    n, T, M, eps = 8, 8, 80, float(np.float32(1e-6))
    torch.manual_seed(38)
    m = torch.randn(T, M) * 6
    L = m[:, 2 * n:].reshape(T, n, n)
    lc = torch.log(torch.exp(L - torch.logsumexp(L, -1, keepdim=True)) + eps)

    def step(lc, dim):
        return lc - torch.log(torch.exp(torch.logsumexp(lc, dim, keepdim=True)) + eps)
    lc = step(lc, -2)
    for _ in range(19):
        lc = step(step(lc, -1), -2)
    r = mhc_verify.judge("split_sinkhorn", {"hc_mult": n, "hc_eps": eps}, {"mixes": m},
                         {"comb": torch.exp(lc)}, {"hc_scale": torch.ones(3),
                                                   "hc_base": torch.zeros(M)}, save_dir=None)
    comb = r.stage("comb")
    assert comb.state == "fail" and comb.ratio_max < 1 and comb.noise["state"] == "fail"
    # the message names the tier and its worst element, not the element nearest its bound
    w = comb.noise["worst"]
    assert "every element within its bound, the error flagged by the second tier" in r.message()
    assert f"comb.flat[{w.index}] (token {w.token})" in r.message() and f"z = {w.ratio:.3g}" in r.message()
    named = set(r.deviations)
    assert not named & {"post_without_factor2", "post_with_eps", "pre_without_eps"}, named
    # compare's line says the tier failed it, every ratio within its bound
    path = tmp_path / "log_domain.h5"
    mhc_verify.write_capture(path, {"c": {
        "op": "split_sinkhorn", "config": {"hc_mult": n, "hc_eps": eps}, "inputs": {"mixes": m},
        "outputs": {"comb": torch.exp(lc)},
        "params": {"hc_scale": torch.ones(3), "hc_base": torch.zeros(M)}}})
    p = subprocess.run([BIN, "compare", str(path)], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"first divergent stage comb (second tier: error {w.ratio:.3g} times its fp32 noise)" \
        in p.stdout, p.stdout


def test_fp16_datasets_in_a_file_carry_their_rounding(tmp_path):
    # a capture whose output y is rewritten as a float16 dataset is judged with fp16 storage;
    # the same values as float32 claim fp32 and fail
    path = tmp_path / "pre.h5"
    subprocess.run([BIN, "capture", "--op", "pre", "--out", str(path), *SMALL], check=True,
                   capture_output=True)
    with h5py.File(path, "r+") as f:
        y16 = f["outputs/y"][()].astype(np.float16)
        del f["outputs/y"]
        f.create_dataset("outputs/y", data=y16)
    [r] = mhc_verify.judge_file(str(path))
    assert r.passed
    with h5py.File(path, "r+") as f:
        del f["outputs/y"]
        f.create_dataset("outputs/y", data=y16.astype(np.float32))
    [r32] = mhc_verify.judge_file(str(path))
    assert not r32.passed and r32.first_divergent == "y"


def _tf32(a):
    """fp32 values rounded to tf32 (10 explicit mantissa bits), to nearest, ties to even."""
    b = a.numpy().astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~np.uint64(0x1FFF)
    import torch
    return torch.from_numpy(b.astype(np.uint32).view(np.float32))


def test_a_declared_precision_is_what_the_outputs_are_judged_by(capture):
    # mixes from bf16-rounded projection operands (fp32 sums, the RMS from the fp32 streams):
    # faithful to "bf16-projection" and to the same parts spelled out, not to fp32
    torch = pytest.importorskip("torch")
    config, inputs, params, _ = capture("mixes", *SMALL)
    x = torch.from_numpy(inputs["x"]).flatten(-2)
    w = torch.from_numpy(params["hc_fn"])
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + config["norm_eps"])
    m = torch.nn.functional.linear(x.bfloat16().float(), w.bfloat16().float()) * r
    for precision in ("bf16-projection", "products=bf16", "streams=fp32,products=bf16"):
        got = mhc_verify.judge("mixes", config, inputs, {"mixes": m}, params, precision=precision,
                               save_dir=None)
        assert got.passed and got.precision == "bf16-projection"
    as32 = mhc_verify.judge("mixes", config, inputs, {"mixes": m}, params, save_dir=None)
    assert not as32.passed and as32.first_divergent == "mixes"
    # ... and the diagnosis names the part: the products, as the declaration under which it passes
    # (bounds of lambda sqrt(n) of the operands' rounding accept bf16's error under tf32 too)
    assert "undeclared_products_bf16" in as32.deviations, as32.diagnosis
    assert all(d.startswith("undeclared_products_") for d in as32.deviations)
    assert "precision it does not declare" in as32.diagnosis
    # tf32 operands (TF32 matmuls left on): named too, and it passes when declared
    t = torch.nn.functional.linear(*(_tf32(a) for a in (x, w))) * r
    tf = mhc_verify.judge("mixes", config, inputs, {"mixes": t}, params, save_dir=None)
    assert not tf.passed and tf.deviations[0] == "undeclared_products_tf32", tf.diagnosis
    assert mhc_verify.judge("mixes", config, inputs, {"mixes": t}, params, precision="tf32",
                            save_dir=None).passed
    with pytest.raises(ValueError, match="accumulation.*is one of fp32, bf16"):
        mhc_verify.judge("mixes", config, inputs, {"mixes": m}, params,
                         precision="products=bf16,accumulation=fp16", save_dir=None)


def _eager(op, config, inputs, params, wrong=False):
    """op as PyTorch eager writes it on bf16 tensors: each operation's output is rounded to bf16,
    sums accumulate in fp32. `wrong`: with a plausible bug (the comb transposed, the streams'
    weights reversed, RMSNorm's mean over the tokens)."""
    import torch
    t = lambda a: torch.from_numpy(a).bfloat16()
    if op == "pre":
        p = t(inputs["pre_mix"])
        return {"y": ((p.flip(-1) if wrong else p)[..., None] * t(inputs["x"])).sum(-2)}
    if op == "post":
        comb = t(inputs["comb"])
        comb = comb.transpose(-1, -2) if wrong else comb
        return {"y": t(inputs["post"])[..., None] * t(inputs["f"])[:, None, :] +
                (comb[..., None] * t(inputs["residual"])[:, :, None, :]).sum(1)}
    x = t(inputs["x"]).float()  # the common RMSNorm: statistic in fp32, normalised value cast
    r = torch.rsqrt(x.square().mean(0 if wrong else -1, keepdim=True) + config["norm_eps"])
    return {"y": t(params["weight"]) * (x * r).bfloat16()}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("op", ["pre", "post", "rmsnorm"])
def test_eager_bf16_is_faithful_to_rounded_intermediates(capture, op, seed):
    # Eager rounds each product of hc_pre and hc_post, and RMSNorm's normalised value before the
    # weight: more than the output's own rounding where a sum cancels or two roundings meet. No
    # declaration of storage alone admits that (the ratios reach 5000 in pre and post, 1.8 in
    # RMSNorm); "intermediates=bf16" does, and a wrong kernel written the same way still fails.
    config, inputs, params, _ = capture(op, "--dim", "512", "--tokens", "8", "--precision", "bf16",
                                        "--seed", str(seed))
    held = "inputs=bf16," + ("weights=bf16," if op == "rmsnorm" else "coefficients=bf16,")
    storage = held + "streams=bf16"
    # in the parts' order: inputs, weights, mixes, coefficients, streams, ..., intermediates
    eager = ("inputs=bf16,weights=bf16,mixes=bf16," if op == "rmsnorm" else
             "inputs=bf16,mixes=bf16,coefficients=bf16,") + "streams=bf16,intermediates=bf16"
    right, wrong = _eager(op, config, inputs, params), _eager(op, config, inputs, params, True)
    judged = lambda out, precision: mhc_verify.judge(op, config, inputs, out, params,
                                                     precision=precision, save_dir=None)
    ok = judged(right, eager)
    assert ok.passed and ok.precision == eager, ok.message()
    assert not judged(right, storage).passed
    assert not judged(wrong, eager).passed


def _split_torch(m, s, b, n, eps, softmax, iters=20):
    """hc_split_sinkhorn in torch; softmax "exp": exp(l - max) / sum, whose autograd runs through
    the max subtraction too; "softmax": torch.softmax, whose backward is p (g - sum g p)."""
    import torch
    pre = torch.sigmoid(m[:, :n] * s[0] + b[:n]) + eps
    post = 2 * torch.sigmoid(m[:, n:2 * n] * s[1] + b[n:2 * n])
    logits = (m[:, 2 * n:] * s[2] + b[2 * n:]).reshape(-1, n, n)
    if softmax == "exp":
        e = torch.exp(logits - logits.amax(-1, keepdim=True))
        comb = e / e.sum(-1, keepdim=True) + eps
    else:
        comb = torch.softmax(logits, -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("softmax", ["exp", "softmax"])
@pytest.mark.parametrize("seed", range(40))
def test_split_backward_of_saturated_rows_passes_in_both_forms(seed, softmax, dtype):
    # Mixes spread 30 saturate softmax rows: the largest p rounds to 1. An autograd through the max
    # subtraction keeps that entry's gradient, sum over the others of (g_i - g_k) p_k (about 1e-22
    # here), which p (g - sum g p) loses; a float64 one rounded to float32 is then exact. The second
    # tier's value lost it too and flagged these exact kernels (z up to 6e7) while passing the
    # lossy form; both forms pass now.
    torch = pytest.importorskip("torch")
    n, T = 8, 4
    rng = np.random.default_rng(seed)
    mixes = (rng.standard_normal((T, (2 + n) * n)) * 30).astype(np.float32)
    scale = rng.uniform(0.5, 2, 3).astype(np.float32)
    base = (rng.standard_normal((2 + n) * n) * 0.5).astype(np.float32)
    up = {"upstream_pre": rng.uniform(-1, 1, (T, n)), "upstream_post": rng.uniform(-1, 1, (T, n)),
          "upstream_comb": rng.uniform(-1, 1, (T, n, n))}
    up = {k: v.astype(np.float32) for k, v in up.items()}
    eps = float(np.float32(1e-6))
    dt = getattr(torch, dtype)
    m, s, b = (torch.tensor(a, dtype=dt, requires_grad=True) for a in (mixes, scale, base))
    outs = _split_torch(m, s, b, n, eps, softmax)
    sum((o * torch.tensor(up[k], dtype=dt)).sum()
        for o, k in zip(outs, ["upstream_pre", "upstream_post", "upstream_comb"])).backward()
    got = {"grad_mixes": m.grad.float(), "grad_hc_scale": s.grad.float(),
           "grad_hc_base": b.grad.float()}
    r = mhc_verify.judge("split_sinkhorn_backward", {"n": n, "dim": 8, "hc_eps": eps},
                         {"mixes": mixes, **up}, got, {"hc_scale": scale, "hc_base": base},
                         save_dir=None)
    assert r.passed, r.message()


@pytest.mark.parametrize("op,precision,stages", [("pre", "bf16", ["y"]),
                                                 ("split_sinkhorn", "coefficients=bf16",
                                                  ["pre", "post", "comb"]),
                                                 ("mixes", "mixes=fp16", ["mixes"])])
def test_a_declared_narrower_storage_holds_only_that_formats_values(capture, op, precision, stages):
    # A declared storage widens the stage's bound by its rounding, so an fp32 kernel that declared
    # one passed with errors that rounding would hide (faithful outputs scaled by 1.001 passed as
    # bf16). Its values are not the format's: that fails the stage, whatever their distance.
    torch = pytest.importorskip("torch")
    config, inputs, params, outputs = capture(op, *SMALL)
    outputs = {k: outputs[k] for k in stages}
    judged = lambda out: mhc_verify.judge(op, config, inputs, out, params, precision=precision,
                                          save_dir=None)
    fmt = precision.split("=")[-1]
    r = judged(outputs)
    assert not r.passed and r.stage(stages[0]).rule == "stored_as_declared"
    assert (f"{stages[0]}.flat[0] = " in r.message() and
            f"is not a {fmt} value, though the declaration stores {stages[0]} in {fmt}" in r.message())
    dtype = torch.bfloat16 if fmt == "bf16" else torch.float16
    stored = {k: torch.from_numpy(v).to(dtype).float().numpy() for k, v in outputs.items()}
    assert judged(stored).passed


def _boundary_autograd(config, inputs, params, casts):
    """The boundary's backward by torch autograd on bf16 streams, fp32 math: the new streams x
    stored in bf16, read by hc_pre, the projection and the RMS statistic through the casts to fp32
    `casts` numbers ((0, 0, 0): one cast; (0, 1, 2): one each). Each cast's gradient is rounded to
    bf16, and x's gradient accumulates them in bf16."""
    import torch
    n, d, eps = config["hc_mult"], config["dim"], config["hc_eps"]
    t = lambda a, dt=torch.float32: torch.tensor(a).to(dt).requires_grad_()
    leaves = {k: t(inputs[k], torch.bfloat16 if k in ("f", "residual") else torch.float32)
              for k in ("f", "residual", "post", "comb", "pre_mix")}
    w = {k: t(v) for k, v in params.items()}
    f, R = leaves["f"].float(), leaves["residual"].float()
    xs = (leaves["post"][..., None] * f[:, None, :] +
          torch.einsum("tjk,tjc->tkc", leaves["comb"], R)).bfloat16()
    read = [xs.float() for _ in range(max(casts) + 1)]
    x_pre, x_proj, x_rms = (read[i] for i in casts)
    T = xs.shape[0]
    sq = x_rms.reshape(T, n * d)
    r = torch.rsqrt(sq.square().mean(-1) + config["norm_eps"])
    mixes = (x_proj.reshape(T, n * d) @ w["hc_fn"].T) * r[:, None]
    s, b = w["hc_scale"], w["hc_base"]
    pre = torch.sigmoid(mixes[:, :n] * s[0] + b[:n]) + eps
    post = 2 * torch.sigmoid(mixes[:, n:2 * n] * s[1] + b[n:2 * n])
    logits = (mixes[:, 2 * n:] * s[2] + b[2 * n:]).reshape(T, n, n)
    comb = torch.softmax(logits, -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(config["sinkhorn_iters"] - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    y = (leaves["pre_mix"][..., None] * x_pre).sum(1).bfloat16()
    outs = {"x": xs, "mixes": mixes, "pre": pre, "post": post, "comb": comb, "y": y}
    sum((o.float() * torch.tensor(inputs["upstream_" + k])).sum() for k, o in outs.items()).backward()
    grads = {**leaves, **w}
    return {"grad_" + k: v.grad for k, v in grads.items()}


@pytest.mark.parametrize("seed", range(1, 11))
@pytest.mark.parametrize("casts", [(0, 0, 0), (0, 1, 1), (0, 0, 1), (0, 1, 0), (0, 1, 2)])
def test_boundary_backward_by_autograd_on_bf16_streams(capture, seed, casts):
    # With a cast for each use of the stored streams, x's gradient gathers four shares each
    # rounded to bf16 (upstream, hc_pre's, the projection's and the RMS statistic's), summed in
    # bf16 in the graph's order. The second tier's compositions split the gradient at hc_pre's
    # share only: 3 of these 10 cases failed grad_post or grad_comb inside every bound with a
    # cast each, and 4 with either the projection or the RMS statistic sharing hc_pre's cast.
    pytest.importorskip("torch")
    config, inputs, params, _ = capture("boundary_backward", "--dim", "64", "--tokens", "4",
                                        "--precision", "bf16", "--seed", str(seed))
    got = _boundary_autograd(config, inputs, params, casts)
    r = mhc_verify.judge("boundary_backward", config, inputs, got, params, precision="bf16",
                         save_dir=None)
    assert r.passed, r.message()


def test_declared_storage_of_weights_is_the_values_judged(capture):
    # A kernel that stores hc_fn in bf16 computes from its bf16 values: faithful to
    # "weights=bf16" (the case holds hc_fn rounded as the declaration stores it), not to fp32.
    torch = pytest.importorskip("torch")
    config, inputs, params, _ = capture("mixes", *SMALL)
    x = torch.from_numpy(inputs["x"]).flatten(-2)
    w = torch.from_numpy(params["hc_fn"]).bfloat16().float()
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + config["norm_eps"])
    m = torch.nn.functional.linear(x, w) * r
    got = mhc_verify.judge("mixes", config, inputs, {"mixes": m}, params, precision="weights=bf16",
                           save_dir=None)
    assert got.passed and got.precision == "weights=bf16"
    as32 = mhc_verify.judge("mixes", config, inputs, {"mixes": m}, params, save_dir=None)
    assert not as32.passed and as32.first_divergent == "mixes"
    # ... and the diagnosis names the weights' storage
    assert as32.deviations == ["undeclared_weights_bf16"], as32.diagnosis


def _rmsnorm32(x, w, eps, order):
    """RMSNorm in float32 as kernels write it: the sum of squares in the order given, then
    w * (x * r), or w * (x / sqrt(...)) for "division"."""
    d = x.shape[-1]
    sq = x * x
    if order == "forward":
        s = np.zeros(x.shape[0], np.float32)
        for i in range(d):
            s += sq[:, i]
    elif order == "reverse":
        s = np.zeros(x.shape[0], np.float32)
        for i in reversed(range(d)):
            s += sq[:, i]
    else:  # numpy's own float32 sum (pairwise)
        s = sq.sum(-1, dtype=np.float32)
    q = (s / np.float32(d) + np.float32(eps))[:, None]
    if order == "division":
        return w * (x / np.sqrt(q))
    return w * (x * (np.float32(1) / np.sqrt(q)))


@pytest.mark.parametrize("order", ["forward", "reverse", "pairwise", "division"])
def test_an_rmsnorm_with_another_eps_fails_where_its_bounds_pass(order):
    # eps 1e-6 where 1e-20 is specified moves r by 1e-6 / (2 ms) relative: 93 u at an rms of 0.3,
    # inside the bound (about 8 sqrt(d) u) but 3.6 times r's rounding noise, shared by each token's
    # 5120 elements; over 64 tokens the second tier's root mean square sees it.
    rng = np.random.default_rng(7)
    T, d = 64, 5120
    x = (0.3 * rng.standard_normal((T, d))).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    config = {"dim": d}
    good = mhc_verify.judge("rmsnorm", config, {"x": x}, {"y": _rmsnorm32(x, w, 1e-20, order)},
                            {"weight": w}, save_dir=None)
    assert good.passed, good.stages[0].reason
    bad = mhc_verify.judge("rmsnorm", config, {"x": x}, {"y": _rmsnorm32(x, w, 1e-6, order)},
                           {"weight": w}, save_dir=None)
    y = bad.stage("y")
    assert not bad.passed and y.rule == "noise" and y.ratio_max <= 1
    assert "norm_eps_1e-6" in bad.diagnosis  # named by the diagnosis


def _dot_lanes(a, b, lanes, chunk=1, tree=True):
    """a . b over the last axis in fp32 as a SIMD, warp or block sum: lane l adds chunks of `chunk`
    contiguous terms l, l + lanes, ... (float4 loads: chunk 4), then the lanes' totals in a tree or
    in sequence."""
    p = (a * b).astype(np.float32)
    p = p.reshape(p.shape[:-1] + (-1, lanes, chunk))
    acc = np.zeros(p.shape[:-3] + (lanes,), np.float32)
    for r in range(p.shape[-3]):
        for c in range(chunk):
            acc = (acc + p[..., r, :, c]).astype(np.float32)
    if not tree:
        total = np.zeros(acc.shape[:-1], np.float32)
        for lane in range(lanes):
            total = (total + acc[..., lane]).astype(np.float32)
        return total
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        acc = (acc[..., :half] + acc[..., half:]).astype(np.float32)
    return acc[..., 0]


@pytest.mark.parametrize("data, lanes, chunk, tree", [
    ("outlier pair", 2, 1, True), ("outlier pair", 8, 1, True), ("outlier pair", 32, 1, True),
    ("signs of period 64", 64, 1, True), ("signs of period 64", 64, 1, False),
    ("signs of period 64", 32, 4, True)])
def test_a_dot_summed_in_lanes_passes_on_structured_data(data, lanes, chunk, tree):
    # Orders whose partial sums keep what a sequential sum cancels at once: two adjacent outlier
    # channels (1e4) whose products cancel ride their lanes to the end; products whose signs repeat
    # every 64 channels grow in every lane of 64, or of 32 float4 loads. With the sequential orders
    # alone in the model these were flagged: z 29, 10.9 and 6 (the pair at 2, 8 and 32 lanes);
    # with lanes of up to 32 single terms, 5.1, 16.2 and 12.6 (period 64 at 64 lanes in a tree, in
    # sequence, and 32 float4 lanes).
    T, n, d = 4, 4, 5120
    rng = np.random.default_rng(0)
    if data == "outlier pair":
        x = rng.standard_normal((T, n, d))
        g = rng.standard_normal((T, d))
        x[:, :, :2] = 1e4 * (1 + 0.01 * rng.standard_normal((T, n, 2)))
        g[:, 0] = 1 + 0.01 * rng.standard_normal(T)
        g[:, 1] = -g[:, 0] * (1 + 1e-3 * rng.standard_normal(T))
    else:
        sign = np.where(np.arange(d) % 64 < 32, 1.0, -1.0)
        x = sign * (1 + 0.5 * rng.random((T, n, d)))
        g = 1 + 0.5 * rng.random((T, d))
    inputs = {"x": x.astype(np.float32), "pre_mix": rng.uniform(0.2, 1, (T, n)).astype(np.float32),
              "upstream_y": g.astype(np.float32)}
    grads = {"grad_x": (inputs["pre_mix"][..., None] * inputs["upstream_y"][:, None, :]),
             "grad_pre_mix": _dot_lanes(inputs["x"], inputs["upstream_y"][:, None, :], lanes,
                                        chunk, tree)}
    r = mhc_verify.judge("pre_backward", {"n": n, "dim": d}, inputs, grads, save_dir=None)
    assert r.passed, r.stage("grad_pre_mix").reason


def _rmsnorm_backward(x, w, g, bug=None):
    """RMSNorm's gradient of x in fp32 through torch, the closed form, with one of four slips."""
    torch = pytest.importorskip("torch")
    d = x.shape[-1]
    xs = x.astype(np.float16).astype(np.float32) if bug == "r_from_fp16" else x
    x, w, g, xs = (torch.from_numpy(a) for a in (x, w, g, xs))
    ms = (xs * xs).mean(-1, keepdim=True)
    r = {"eps_outside_sqrt": lambda: 1 / (torch.sqrt(ms) + 1e-6),
         "eps_1e-6": lambda: torch.rsqrt(ms + 1e-6)}.get(bug, lambda: torch.rsqrt(ms + 1e-20))()
    mean_over = d - 1 if bug == "mean_over_d-1" else d
    return (r * w * g - (r ** 3 / mean_over) * x * (g * w * x).sum(-1, keepdim=True)).numpy()


@pytest.mark.parametrize("bug, rms", [(None, 0.3), (None, 1.0), ("eps_1e-6", 0.3),
                                      ("mean_over_d-1", 1.0), ("eps_outside_sqrt", 0.1),
                                      ("r_from_fp16", 1.0)])
def test_rmsnorm_backward_slips_fail_where_their_bounds_pass(bug, rms):
    # At d = 5120 the gradient's bounds sit far above fp32's noise: these slips err 20 to 90
    # times a faithful kernel and pass them; the second tier (r's and the dot's noise, shared by
    # the token's elements) fails them, and passes the faithful kernel.
    T, d = 16, 5120
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((T, d)) * rms).astype(np.float32)
    w = rng.uniform(0.5, 1.5, d).astype(np.float32)
    g = rng.standard_normal((T, d)).astype(np.float32)
    r = mhc_verify.judge("rmsnorm_backward", {"dim": d}, {"x": x, "upstream_y": g},
                         {"grad_x": _rmsnorm_backward(x, w, g, bug)}, {"weight": w}, save_dir=None)
    s = r.stage("grad_x")
    assert s.ratio_max < 1 and s.noise is not None
    assert r.passed == (bug is None), s.reason
    if bug:
        assert s.rule == "noise"


@pytest.mark.parametrize("stored, part", [("x", "inputs"), ("weight", "weights")])
def test_a_gradient_from_operands_read_as_bf16_is_diagnosed_as_that_storage(stored, part):
    # A backward that reads its saved activations (or the weight) as bf16 and is exact otherwise:
    # it fails as fp32, passes when the part is declared, and the diagnosis names the part.
    torch = pytest.importorskip("torch")
    T, d = 16, 5120
    rng = np.random.default_rng(3)
    x = (0.05 * rng.standard_normal((T, d))).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    g = rng.standard_normal((T, d)).astype(np.float32)
    bf16 = {"x": x, "weight": w}
    bf16[stored] = torch.from_numpy(bf16[stored]).bfloat16().float().numpy()
    grad_x = _rmsnorm_backward(bf16["x"].astype(np.float64), bf16["weight"].astype(np.float64),
                               g.astype(np.float64)).astype(np.float32)
    judge = lambda precision: mhc_verify.judge(
        "rmsnorm_backward", {"dim": d}, {"x": x, "upstream_y": g}, {"grad_x": grad_x},
        {"weight": w}, precision=precision, save_dir=None)
    r = judge("fp32")
    assert not r.passed and r.deviations == [f"undeclared_{part}_bf16"], r.diagnosis
    assert judge(f"{part}=bf16").passed
