"""A certified search in the calibrated model: tighter bounds where gradient syncs show.

The calibrated Problem charges each gradient sync at its overlap tax; a plan whose
syncs outlast the backward pass pays more (:mod:`pase.cost_models.calibrated_plan`).
The Problem's optimum stays a lower bound, but a loose one, and its optimum can be
a plan that leans on syncs the step cannot hide.

:func:`certified` closes that gap with the Problem's own solver. For ``x`` in
[0, 1], the Problem plus ``x`` times each candidate's sync slack
(:func:`~pase.cost_models.calibrated_plan.sync_slack`) is a sum over ops that lower
bounds every plan's price, so its optimum does too. It solves at ``x = 0`` (the
Problem), and, when that plan's price exceeds its bound, at ``x = 1`` (syncs
charged in full, less the window) and at the ``x`` where the two plans' lines
cross (a cutting-plane step on the concave bound) unless the lines meet at or below
the bound already proven, where that solve could not raise it. The answer is the best priced
plan found; its bound the best of the solves; ``optimal`` only when they meet.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from functools import partial
from typing import Any, Callable

import numpy as np

from pase.cost_models.calibrated_plan import price_plan, sync_slack
from pase.cost_models.calibrated_rules import CalibratedRules
from pase.deadline import remaining
from pase.forked import Forked, spare
from pase.forked import available as forked_available
from pase.ir import Graph
from pase.problem import Problem, Solution, Status

TOLERANCE = 1e-9  # relative: a price within this of the bound is the bound
# Edge-matrix entries (summed over edges) from which the x = 1 solve runs in a second
# process beside the first: gpt3-175b at p = 1,024 has 4.9e9 (a solve of ~15 CPU s);
# the small models of the tests have under 1e6, where a fork would cost more than it
# saves. None: never.
PARALLEL_MIN_ENTRIES: int | None = 10**8


def certified(graph: Graph, model: CalibratedRules, problem: Problem,
              run: Callable[[Problem], Solution]) -> tuple[Solution, dict[str, Any] | None]:
    """The best plan ``run`` finds over up to three bounding Problems, priced, with the
    status and lower bound its price supports.

    On a large Problem (``PARALLEL_MIN_ENTRIES``) with a second CPU, the ``x = 1`` solve
    runs in a forked process beside the ``x = 0`` one (:class:`pase.forked.Forked`) and is
    cancelled when the first plan proves itself: the same solves and the same answer as
    one after the other, in the wall time of one. The crossing's solve, alone, may split
    the dp's widest steps between two processes (:func:`pase.forked.spare`)."""
    start = time.perf_counter()
    slack: list[np.ndarray] | None = None
    ahead: Forked[tuple[Solution, dict[str, Any] | None]] | None = None
    parallel = _parallel(problem)
    if parallel:
        slack = sync_slack(graph, model, problem)
        ahead = Forked(partial(_solve_and_price, graph, model, problem, run,
                               _lifted(problem, slack, 1.0)))
    try:
        return _search(graph, model, problem, run, slack, ahead, parallel, start)
    finally:
        if ahead is not None:  # not needed (the first plan proved itself), or an error
            ahead.cancel()


