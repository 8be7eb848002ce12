"""Greedy: one pass in vertex order, then optional single-vertex improvement sweeps.

Vertex index order is topological (cost models number vertices as they build
them), so each vertex sees the choices of its producers. Fast and with no
optimality guarantee: a baseline, a warm start for the ILP backends and a start
for MCMC.
"""
from __future__ import annotations

import time

import numpy as np

from pase.errors import check_common, check_int
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS


def _local_costs(problem: Problem, choice: np.ndarray, v: int) -> np.ndarray:
    """Cost of each candidate of ``v`` given the current choices of all its neighbours."""
    local = problem.vertex_costs[v].copy()
    for w, table in problem.incident(v):
        local += table[:, choice[w]]
    return local


def greedy_choice(problem: Problem, improve: int = 0, time_limit: float | None = None
                  ) -> tuple[int, ...] | None:
    """The greedy choice, repaired to fit the memory cap; None if nothing can fit.

    Each vertex in index order takes the candidate minimising its own cost plus
    its edges to already-chosen neighbours (ties: lowest index). Under a cap that
    choice is repaired by moving vertices to their lowest-memory candidate, best
    memory saving per cost increase first. Then up to ``improve`` sweeps move
    one vertex at a time to its best candidate given all neighbours, keeping only
    strict improvements that fit, until a sweep changes nothing or ``time_limit``
    seconds have passed.
    """
    improve = check_int("improve", improve, 0)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    n = problem.num_vertices
    choice = np.zeros(n, dtype=np.int64)
    for v in range(n):
        local = problem.vertex_costs[v].copy()
        for w, table in problem.incident(v):
            if w < v:
                local += table[:, choice[w]]
        choice[v] = int(np.argmin(local))  # argmin returns the first (lowest) index on ties
    if problem.memory_cap is not None and not problem.fits(choice):
        choice = _repair(problem, choice)
        if choice is None:
            return None
    for _ in range(improve):
        if deadline is not None and time.perf_counter() > deadline:
            break  # the choice so far stands: greedy claims no more than feasible
        if not _sweep(problem, choice):
            break
    return tuple(int(c) for c in choice)


def _repair(problem: Problem, choice: np.ndarray) -> np.ndarray | None:
    mem = problem.memory
    lowest = np.array([int(np.argmin(m)) for m in mem], dtype=np.int64)
    if not problem.fits(lowest):
        return None  # even the least memory per vertex exceeds the cap
    # Costs and bytes in units of their largest entry, so the ratio keeps its order at any
    # scale: 1e300 s per 1e-300 bytes would overflow to inf and tie with every other inf.
    mem_unit = max(float(np.abs(m).max()) for m in mem) or 1.0
    cost_unit = max(_largest(c) for c in problem.vertex_costs + problem.edge_costs) or 1.0
    while not problem.fits(choice):
        best_key, best_v = np.inf, -1
        for v in range(problem.num_vertices):
            saving = mem[v][choice[v]] - mem[v][lowest[v]]
            if saving <= 0:
                continue
            local = _local_costs(problem, choice, v)
            now, then = local[choice[v]], local[lowest[v]]
            increase = 0.0 if now == then else then - now  # inf == inf: no change
            with np.errstate(over="ignore"):  # an inf key still orders below nothing
                key = (increase / cost_unit) / (saving / mem_unit)  # cost per byte saved
            if best_v < 0 or key < best_key:
                best_key, best_v = key, v
        choice[best_v] = lowest[best_v]  # best_v exists: the lowest choice fits
    return choice


def _largest(a: np.ndarray) -> float:
    finite = np.abs(a[np.isfinite(a)])
    return float(finite.max()) if finite.size else 0.0


def _sweep(problem: Problem, choice: np.ndarray) -> bool:
    """One improvement sweep in index order; True if any vertex moved."""
    moved = False
    cap = problem.memory_cap
    used = problem.memory_of(choice)
    for v in range(problem.num_vertices):
        local = _local_costs(problem, choice, v)
        if cap is not None:
            mem = problem.memory[v]
            local[used - mem[choice[v]] + mem > cap] = np.inf
        j = int(np.argmin(local))
        if local[j] < local[choice[v]]:
            if cap is not None:
                trial = choice.copy()
                trial[v] = j
                if not problem.fits(trial):  # float drift right at the cap
                    continue
                used = problem.memory_of(trial)
            choice[v] = j
            moved = True
    return moved


@SOLVERS.register("greedy", "greedy in topological order, optional local improvement sweeps",
                  exact=False)
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          improve: int = 0) -> Solution:
    """Greedy choice (see :func:`greedy_choice`); deterministic, ignores ``seed``.

    Status is FEASIBLE (no lower bound), or INFEASIBLE when even the
    lowest-memory candidate of every vertex exceeds the memory cap.

    Examples:
        >>> from pase.testing import random_problem
        >>> p = random_problem(6, seed=1)
        >>> solve(p, improve=3).cost <= solve(p).cost
        True
    """
    check_common(time_limit, seed)
    improve = check_int("improve", improve, 0)
    choice = greedy_choice(problem, improve, time_limit)
    if choice is None:
        return Solution(None, float("inf"), Status.INFEASIBLE, "greedy")
    return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, "greedy",
                    stats={"improve": improve})
