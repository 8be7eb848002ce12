"""Local search on a full strategy: each vertex in turn moves to its best candidate
given its neighbours' (iterated conditional modes), until no move helps.

The decomposition's relaxed optima ignore the edges it dropped; polishing one on the
whole Problem gives the upper bound its certificate compares with. Under a memory cap
a move is taken only when the strategy still fits.
"""
from __future__ import annotations

import numpy as np

from pase.problem import Problem

# A move must gain more than this share of the vertex's local cost: rounding alone
# must never make two candidates swap back and forth.
_GAIN_RTOL = 1e-12
_MAX_SWEEPS = 50


def polish(problem: Problem, choice: tuple[int, ...]) -> tuple[int, ...]:
    """``choice`` improved by single-vertex moves (deterministic: vertices in index order)."""
    x = list(choice)
    cap = problem.memory_cap
    used = problem.memory_of(x) if cap is not None else 0.0
    for _ in range(_MAX_SWEEPS):
        moved = False
        for v in range(problem.num_vertices):
            local = problem.vertex_costs[v].copy()
            for w, matrix in problem.incident(v):
                local += matrix[:, x[w]]
            if cap is not None:
                room = cap - (used - problem.memory[v][x[v]])
                local = np.where(problem.memory[v] <= room, local, np.inf)
            best = int(np.argmin(local))
            if local[best] < local[x[v]] - _GAIN_RTOL * abs(local[x[v]]):
                if cap is not None:
                    used += problem.memory[v][best] - problem.memory[v][x[v]]
                x[v] = best
                moved = True
        if not moved:
            break
    return tuple(x)
