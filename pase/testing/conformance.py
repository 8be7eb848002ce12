"""A conformance battery every solver, built-in or your own, can run in a few lines.

    >>> from pase.testing import check_solver
    >>> report = check_solver("greedy")          # a registered name or a callable
    >>> report.passed                            # doctest: +SKIP
    ['valid choices', 'reported cost', ...]

It checks, on small Problems whose optimum exhaustive search knows:

- every answer names a valid candidate for every vertex;
- the reported cost equals the re-evaluated cost of the choice;
- a solver claiming OPTIMAL really is optimal, any lower bound is below the
  optimum, exact solvers (``exact=True``) always reach it, and heuristics
  never report a cost below it;
- the same seed gives the same choice;
- a time limit is respected (within a slack for interpreter overhead);
- under a memory cap the answer fits, and when nothing fits the solver says
  INFEASIBLE or refuses with a PaseError, never a choice that breaks the cap.

A solver may refuse any Problem with a :class:`~pase.errors.PaseError` (an
unsupported option, a size limit), but must solve the graph-derived ones.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pase.errors import PaseError
from pase.problem import Problem, Solution, Status
from pase.testing.random_problems import random_problem

# Relative tolerance for cost comparisons (sums of floats in different orders).
RTOL = 1e-9
# Extra seconds a solver may overrun its time limit (interpreter start-up, setup).
TIME_SLACK = 2.0


class ConformanceError(AssertionError):
    """A solver broke one of the battery's rules; the message says which and where."""


@dataclass
class Report:
    solver: str
    passed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _reference_problems(seed: int) -> list[tuple[str, Problem, bool]]:
    """(label, Problem, must_solve) pairs: graph-derived ones must be solved."""
    from pase.api import build_problem

    problems = [(f"{m} p={p}", build_problem(m, p).problem, True)
                for m, p in (("diamond", 4), ("mlp", 2), ("fork-join", 2), ("chain", 4))]
    problems += [(f"random #{i}", random_problem(3 + i % 5, 4, 2, seed=seed + i), False)
                 for i in range(8)]
    return problems


def _optimum(problem: Problem) -> Solution:
    from pase.solvers import exhaustive

    return exhaustive.solve(problem)


def _call(solve: Callable[..., Solution], problem: Problem, **kwargs: Any) -> Solution | None:
    try:
        return solve(problem, **kwargs)
    except PaseError:
        return None


def _resolve(solver: str | Callable[..., Solution]) -> tuple[str, Callable[..., Solution], bool]:
    if callable(solver):
        return getattr(solver, "__name__", "solver"), solver, False
    from pase.registry import SOLVERS

    entry = SOLVERS.entry(solver)
    return entry.name, entry.obj, bool(entry.info.get("exact"))


def check_solver(solver: str | Callable[..., Solution], *, exact: bool | None = None,
                 options: dict[str, Any] | None = None, seed: int = 0,
                 time_limit: float = 1.0) -> Report:
    """Run the battery on ``solver``; raise ConformanceError on the first broken rule.

    Args:
        solver: a registered name or a ``solve(problem, *, time_limit, seed, **options)``.
        exact: whether the solver claims exactness (default: the registry's word,
            False for a bare callable).
        options: extra keyword arguments for every call.
        seed: seeds the random Problems and the solver.
        time_limit: seconds for the time-limit check.
    """
    name, solve, registered_exact = _resolve(solver)
    exact = registered_exact if exact is None else exact
    options = dict(options or {})
    report = Report(name)

    def fail(label: str, message: str) -> None:
        raise ConformanceError(f"solver {name!r} on {label}: {message}")

    for label, problem, must_solve in _reference_problems(seed):
        best = _optimum(problem)
        sol = _call(solve, problem, seed=seed, **options)
        if sol is None:
            if must_solve:
                fail(label, "refused a small graph-derived Problem it should solve")
            report.refused.append(label)
            continue
        _check_answer(problem, sol, best, exact, lambda m, at=label: fail(at, m))
        again = _call(solve, problem, seed=seed, **options)
        if again is None or again.choice != sol.choice:
            fail(label, f"not deterministic for seed={seed}: {sol.choice} then "
                        f"{None if again is None else again.choice}")
    report.passed += ["valid choices", "reported cost", "optimality claims", "determinism"]

    _check_time_limit(solve, seed, options, time_limit, fail)
    report.passed.append("time limit")
    _check_memory_cap(solve, seed, options, exact, fail, report)
    report.passed.append("memory cap")
    return report


