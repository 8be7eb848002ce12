"""FlexFlow-style Markov chain Monte Carlo search (Metropolis-Hastings).

Each step proposes moving one random vertex to another random candidate; the
cost change ``delta`` is computed incrementally from the vertex's own cost and
its incident edges. Better moves are always accepted, worse ones with
probability ``exp(-beta * delta / current)``, ``current`` being the cost before
the move. FlexFlow uses ``exp(-beta * delta)`` on costs in its own units;
dividing by the current cost makes ``beta`` scale-free (the same ``beta`` for
FLOP or seconds) and cools the chain as it improves. With the default
``beta = 50`` a move worsening the total by 1% is accepted with probability
~0.6, by 10% with ~0.007.

Normalising by the *starting* cost instead was measured on random 50-vertex,
up-to-50-candidate Problems from the all-zeros start: it stayed 2-5x above the
greedy cost at ``beta = 50``, while the current-cost form came within ~1.3x of
greedy or beat it. The best choice seen is returned.
"""
from __future__ import annotations

import math
import time

import numpy as np

from pase.errors import OptionError, ProblemError, check_common, check_float, check_int
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS

DEFAULT_ITERATIONS = 200_000
DEFAULT_BETA = 50.0
# Never stop early before this many iterations without improvement, nor before
# PATIENCE_PER_CANDIDATE proposals per candidate in the Problem on average: from
# the data-parallel start, single moves rarely improve at first (measured on the
# Transformer, p=8: 1000 idle moves stopped the chain at the start's cost).
MIN_PATIENCE = 1000
PATIENCE_PER_CANDIDATE = 10
# Guards the division by a zero current cost (then no worse move is accepted).
TINY = 1e-300
# Random numbers are drawn, and the clock read, once per block of this many steps.
BLOCK = 512


@SOLVERS.register("mcmc", "FlexFlow-style MCMC search over single-vertex changes", exact=False)
def solve(problem: Problem, *, time_limit: float | None = None, seed: int | None = None,
          iterations: int = DEFAULT_ITERATIONS, beta: float = DEFAULT_BETA,
          start: tuple[int, ...] | None = None) -> Solution:
    """Metropolis-Hastings from ``start`` (default: the data-parallel strategy).

    Args:
        time_limit: seconds budget (checked every few hundred steps).
        seed: seeds ``np.random.default_rng``; None means 0, so runs are
            reproducible unless a seed is asked for.
        iterations: maximum number of proposed moves.
        beta: inverse temperature on cost changes relative to the current cost.
        start: a choice to start from. Default: the data-parallel strategy when the
            Problem carries candidate configs (as FlexFlow starts), else all zeros.

    Stops early, as FlexFlow does, once half the elapsed search brought no
    improvement: when the iterations since the best exceed
    ``max(patience, iteration of the best)`` with ``patience`` the larger of
    MIN_PATIENCE and PATIENCE_PER_CANDIDATE proposals per candidate. Under a memory cap, moves that
    break the cap are rejected; a start that does not fit is replaced by the
    lowest-memory choice (INFEASIBLE if even that does not fit). Status is
    FEASIBLE, no lower bound.

    Examples:
        >>> from pase.testing import random_problem
        >>> p = random_problem(8, seed=3)
        >>> solve(p, seed=1).choice == solve(p, seed=1).choice
        True
    """
    check_common(time_limit, seed)
    iterations = check_int("iterations", iterations, 1)
    beta = check_float("beta", beta, 0.0)
    start_kind = "given"
    if start is None:
        start, start_kind = _default_start(problem)
    try:
        first = problem.check_choice(start).copy()
    except ProblemError as error:
        raise OptionError(f"start: {error}") from None
    stats: dict = {"start": start_kind}
    if not problem.fits(first):
        first = np.array([int(np.argmin(m)) for m in problem.memory], dtype=np.int64)
        stats["start"] = "lowest memory"
        if not problem.fits(first):
            return Solution(None, float("inf"), Status.INFEASIBLE, "mcmc", stats=stats)
    best, steps = _chain(problem, first, np.random.default_rng(0 if seed is None else seed),
                         iterations, beta, time_limit)
    stats.update(steps)
    choice = tuple(int(c) for c in best)
    return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, "mcmc", stats=stats)


def _chain(problem: Problem, choice: np.ndarray, rng: np.random.Generator, iterations: int,
           beta: float, time_limit: float | None) -> tuple[np.ndarray, dict]:
    t0 = time.perf_counter()
    n = problem.num_vertices
    current = problem.evaluate(choice)
    movable = np.flatnonzero(problem.sizes > 1)
    if movable.size == 0 or iterations == 0 or not math.isfinite(current):
        why = "start cost is inf" if not math.isfinite(current) else "nothing to search"
        return choice, {"iterations": 0, "accepted": 0, "stop": why}
    # Python lists: scalar indexing of lists is several times faster than of arrays.
    vcost = [c.tolist() for c in problem.vertex_costs]
    # Per vertex: (neighbour, table) with table[mine][theirs] the edge cost.
    adj = [[(w, m.tolist()) for w, m in problem.incident(v)] for v in range(n)]
    cap = problem.memory_cap
    mem = [m.tolist() for m in problem.memory] if cap is not None else None
    used = problem.memory_of(choice)
    cur = choice.tolist()
    sizes = problem.sizes.tolist()

    patience = max(MIN_PATIENCE, PATIENCE_PER_CANDIDATE * sum(sizes))
    best, best_cost, best_at = list(cur), current, 0
    accepted, it, stop = 0, 0, "iterations"
    while it < iterations:
        if time_limit is not None and time.perf_counter() - t0 >= time_limit:
            stop = "time_limit"
            break
        block = min(BLOCK, iterations - it)
        verts = movable[rng.integers(0, movable.size, size=block)].tolist()
        shifts = rng.random(block).tolist()
        coins = rng.random(block).tolist()
        for k in range(block):
            it += 1
            v = verts[k]
            old = cur[v]
            new = (old + 1 + int(shifts[k] * (sizes[v] - 1))) % sizes[v]  # uniform over others
            if mem is not None and used - mem[v][old] + mem[v][new] > cap:
                continue
            delta = vcost[v][new] - vcost[v][old]
            for w, table in adj[v]:
                row_new, row_old = table[new], table[old]
                delta += row_new[cur[w]] - row_old[cur[w]]
            if delta <= 0 or coins[k] < math.exp(-beta * delta / max(abs(current), TINY)):
                cur[v] = new
                current += delta
                accepted += 1
                if mem is not None:
                    used += mem[v][new] - mem[v][old]
                if current < best_cost:
                    best, best_cost, best_at = list(cur), current, it
            if it - best_at > max(patience, best_at):
                stop = "no improvement"
                break
        if stop != "iterations":
            break
    best_arr = np.array(best, dtype=np.int64)
    if not problem.fits(best_arr):  # incremental memory drifted across the cap
        best_arr = choice
    return best_arr, {"iterations": it, "accepted": accepted, "stop": stop,
                      "best_iteration": best_at}


def _default_start(problem: Problem) -> tuple[tuple[int, ...], str]:
    """FlexFlow starts from data parallelism; without candidate configs, from zeros."""
    if problem.candidates is not None:
        from pase.solvers.baselines import data_parallel_choice

        return data_parallel_choice(problem), "data-parallel"
    return (0,) * problem.num_vertices, "zeros"
