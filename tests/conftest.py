"""Shared fixtures. (No conftest at the repo root: it would shadow the installed package.)"""
import os

import pytest

from pase.problem import Problem


@pytest.fixture
def tiny_problem():
    """Three vertices in a chain, solved by hand in test_exhaustive.py."""
    import numpy as np

    return Problem(
        [np.array([1.0, 0.0]), np.array([0.0, 5.0]), np.array([4.0, 0.0])],
        [(0, 1), (1, 2)],
        [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[0.0, 3.0], [0.0, 0.0]])],
        names=["a", "b", "c"],
    )


def pytest_configure(config):
    """The command line's graph cache in a folder of this run's own, so tests neither
    read a user's entries nor leave any behind."""
    import tempfile

    os.environ["PASE_CACHE_DIR"] = tempfile.mkdtemp(prefix="pase-test-cache-")


# Under CI every optional extra is installed (`pip install -e ".[all]"`), so a test
# skipped because a package or backend is missing is a broken install: fail it.
MISSING_EXTRA_WORDS = ("not installed", "could not import", "backend missing", "No module named")


def _fail_missing_extra(report) -> None:
    if os.environ.get("CI") == "true" and report.skipped:
        reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
        if any(word in reason for word in MISSING_EXTRA_WORDS):
            report.outcome = "failed"
            report.longrepr = f"CI=true installs every extra, but this test was skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_missing_extra(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module-level ``pytest.importorskip`` skips the whole file at collection."""
    outcome = yield
    _fail_missing_extra(outcome.get_result())