def _check_answer(problem: Problem, sol: Solution, best: Solution, exact: bool,
                  fail: Callable[[str], None]) -> None:
    if not isinstance(sol, Solution):
        fail(f"returned {type(sol).__name__}, not a pase.problem.Solution")
    if sol.choice is None:
        if best.status is not Status.INFEASIBLE and sol.status is not Status.TIME_LIMIT:
            fail(f"returned no choice with status {sol.status} on a feasible Problem")
        return
    try:
        true_cost = problem.evaluate(sol.choice)
    except PaseError as exc:
        fail(f"invalid choice {sol.choice}: {exc}")
    if not np.isclose(sol.cost, true_cost, rtol=RTOL, atol=0):
        fail(f"reported cost {sol.cost!r} but the choice evaluates to {true_cost!r}")
    if not problem.fits(sol.choice):
        fail(f"choice uses {problem.memory_of(sol.choice)} memory, over the cap {problem.memory_cap}")
    optimum = best.cost
    if true_cost < optimum * (1 - RTOL) - 1e-12:
        fail(f"cost {true_cost!r} is below the true optimum {optimum!r}: impossible")
    above = true_cost > optimum * (1 + RTOL) + 1e-12
    if sol.status is Status.OPTIMAL and above:
        fail(f"claims OPTIMAL at {true_cost!r} but the optimum is {optimum!r}")
    if exact and above:
        fail(f"an exact solver returned {true_cost!r}; the optimum is {optimum!r}")
    if sol.lower_bound is not None and sol.lower_bound > optimum * (1 + RTOL) + 1e-12:
        fail(f"lower bound {sol.lower_bound!r} exceeds the optimum {optimum!r}")


def _check_time_limit(solve, seed, options, time_limit, fail) -> None:
    big = random_problem(60, 30, 40, seed=seed)
    start = time.perf_counter()
    sol = _call(solve, big, time_limit=time_limit, seed=seed, **options)
    elapsed = time.perf_counter() - start
    if elapsed > time_limit + TIME_SLACK:
        fail("a 60-vertex random Problem", f"took {elapsed:.2f} s with time_limit={time_limit}")
    if sol is not None and sol.choice is not None:
        cost = big.evaluate(sol.choice)
        if not np.isclose(sol.cost, cost, rtol=RTOL, atol=0):
            fail("a 60-vertex random Problem", f"reported {sol.cost!r}, evaluates to {cost!r}")


def _check_memory_cap(solve, seed, options, exact, fail, report: Report) -> None:
    from pase.api import build_problem

    for label, base in (("diamond p=4 with memory", build_problem("diamond", 4).problem),
                        ("random with memory", random_problem(5, 4, 2, seed=seed, with_memory=True))):
        rng = np.random.default_rng(seed)
        memory = base.memory or [rng.integers(1, 50, size=k).astype(float) for k in base.sizes]
        low = sum(float(m.min()) for m in memory)
        high = sum(float(m.max()) for m in memory)
        for cap in (low + 0.5 * (high - low), low - 1.0):
            problem = Problem(base.vertex_costs, base.edges, base.edge_costs, base.names,
                              memory=memory, memory_cap=cap, unit=base.unit,
                              candidates=base.candidates, devices=base.devices)
            best = _optimum(problem)
            sol = _call(solve, problem, seed=seed, **options)
            where = f"{label}, cap={cap:g}"
            if sol is None:
                report.refused.append(where)
                continue
            if best.status is Status.INFEASIBLE and sol.choice is not None:
                fail(where, f"returned choice {sol.choice} although no strategy fits the cap")
            if sol.choice is None and best.status is not Status.INFEASIBLE:
                if exact or sol.status not in (Status.INFEASIBLE, Status.TIME_LIMIT):
                    fail(where, f"found nothing (status {sol.status}) although strategies fit")
                continue
            _check_answer(problem, sol, best, exact, lambda m, w=where: fail(w, m))
