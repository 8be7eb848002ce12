"""``--time-limit`` starts with the command (issue 27, defect 4).

The limit covers the build (configuration space, costs), block detection, folding,
every dp step and the output, so a command ends within ``limit * 1.1 + 2`` s. Work
is timed in CPU seconds where it can be (a busy machine stretches wall time, never
CPU time, and a wall-clock deadline passes sooner in CPU terms under load); the
end-to-end runs get :data:`LOAD_ROOM` of wall time on top.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

import pase
from pase import api
from pase.deadline import Deadline, active, check, current, share
from pase.errors import TimeLimitError
from pase.problem import Problem
from pase.solvers import greedy
from pase.testing import random_problem

# Wall seconds a loaded machine may add to an end-to-end run (its CPU time is exact).
LOAD_ROOM = 30.0
# The biggest gpt3 preset on 64 A100s: today its build alone takes ~25 CPU s.
# A build that outlasts the limits below: alpha-beta at p = 1024, about 15 CPU s.
GPT3 = ("gpt3-175b", "-p", "1024", "--cluster", "dgx-a100")


def _bound(limit: float) -> float:
    """What the issue asks: a command ends within ``limit * 1.1 + 2`` seconds."""
    return limit * 1.1 + 2


# -- the Deadline itself ----------------------------------------------------------------

def test_deadline_nesting_keeps_the_earlier_one():
    outer = Deadline(10.0)
    with active(outer):
        with active(Deadline(100.0)):  # a solver's own limit never extends the command's
            assert current() is outer
        inner = Deadline(1.0)
        with active(inner):
            assert current() is inner
            assert share(5.0) <= 1.0
        assert current() is outer
        assert share(None) <= 10.0
    assert current() is None and share(3.0) == 3.0


def test_check_names_the_work_and_the_limit():
    with active(Deadline(1e-9)):
        time.sleep(0.001)
        with pytest.raises(TimeLimitError, match=r"time limit of 1e-09 s passed after [0-9.]+ s while costing"):
            check("costing op 'x'")
    check("nothing")  # no deadline: never raises


# -- the build ----------------------------------------------------------------------------

def test_passed_deadline_stops_the_build_promptly():
    """gpt3-175b on 64 A100s takes ~25 CPU s to build; a deadline already past stops it
    at the first op or edge it costs."""
    deadline = Deadline(1e-6)
    time.sleep(0.001)
    t0 = time.process_time()
    with pytest.raises(TimeLimitError, match="time limit"):
        api.build_problem("gpt3-175b", 64, "alpha-beta", cluster="dgx-a100", deadline=deadline)
    assert time.process_time() - t0 < 5.0


def test_solve_counts_the_build_against_the_limit():
    """pase.solve's time_limit covers the build: the alpha-beta build of gpt3-175b at
    p = 1024 (about 15 CPU s) stops at the limit instead of handing the dp the whole of it."""
    t0 = time.process_time()
    with pytest.raises(TimeLimitError, match="time limit of 2 s"):
        pase.solve("gpt3-175b", 1024, cost_model="alpha-beta", cluster="dgx-a100", time_limit=2)
    assert time.process_time() - t0 < _bound(2)


def test_run_solver_refuses_once_the_command_deadline_has_passed():
    problem = random_problem(6, seed=1)
    with active(Deadline(1e-9)):
        time.sleep(0.001)
        with pytest.raises(TimeLimitError, match="before solver 'greedy' started"):
            api.run_solver("greedy", problem, time_limit=60)


def test_run_solver_gives_the_solver_what_is_left():
    seen = {}

    def spy(problem, *, time_limit=None, seed=None):
        seen["limit"] = time_limit
        return greedy.solve(problem)

    from pase.registry import SOLVERS
    SOLVERS.register("deadline-spy", "test spy", exact=False)(spy)
    try:
        with active(Deadline(5.0)):
            api.run_solver("deadline-spy", random_problem(4, seed=0), time_limit=60)
    finally:
        SOLVERS.remove("deadline-spy")
    assert 0 < seen["limit"] <= 5.0


# -- inside the solvers --------------------------------------------------------------------

def _one_big_step(k: int = 1500) -> Problem:
    """Three vertices joined in a triangle: the first dp step has k**3 entries,
    3.4e9 entries: about 3 CPU s in one step, so only a check inside a step can stop it in time."""
    rng = np.random.default_rng(0)
    costs = [rng.random(k) for _ in range(3)]
    edges = [(0, 1), (0, 2), (1, 2)]
    return Problem(costs, edges, [rng.random((k, k)) for _ in edges])


def test_dp_stops_inside_a_step():
    problem = _one_big_step()
    t0 = time.process_time()
    with pytest.raises(TimeLimitError, match="time limit"):
        api.run_solver("dp", problem, time_limit=0.2)
    assert time.process_time() - t0 < _bound(0.2) - 1.0  # 1.22 s; the step alone takes ~3


def test_greedy_improvement_sweeps_stop_at_the_limit():
    problem = random_problem(30, seed=4)
    plain = greedy.greedy_choice(problem, 0)
    improved = greedy.greedy_choice(problem, 50)
    assert improved != plain  # the sweeps move something on this Problem
    assert greedy.greedy_choice(problem, 50, time_limit=1e-12) == plain


# -- end to end ---------------------------------------------------------------------------

def _cpu() -> int:
    """The CPU this test process holds its commands to: xdist's workers each another."""
    cpus = sorted(os.sched_getaffinity(0))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    return cpus[(int(worker) if worker.isdigit() else 0) % len(cpus)]


