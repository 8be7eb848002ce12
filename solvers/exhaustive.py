"""Exact brute force: evaluate every strategy, in vectorised chunks.

The reference every other exact solver is tested against. It refuses, with a
clear error, problems with more strategies than ``max_strategies``.
"""
from __future__ import annotations

import numpy as np

from pase.errors import TooLargeError
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS

DEFAULT_MAX_STRATEGIES = 10**7
# Strategies evaluated per numpy batch: large enough to amortise Python overhead,
# small enough that the (chunk, vertices) index array stays a few tens of MB.
CHUNK = 1 << 18


@SOLVERS.register("exhaustive", "exact brute force over every strategy (small problems only)",
                  exact=True)
def solve(problem: Problem, *, max_strategies: int = DEFAULT_MAX_STRATEGIES,
          time_limit: float | None = None, seed: int | None = None) -> Solution:
    total = problem.num_strategies()
    if total > max_strategies:
        raise TooLargeError(
            f"exhaustive search over {total:.3g} strategies exceeds max_strategies="
            f"{max_strategies:.3g}; use solver 'dp' or raise max_strategies")
    sizes = problem.sizes
    best_cost, best_index, feasible = np.inf, -1, 0
    for start in range(0, total, CHUNK):
        index = np.arange(start, min(start + CHUNK, total), dtype=np.int64)
        # Mixed-radix digits; the first vertex varies slowest, so the lowest index
        # wins ties in lexicographic order of the choice vector.
        choices = np.stack(np.unravel_index(index, tuple(sizes)), axis=1)
        costs = problem.evaluate_many(choices)
        if problem.memory_cap is not None:
            mem = np.zeros(len(index))
            for v, m in enumerate(problem.memory):
                mem += m[choices[:, v]]
            costs[mem > problem.memory_cap] = np.inf
            feasible += int(np.count_nonzero(mem <= problem.memory_cap))
        else:
            feasible += len(index)
        i = int(np.argmin(costs))
        if costs[i] < best_cost:
            best_cost, best_index = float(costs[i]), start + i
    stats = {"strategies": total, "feasible_strategies": feasible}
    if best_index < 0:
        return Solution(None, float("inf"), Status.INFEASIBLE, "exhaustive", stats=stats)
    choice = tuple(int(x) for x in np.unravel_index(best_index, tuple(sizes)))
    return Solution(choice, best_cost, Status.OPTIMAL, "exhaustive", lower_bound=best_cost,
                    stats=stats)