def _search(graph: Graph, model: CalibratedRules, problem: Problem,
            run: Callable[[Problem], Solution], slack: list[np.ndarray] | None,
            ahead: Forked[tuple[Solution, dict[str, Any] | None]] | None, parallel: bool,
            start: float) -> tuple[Solution, dict[str, Any] | None]:
    """:func:`certified`'s solves, the ``x = 1`` one read from ``ahead`` when given; with
    ``parallel`` a solve alone (the crossing) has the second CPU (:func:`pase.forked.spare`)."""
    first = run(problem)
    if first.choice is None:
        return first, None
    best, price = first, price_plan(graph, model, problem, first.choice)
    bound = first.lower_bound
    solves = [first]
    if bound is not None and price["step_seconds"] > bound * (1 + TOLERANCE):
        slack = sync_slack(graph, model, problem) if slack is None else slack

        def slack_of(choice) -> float:
            return float(sum(d[k] for d, k in zip(slack, choice)))

        lines = [(first.cost, slack_of(first.choice))]  # (the Problem's sum, its slack) per plan
        for x in (1.0, None):
            left = remaining()
            if left is not None and left <= 0:  # the time limit covers every solve
                break  # (one already running beside is cancelled, as if never begun)
            if x is None:  # where the two plans' lines cross
                (a0, d0), (a1, d1) = lines[0], lines[-1]
                if d0 == d1:
                    break
                x = min(1.0, max(0.0, (a1 - a0) / (d0 - d1)))
                # Every lifted optimum lies under each known plan's line, so where the two
                # lines meet at or below the bound already proven a solve there cannot
                # raise it: skip it.
                if min(a0 + x * d0, a1 + x * d1) <= bound * (1 + TOLERANCE):
                    break
            if x == 1.0 and ahead is not None:
                answer, priced = ahead.result()
            else:
                with spare() if parallel else nullcontext():
                    answer, priced = _solve_and_price(graph, model, problem, run,
                                                      _lifted(problem, slack, x))
            solves.append(answer)
            if answer.choice is None or answer.lower_bound is None or priced is None:
                break
            bound = max(bound, answer.lower_bound)
            lines.append((problem.evaluate(answer.choice), slack_of(answer.choice)))
            if priced["step_seconds"] < price["step_seconds"]:
                best, price = answer, priced
            if price["step_seconds"] <= bound * (1 + TOLERANCE):
                break
    step = float(price["step_seconds"])
    over = problem.memory_cap is not None and price["memory_bytes"] > problem.memory_cap
    proven = bound is not None and step <= bound * (1 + TOLERANCE) and not over
    status = Status.OPTIMAL if proven else (best.status if best.status is not Status.OPTIMAL
                                            else Status.FEASIBLE)
    stats = dict(best.stats, search_cost=best.cost, bounding_solves=len(solves))
    wall = time.perf_counter() - start  # the solves (two may overlap) and their pricing
    solution = Solution(best.choice, step, status, best.solver,
                        None if bound is None else min(bound, step), wall, stats)
    return solution, price


def _solve_and_price(graph: Graph, model: CalibratedRules, problem: Problem,
                     run: Callable[[Problem], Solution], lifted: Problem
                     ) -> tuple[Solution, dict[str, Any] | None]:
    """``run(lifted)`` and its plan's price in ``problem`` (None without a plan)."""
    answer = run(lifted)
    if answer.choice is None or answer.lower_bound is None:
        return answer, None
    return answer, price_plan(graph, model, problem, answer.choice)


def _lifted(problem: Problem, slack: list[np.ndarray], x: float) -> Problem:
    """The Problem plus ``x`` times each candidate's sync slack. Vertices that shared their
    cost and slack arrays share the lifted array (repeated layers stay recognisably equal)."""
    made: dict[tuple[int, int], np.ndarray] = {}
    costs = []
    for v, d in zip(problem.vertex_costs, slack):
        key = (id(v), id(d))
        if key not in made:
            made[key] = v + x * d
        costs.append(made[key])
    return Problem(costs, problem.edges, problem.edge_costs, problem.names, problem.memory,
                   problem.memory_cap, problem.unit, problem.candidates, problem.devices,
                   problem.variants)


def _parallel(problem: Problem) -> bool:
    """Whether the ``x = 1`` solve goes to a second process: a Problem whose solve takes
    seconds (``PARALLEL_MIN_ENTRIES`` edge entries or more) and a second CPU to run it."""
    if PARALLEL_MIN_ENTRIES is None:
        return False
    entries = sum(m.size for m in problem.edge_costs)
    return entries >= PARALLEL_MIN_ENTRIES and forked_available()


__all__ = ["PARALLEL_MIN_ENTRIES", "certified"]