def _run(*args: str, timeout: float,
         one_cpu: bool = True) -> tuple[subprocess.CompletedProcess, float, float]:
    """``pase ARGS``: the result, its wall seconds and its CPU seconds (user + system, its
    forked children's included). Held to one CPU (``one_cpu``), the command works in one
    process at a time, so its CPU seconds are the wall seconds it takes on an idle machine,
    whatever else runs; on two CPUs a large build prices half its re-layouts in a forked
    child, and its CPU seconds may reach twice its wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pase", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if one_cpu:  # set at once: the command forks its children seconds later, on this CPU
        os.sched_setaffinity(proc.pid, {_cpu()})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


def _one_line_time_limit(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pase: error: ") and "time limit" in lines[0]


def test_capped_gpt3_solve_ends_within_its_limit():
    """The cluster's 40 GiB caps gpt3-175b; the build alone takes ~15 s, past a 5 s
    limit: the command stops there."""
    done, wall, cpu = _run("solve", *GPT3, "--time-limit", "5", timeout=300)
    _one_line_time_limit(done)
    assert cpu <= _bound(5), (cpu, done.stderr)
    assert wall <= _bound(5) + LOAD_ROOM


def test_a_build_on_two_cpus_ends_within_its_limit():
    """On two CPUs the same build prices half its re-layouts in a forked child: both
    processes stop at the limit (the child is killed when the parent's check fires)."""
    done, wall, cpu = _run("solve", *GPT3, "--time-limit", "5", timeout=300, one_cpu=False)
    _one_line_time_limit(done)
    assert cpu <= 2 * _bound(5), (cpu, done.stderr)
    assert wall <= _bound(5) + LOAD_ROOM


def test_compare_bounds_the_build_by_the_limit():
    done, wall, cpu = _run("compare", *GPT3, "--solvers", "greedy", "--time-limit", "3",
                           timeout=300)
    _one_line_time_limit(done)
    assert cpu <= _bound(3), (cpu, done.stderr)


def test_transformer_p4096_deadline_inside_the_folding():
    """At p = 4096 the build takes ~2.5 s and the block folding ~15 s: a limit of 8 s
    falls inside the folding, which today runs on (and prunes) to ~17 s."""
    done, wall, cpu = _run("solve", "transformer", "-p", "4096", "--time-limit", "8",
                           timeout=600)
    _one_line_time_limit(done)
    assert cpu <= _bound(8), (cpu, done.stderr)
    assert wall <= _bound(8) + LOAD_ROOM


@pytest.mark.slow
def test_transformer_p4096_ends_within_its_limit():
    """Defect 4: ``pase solve transformer -p 4096 --time-limit 30`` took 143 s."""
    done, wall, cpu = _run("solve", "transformer", "-p", "4096", "--time-limit", "30",
                           timeout=900)
    _one_line_time_limit(done)
    assert cpu <= _bound(30), (cpu, done.stderr)
    assert wall <= _bound(30) + LOAD_ROOM
