"""Repeated blocks under a memory cap: the Lagrangian route through the powers.

    lagrangian_route(problem: Problem, free: Solution, fold_solve, *,
                     deadline: float | None, fallback: bool) -> tuple[Solution | None, dict]

Block folding (:mod:`pase.solvers.dp.blocks.fold`) minimises a sum of vertex and edge
costs; a memory cap is a constraint on the sum of per-vertex memory, which no
single (min, +) power carries. Relaxing it with a multiplier ``lam >= 0`` gives
back a plain sum, ``cost + lam * memory`` per vertex, which folds exactly as the
costs do: identical blocks stay identical (their memory vectors are equal too),
so each multiplier costs one folded solve, ``fold_solve(problem, time_limit)``
(:mod:`pase.solvers.dp.core` supplies it: fold, solve, invert). The folded
minimum less ``lam * cap`` is a lower bound on the capped optimum (weak
duality); a minimiser that fits the cap is an upper bound. :func:`pase.solvers.dp.capped.lagrange.dual_search`
maximises the bound over ``lam`` (1-D cutting planes: typically 5-12 folded
solves).

- When the best fitting strategy found costs no more than the best bound (within
  the bound's rounding slack) it is optimal: certified by the dual bound, and
  returned with ``status`` optimal and ``stats["blocks_capped"] = "certified"``.
- Otherwise there is a duality gap (the capped optimum is no minimiser of any
  ``cost + lam * memory``). With ``fallback`` (the plain plan fits the dp's
  memory budget) this returns None and the caller runs the plain capped dp
  (Pareto fronts with Lagrangian pruning; exact). Without it the best fitting
  strategy is returned as ``feasible`` with the dual bound as ``lower_bound``,
  so the gap is reported, never hidden.
- When the least memory of any strategy is over the cap: ``infeasible``.

``free`` is the folded optimum of the uncapped Problem, which does not fit (when
it fits it is the answer and the caller returns it).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pase.errors import TimeLimitError
from pase.problem import Problem, Solution, Status
from pase.solvers.dp.capped.lagrange import Dual, dual_search, dual_slack

__all__ = ["FoldSolve", "lagrangian_route", "shifted"]

# The dp with blocks folded on an uncapped Problem, within time_limit seconds (None: no
# limit): its optimum, or None when no chain was found.
FoldSolve = Callable[[Problem, float | None], Solution | None]


def lagrangian_route(problem: Problem, free: Solution, fold_solve: FoldSolve, *,
                     deadline: float | None = None, fallback: bool = True
                     ) -> tuple[Solution | None, dict[str, Any]]:
    """The capped optimum with blocks folded, certified by the Lagrangian dual (module doc).

    ``problem`` has a memory cap and finite memory (the dp forbids infinite-memory
    candidates first); ``fold_solve`` minimises ``cost + lam * memory`` for each
    multiplier. Returns the answer, or None when the caller should run the plain capped dp
    instead (a duality gap and ``fallback``, or no chain found at some
    multiplier); and the search's statistics (``blocks_capped``: certified, gap,
    infeasible; ``folded_solves``; the ``lagrangian_*`` figures; with None for a gap, ``dual``:
    the best multiplier and fitting strategy, which the plain capped dp starts from).
    """
    start = time.perf_counter()
    cap = problem.memory_cap
    assert cap is not None and problem.memory is not None and free.choice is not None
    stats: dict[str, Any] = {"memory_cap": cap, "capped": True}
    least = problem.min_memory()
    finite = all(np.isfinite(c).all() for c in problem.vertex_costs) and \
        all(np.isfinite(m).all() for m in problem.edge_costs)
    if least > cap and finite:  # with infinite costs least is only a lower bound: leave it
        stats.update(min_memory=least, blocks_capped="infeasible")
        return Solution(None, math.inf, Status.INFEASIBLE, "dp",
                        wall_time=time.perf_counter() - start, stats={**free.stats, **stats}), stats
    uncapped = problem.with_memory_cap(None)
    folded_runs = [0]
    missing = [False]

    def minimise(lam: float) -> tuple[float, tuple[int, ...]]:
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeLimitError("dp under a memory cap exceeded its time limit while searching "
                                 "the Lagrange multiplier over folded blocks; the DP has no "
                                 "partial answer")
        left = None if deadline is None else max(1e-3, deadline - time.perf_counter())
        folded = fold_solve(shifted(uncapped, lam), left)
        folded_runs[0] += 1
        if folded is None:  # the shift hid the chain (cannot happen with equal blocks)
            missing[0] = True
            return math.inf, free.choice
        if folded.choice is None:
            return math.inf, free.choice
        return folded.cost, folded.choice

    best, more = dual_search(problem, cap, (free.choice, free.cost), minimise, lambda _: None)
    stats.update(more)
    lower, lam = more["lagrangian_bound"], more["lagrangian_multiplier"]
    slack = dual_slack(problem, cap, lam)
    stats["folded_solves"] = folded_runs[0]
    stats["blocks_capped_seconds"] = time.perf_counter() - start
    if missing[0]:
        stats["blocks_capped"] = "no chain"
        return None, stats
    if best is not None and best[1] - lower <= slack:
        stats["blocks_capped"] = "certified"
        stats["memory"] = problem.memory_of(best[0])
        return Solution(best[0], best[1], Status.OPTIMAL, "dp", lower_bound=best[1],
                        wall_time=time.perf_counter() - start, stats={**free.stats, **stats}), stats
    stats["blocks_capped"] = "gap"
    if fallback or best is None:
        stats["dual"] = Dual(lam, None if best is None else (best[0], best[1]))
        return None, stats
    stats["memory"] = problem.memory_of(best[0])
    return Solution(best[0], best[1], Status.FEASIBLE, "dp", lower_bound=min(lower, best[1]),
                    wall_time=time.perf_counter() - start, stats={**free.stats, **stats}), stats


def shifted(problem: Problem, lam: float) -> Problem:
    """``problem`` with vertex costs ``cost + lam * memory``, memory kept and no cap; vectors
    shared before stay shared (so blocks stay recognisably identical, and cheap to compare)."""
    assert problem.memory is not None
    memo: dict[tuple[int, int], np.ndarray] = {}
    costs = []
    for c, m in zip(problem.vertex_costs, problem.memory):
        key = (id(c), id(m))
        if key not in memo:
            memo[key] = c + lam * m if lam else c
        costs.append(memo[key])
    return Problem(costs, problem.edges, problem.edge_costs, problem.names, problem.memory,
                   None, problem.unit, None, problem.devices)
