"""The pipeline search under a time limit: the best plan so far, never a false bound.

No test here reads a clock: a deadline that passes after a counted number of checks (or
when a test says so) stands in for wall time, so each cut falls at the same place."""
from __future__ import annotations

import json
import math
import time

import pytest

from pase.cli import main
from pase.deadline import Deadline
from pase.errors import OptionError
from pase.pipeline import PipelinePlan, solve_pipeline
from pase.pipeline import solve as solve_module
from pase.pipeline.reprice import reprice

CHAIN = dict(batch=4, microbatches=[1, 2], model_options={"length": 3}, cluster="dgx-a100")
# A model whose syncs outlast their window: the first search's bound is below the plan's
# price, so the bounding (lifted) searches run (three searches in all).
EXPOSED = dict(batch=4, microbatches=[2], stage_sizes=[16], cluster="dgx-a100-80gb",
               model_options={"layers": 1, "width": 1024, "heads": 16, "seq": 256,
                              "vocab": 8192, "positions": 256})
TIMINGS = ("seconds", "search_seconds", "time_limit")


class Ticks(Deadline):
    """A deadline that passes after ``n`` checks (None: only once ``passed`` is set)."""

    def __init__(self, n: int | None = None):
        super().__init__(1e9)  # the ambient check of a build never fires
        self.n, self.checks, self.passed = n, 0, False

    def expired(self) -> bool:
        self.checks += 1
        return self.passed or (self.n is not None and self.checks > self.n)


def _untimed(plan: PipelinePlan) -> dict:
    data = plan.to_dict()
    data["search"] = {k: v for k, v in data["search"].items() if k not in TIMINGS}
    return data


def test_a_huge_time_limit_gives_the_plan_without_one():
    free = solve_pipeline("chain", 4, **CHAIN)
    limited = solve_pipeline("chain", 4, time_limit=1e9, **CHAIN)
    assert free.status == "optimal" and "stopped" not in limited.search
    assert _untimed(limited) == _untimed(free)
    assert limited.search["time_limit"] == 1e9 and "time_limit" not in free.search


def test_a_deadline_already_past_is_a_one_line_error_naming_the_limit():
    past = Deadline(1.0, start=time.perf_counter() - 10.0)  # the command began 10 s ago
    with pytest.raises(OptionError, match=r"time limit of 1 s passed .* before any pipeline "
                                          r"plan was found; give a larger --time-limit"):
        solve_pipeline("chain", 4, deadline=past, **CHAIN)
    with pytest.raises(OptionError, match="not both"):
        solve_pipeline("chain", 4, time_limit=5, deadline=Deadline(5), **CHAIN)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "soon", True])
def test_bad_time_limits_are_refused(bad):
    with pytest.raises(OptionError, match="time_limit must be a finite number"):
        solve_pipeline("chain", 4, time_limit=bad, **CHAIN)


