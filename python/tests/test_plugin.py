"""The pytest plugin: the example folder run with --mhc-report gives one report with an entry per
judging test, its cases and their verdicts, in JSON (the CLI's schema), Markdown, HTML and JUnit."""
import json
import os
import subprocess
import sys
import textwrap
import xml.dom.minidom

import pytest

pytest.importorskip("torch")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run(tmp_path, bug):
    env = dict(os.environ, MHC_EXAMPLE_BUG="1" if bug else "0")
    report = tmp_path / "report"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                        "mhc_verify.pytest_plugin", "--mhc-report", str(report),
                        "--rootdir", EXAMPLES, EXAMPLES],  # node ids relative to the folder
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    return p, report


@pytest.mark.parametrize("bug", [False, True])
def test_report_of_a_pytest_run(tmp_path, bug):
    p, report = run(tmp_path, bug)
    assert p.returncode == (1 if bug else 0), p.stdout + p.stderr
    r = json.loads((report / "report.json").read_text())
    assert r["complete"] and r["exit_code"] == (1 if bug else 0)
    ids = sorted(e["id"] for e in r["entries"])
    faithful = [f"test_assert_faithful.py::test_split_sinkhorn_faithful[{i}]" for i in range(3)]
    captured = [i for i in ids if i.startswith("test_model_capture.py::")]
    assert sorted(set(ids) - set(captured)) == faithful
    # one entry per case of the captured forwards: 8 calls, and one stack of black-box sublayers
    assert len(captured) == 9
    for e in r["entries"]:
        if e["id"] in captured:
            continue
        assert e["kind"] == "python" and e["op"] == "split_sinkhorn"
        states = [c["state"] for c in e["cases"]]
        assert states == (["fail"] if bug else ["pass"])
        if bug:
            assert "softmax_eps_in_sum" in e["cases"][0]["diagnosis"]
            assert e["cases"][0]["repro"].startswith("mhc-verify compare mhc-failures/")
    xml.dom.minidom.parse(str(report / "junit.xml"))  # well-formed
    assert "split_sinkhorn" in (report / "report.html").read_text()
    assert "test_split_sinkhorn_faithful" in (report / "report.md").read_text()


def test_a_judgement_in_a_fixture_is_its_tests(tmp_path):
    (tmp_path / "test_fx.py").write_text(textwrap.dedent("""
        import numpy as np, pytest, mhc_verify
        @pytest.fixture(params=[1, 2])
        def judged(request):
            x = np.ones((request.param, 4, 8), np.float32)
            pm = np.full((request.param, 4), 0.25, np.float32)
            return mhc_verify.judge("pre", {"dim": 8}, {"x": x, "pre_mix": pm},
                                    {"y": (pm[..., None] * x).sum(-2)}, save_dir=None)
        def test_uses(judged):
            assert judged.passed
    """))
    report = tmp_path / "report"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                        "mhc_verify.pytest_plugin", "--mhc-report", str(report), "--rootdir",
                        str(tmp_path), str(tmp_path / "test_fx.py")],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads((report / "report.json").read_text())
    assert sorted(e["id"] for e in r["entries"]) == ["test_fx.py::test_uses[1]",
                                                      "test_fx.py::test_uses[2]"]
