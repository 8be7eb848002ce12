"""The classroom kit: every skeleton fails its grader, every reference solution passes it.

Each grader runs in this process through ``pytest.main``, with the submission
chosen by the PASE_SUBMISSION environment variable exactly as a student's run
would; the solvers a submission registers are removed afterwards.
"""
import sys
from pathlib import Path

import pytest

from pase.registry import SOLVERS

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = {  # folder: the file students hand in
    "dp": "chain_tree_dp.py",
    "edge_cost": "edge_cost.py",
    "ilp": "ilp_pulp.py",
}
REGISTERED = ("student-chain-dp", "student-tree-dp", "student-ilp")


class Outcomes:
    """A pytest plugin that records every test's outcome and failure text."""

    def __init__(self):
        self.passed, self.failed = [], {}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed[report.nodeid] = str(report.longrepr)
        elif report.when == "call" and report.passed:
            self.passed.append(report.nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self.failed[report.nodeid or "collection"] = str(report.longrepr)


@pytest.fixture
def grade(monkeypatch):
    def run(folder, submission=None, *extra):
        if submission is None:
            monkeypatch.delenv("PASE_SUBMISSION", raising=False)
        else:
            monkeypatch.setenv("PASE_SUBMISSION", str(submission))
        # A grader module imported by an earlier run would keep its first submission.
        sys.modules.pop(f"test_grade_{folder}", None)
        outcomes = Outcomes()
        # -n 0: in this process (pyproject's addopts start workers), where the plugin sees it
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-n", "0", "--rootdir", str(ROOT),
                            str(ROOT / "teaching" / folder), *extra], plugins=[outcomes])
        return code, outcomes

    monkeypatch.chdir(ROOT)
    yield run
    for name in REGISTERED:
        SOLVERS.remove(name)
    for folder in ASSIGNMENTS:
        sys.modules.pop(f"test_grade_{folder}", None)


def needs(folder):
    if folder == "ilp":
        pytest.importorskip("pulp")


@pytest.mark.parametrize("folder", sorted(ASSIGNMENTS))
def test_every_assignment_has_its_parts(folder):
    here = ROOT / "teaching" / folder
    for path in (here / "README.md", here / ASSIGNMENTS[folder],
                 here / "solution" / ASSIGNMENTS[folder], here / f"test_grade_{folder}.py"):
        assert path.is_file(), path
    assert "NotImplementedError" in (here / ASSIGNMENTS[folder]).read_text()
    assert f"pytest teaching/{folder}" in (here / "README.md").read_text()


@pytest.mark.parametrize("folder", sorted(ASSIGNMENTS))
def test_the_skeleton_fails_its_grader(folder, grade):
    needs(folder)
    code, outcomes = grade(folder, ROOT / "teaching" / folder / ASSIGNMENTS[folder])
    assert code == pytest.ExitCode.TESTS_FAILED
    assert outcomes.failed and all("NotImplementedError" in text
                                   for text in outcomes.failed.values())
    # Only the tests that call nothing of the student's (registration tags) may pass.
    assert all("registered_with_its_tags" in test for test in outcomes.passed), outcomes.passed


@pytest.mark.parametrize("folder", [
    "dp", "edge_cost",
    pytest.param("ilp", marks=pytest.mark.slow),  # the battery on CBC: about 10 s
])
def test_the_reference_solution_passes_its_grader(folder, grade):
    needs(folder)
    code, outcomes = grade(folder, ROOT / "teaching" / folder / "solution" / ASSIGNMENTS[folder])
    assert code == pytest.ExitCode.OK, "\n".join(f"{k}: {v[-800:]}" for k, v in outcomes.failed.items())
    assert len(outcomes.passed) >= 20


def test_the_default_submission_is_the_skeleton_next_to_the_grader(grade):
    code, outcomes = grade("edge_cost", None, "-k", "part1")
    assert code == pytest.ExitCode.TESTS_FAILED
    assert all("Part 1: FLOP per second" in text for text in outcomes.failed.values())


def test_a_missing_submission_is_named(grade):
    code, outcomes = grade("edge_cost", ROOT / "teaching" / "edge_cost" / "nowhere.py")
    assert code != pytest.ExitCode.OK
    assert any("no submission at" in text and "nowhere.py" in text
               for text in outcomes.failed.values())