def test_a_cut_first_search_gives_its_best_plan_and_no_gap():
    counted = Ticks()
    free = solve_pipeline("chain", 4, deadline=counted, **CHAIN)
    assert free.status == "optimal" and "stopped" not in free.search
    total, lines, plans = counted.checks, [], 0
    assert total > 4
    for n in (0, total // 3, 2 * total // 3, total - 1):
        try:
            plan = solve_pipeline("chain", 4, deadline=Ticks(n), progress=lines.append,
                                  **CHAIN)
        except OptionError as exc:
            assert n < total // 2 and "give a larger --time-limit" in str(exc)
            continue
        plans += 1
        assert plan.status == "feasible" and plan.search["stopped"] == "time limit"
        assert plan.search["stopped_search"] == 1
        assert plan.lower_bound is None and plan.gap is None
        assert plan.to_dict()["gap"] is None
        # a real plan of the space, at its own price, no better than the optimum
        again = reprice(PipelinePlan.from_dict(plan.to_dict()))
        assert again["step_seconds"] == pytest.approx(plan.step_time, rel=1e-9)
        assert plan.step_time >= free.lower_bound * (1 - 1e-9)
    with pytest.raises(OptionError):
        solve_pipeline("chain", 4, deadline=Ticks(0), **CHAIN)
    assert plans >= 1  # the last cut falls after the first m's plans
    assert any(line.startswith("time limit: the search stopped") for line in lines)
    assert any("gap unknown" in line for line in lines)


def test_a_cut_bounding_search_keeps_the_first_searchs_bound(monkeypatch):
    clock, firsts = Ticks(), []
    real = solve_module.search

    def spy(space, oracle, links, progress=None, incumbent=math.inf, label=""):
        if firsts:  # the second search, the first lifted one: the deadline passes now
            clock.passed = True
        found, bound = real(space, oracle, links, progress, incumbent, label)
        firsts.append(None if found is None else (found.stopped, bound))
        return found, bound

    monkeypatch.setattr(solve_module, "search", spy)
    lines: list[str] = []
    cut = solve_pipeline("gpt2", 16, deadline=clock, progress=lines.append, **EXPOSED)
    (first_stopped, first_bound), = firsts  # the cut search found no plan
    assert cut.status == "feasible" and cut.search["stopped"] == "time limit"
    assert cut.search["stopped_search"] == 2
    # the finished first search's bound (a bound: tests/test_pipeline_certificate.py), not
    # one of the cut search's
    assert not first_stopped and first_bound is not None
    assert cut.lower_bound == pytest.approx(first_bound, rel=1e-12)
    assert cut.lower_bound < cut.step_time
    assert cut.gap == pytest.approx((cut.step_time - cut.lower_bound) / cut.step_time)
    assert any("bounding search 2 was cut" in line for line in lines)


def test_cli_time_limit_on_a_whole_plan(capsys):
    argv = ["solve", "gpt2", "--model-option", "layers=2", "-p", "8", "--cluster", "h100-sxm",
            "--global-batch", "16", "--microbatches", "2", "--schedule", "1f1b",
            "--option", "stage_sizes=4,8", "--format", "json"]
    assert main(argv + ["--time-limit", "100000"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "optimal" and data["gap"] == pytest.approx(0.0, abs=1e-12)
    assert data["step_seconds"] > 0 and data["search"]["time_limit"] == 100000
    assert "stopped" not in data["search"]
    # a limit no search can meet (1 ns; loading the model alone takes longer)
    assert main(argv + ["--time-limit", "1e-9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give a larger --time-limit" in err
    for bad in ("0", "-3", "soon"):
        assert main(argv + ["--time-limit", bad]) == 2
        assert "argument --time-limit" in capsys.readouterr().err


class PastInsideSolves(Deadline):
    """A deadline the search's own checks never see pass, that has passed for the dp's
    ambient checks inside a stage solve (so the cut falls inside the first solve)."""

    inside = False

    def __init__(self):
        super().__init__(1.0)

    def expired(self) -> bool:
        return False

    @property
    def at(self):
        return 0.0 if PastInsideSolves.inside else float("inf")

    @at.setter
    def at(self, value):
        pass


def test_a_stage_solve_is_cut_by_the_limit_not_run_to_its_end(monkeypatch):
    # before, a stage's dp ran to its end whatever the limit (GPT-3 175B at p = 1,024
    # with --time-limit 240 still ran at 300 s); now the dp sees the command's deadline
    from pase import api

    calls = []
    real = api.run_solver

    def run_solver(*args, **kwargs):
        calls.append(args[0])
        PastInsideSolves.inside = True
        try:
            return real(*args, **kwargs)
        finally:
            PastInsideSolves.inside = False

    monkeypatch.setattr(api, "run_solver", run_solver)
    with pytest.raises(OptionError, match="time limit .* before any pipeline plan"):
        solve_pipeline("chain", 2, deadline=PastInsideSolves(), **CHAIN)
    assert len(calls) == 1  # the first solve was cut, and nothing ran after it


def test_the_stage_problem_checks_the_limit_between_the_ops_states():
    """Building the stages' Problem prices each op's states and kept activations after the
    cost build; that loop checked no deadline (DeepSeek-V3 on 1,024 H100s with --time-limit
    120 answered at 143 s, 129 s with it)."""
    from pase import api
    from pase.deadline import Deadline, active
    from pase.errors import TimeLimitError
    from pase.pipeline.layered import build
    from pase.pipeline.stage_model import stage_cost_model
    from pase.space import ConfigSpace

    class AtTheStates(Deadline):  # passed from the start, felt only by the states' loop
        def check(self, doing: str) -> None:
            if doing.startswith("pricing the states"):
                raise TimeLimitError(doing)

    graph = api.load_graph("gpt2", batch=4, layers=1)
    model = stage_cost_model({"cluster": "h100-sxm"}, 2, "calibrated", apart=True)
    with active(AtTheStates(0.0)), pytest.raises(TimeLimitError, match="of op 'wte' "
                                                                        r"\(1 of \d+\)"):
        build(graph, ConfigSpace(graph, 4), model, 2)
