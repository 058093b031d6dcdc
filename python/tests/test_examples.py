"""The example folder (python/examples) run as a user runs it: the faithful kernel passes both
tests; with the planted eps bug assert_faithful fails on every input with the diagnosis and a
REPRO line (assert_close catches it on some inputs only, without saying what is wrong)."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run(tmp_path, bug):
    env = dict(os.environ, MHC_EXAMPLE_BUG="1" if bug else "0")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rA", EXAMPLES], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_faithful_kernel_passes(tmp_path):
    p = run(tmp_path, bug=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "8 passed" in p.stdout


def test_planted_bug_fails_only_assert_faithful(tmp_path):
    p = run(tmp_path, bug=True)
    out = p.stdout
    assert p.returncode == 1, out + p.stderr
    failed = [l for l in out.splitlines() if l.startswith("FAILED")]
    assert sum("test_assert_faithful.py::test_split_sinkhorn_faithful" in l for l in failed) == 3
    assert any("test_model_capture.py::test_a_captured_forward_is_faithful" in l for l in failed)
    assert "DIAGNOSIS: matches the oracle with softmax_eps_in_sum" in out
    # one saved case per failing input, each named in its REPRO line
    repros = set(re.findall(r"REPRO: mhc-verify compare (mhc-failures/python_split_sinkhorn_\w+\.h5)", out))
    assert len(repros) == 3 and all((tmp_path / r).is_file() for r in repros)
