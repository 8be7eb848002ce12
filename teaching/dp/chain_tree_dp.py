"""Assignment 1: exact solvers for chains and trees by dynamic programming.

Fill in ``solve_chain`` (Part 1) and ``solve_tree`` (Part 2); the statement is
``teaching/dp/README.md``. Grade with ``pytest teaching/dp`` from the repository root.
"""
from __future__ import annotations

import numpy as np  # noqa: F401  (you will want it)

from pase.errors import ProblemError  # noqa: F401  (raise it for Problems you cannot solve)
from pase.problem import Problem, Solution, Status  # noqa: F401
from pase.registry import SOLVERS


@SOLVERS.register("student-chain-dp", "assignment 1: dynamic program over a chain",
                  exact=True, scope="chain", memory_cap=False)
def solve_chain(problem: Problem, *, time_limit: float | None = None,
                seed: int | None = None) -> Solution:
    """The cheapest choice for a chain 0-1-2-...-(n-1), by dynamic programming."""
    raise NotImplementedError(
        "Part 1: keep best[c], the cheapest cost of vertices 0..i with vertex i at c; "
        "step with (best[:, None] + problem.edge_matrix(i - 1, i)).min(axis=0) plus the "
        "vertex costs, remember the argmin, and walk back from the last vertex")


@SOLVERS.register("student-tree-dp", "assignment 1: dynamic program over a tree",
                  exact=True, scope="tree", memory_cap=False)
def solve_tree(problem: Problem, *, time_limit: float | None = None,
               seed: int | None = None) -> Solution:
    """The cheapest choice for a tree (connected, n - 1 edges), leaves first."""
    raise NotImplementedError(
        "Part 2: order the vertices breadth-first from vertex 0 (problem.neighbors()), "
        "fold each child's min over d of (edge_matrix(parent, child)[:, d] + best[child][d]) "
        "into its parent in reverse order, then pick candidates from the root down")
