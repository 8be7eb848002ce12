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

from typing import Any, Callable

from pase.cost_models.calibrated_plan import price_plan, sync_slack
from pase.cost_models.calibrated_rules import CalibratedRules
from pase.deadline import remaining
from pase.ir import Graph
from pase.problem import Problem, Solution, Status

TOLERANCE = 1e-9  # relative: a price within this of the bound is the bound


def certified(graph: Graph, model: CalibratedRules, problem: Problem,
              run: Callable[[Problem], Solution]) -> tuple[Solution, dict[str, Any] | None]:
    """The best plan ``run`` finds over up to three bounding Problems, priced, with the
    status and lower bound its price supports."""
    first = run(problem)
    if first.choice is None:
        return first, None
    best, price = first, price_plan(graph, model, problem, first.choice)
    bound = first.lower_bound
    solves = [first]
    if bound is not None and price["step_seconds"] > bound * (1 + TOLERANCE):
        slack = sync_slack(graph, model, problem)

        def lifted(x: float) -> Problem:
            return Problem([v + x * d for v, d in zip(problem.vertex_costs, slack)], problem.edges,
                           problem.edge_costs, problem.names, problem.memory, problem.memory_cap,
                           problem.unit, problem.candidates, problem.devices, problem.variants)

        def slack_of(choice) -> float:
            return float(sum(d[k] for d, k in zip(slack, choice)))

        lines = [(first.cost, slack_of(first.choice))]  # (the Problem's sum, its slack) per plan
        for x in (1.0, None):
            left = remaining()
            if left is not None and left <= 0:  # the time limit covers every solve
                break
            if x is None:  # where the two plans' lines cross
                (a0, d0), (a1, d1) = lines[0], lines[-1]
                if d0 == d1:
                    break
                x = min(1.0, max(0.0, (a1 - a0) / (d0 - d1)))
                # Every lifted optimum lies under each known plan's line, so where the two
                # lines meet at or below the bound a solve there cannot raise it: skip it.
                if min(a0 + x * d0, a1 + x * d1) <= bound * (1 + TOLERANCE):
                    break
            answer = run(lifted(x))
            solves.append(answer)
            if answer.choice is None or answer.lower_bound is None:
                break
            bound = max(bound, answer.lower_bound)
            lines.append((problem.evaluate(answer.choice), slack_of(answer.choice)))
            priced = price_plan(graph, model, problem, answer.choice)
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
    wall = sum(s.wall_time for s in solves)
    solution = Solution(best.choice, step, status, best.solver,
                        None if bound is None else min(bound, step), wall, stats)
    return solution, price


__all__ = ["certified"]
