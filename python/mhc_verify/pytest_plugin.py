"""pytest plugin: `pytest -p mhc_verify.pytest_plugin --mhc-report DIR` gathers every judgement
of the run (mhc_verify.judge and assert_faithful) into one report in DIR: report.json,
report.md, report.html and junit.xml, one entry per test (its node id), one case per judgement
(judge_file's cases an entry each, the node id with "[case]"), written as the run goes."""
import os

import pytest

import mhc_verify
from mhc_verify import _core


def pytest_addoption(parser):
    group = parser.getgroup("mhc_verify")
    group.addoption("--mhc-report", metavar="DIR", default=None,
                    help="write every mhc_verify judgement of the run to DIR/report.{json,md,html} "
                         "and DIR/junit.xml")


def pytest_configure(config):
    folder = config.getoption("--mhc-report")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    path = lambda name: mhc_verify._text("--mhc-report", os.path.join(folder, name))
    config._mhc_recorder = _core.Recorder(json=path("report.json"), md=path("report.md"),
                                          html=path("report.html"), junit=path("junit.xml"))
    mhc_verify._recorder = config._mhc_recorder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # setup, call and teardown: a judgement in a fixture is its test's
    mhc_verify._label = item.nodeid
    try:
        yield
    finally:
        mhc_verify._label = "mhc_verify.judge"


def pytest_sessionfinish(session, exitstatus):
    recorder = getattr(session.config, "_mhc_recorder", None)
    if recorder is not None:
        recorder.finish(int(exitstatus))
        mhc_verify._recorder = None
