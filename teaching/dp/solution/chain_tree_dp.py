"""Assignment 1, a reference solution: exact chain and tree dynamic programs.

Written apart from ``pase.testing.reference`` (the grader's oracle) so each checks
the other: the chain runs from the last vertex back to the first, the tree from
an explicit depth-first stack.
"""
from __future__ import annotations

import numpy as np

from pase.errors import ProblemError
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS


def _refuse_caps(problem: Problem, name: str) -> None:
    if problem.memory_cap is not None:
        raise ProblemError(f"{name} does not handle memory caps; use solver 'dp'")


def _answer(problem: Problem, choice: list[int], name: str) -> Solution:
    picked = tuple(int(c) for c in choice)
    cost = problem.evaluate(picked)
    return Solution(picked, cost, Status.OPTIMAL, name, lower_bound=cost)


@SOLVERS.register("student-chain-dp", "assignment 1: dynamic program over a chain",
                  exact=True, scope="chain", memory_cap=False)
def solve_chain(problem: Problem, *, time_limit: float | None = None,
                seed: int | None = None) -> Solution:
    """The cheapest choice for a chain 0-1-2-...-(n-1), by dynamic programming."""
    n = problem.num_vertices
    if problem.edges != [(i, i + 1) for i in range(n - 1)]:
        raise ProblemError("student-chain-dp needs a chain: edges (0, 1), (1, 2), ... only")
    _refuse_caps(problem, "student-chain-dp")
    # togo[c]: cheapest cost of vertices i..n-1 with vertex i at candidate c.
    togo = problem.vertex_costs[n - 1]
    nxt: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * n  # nxt[i][c]: best pick at i + 1
    for i in range(n - 2, -1, -1):
        total = problem.edge_matrix(i, i + 1) + togo[None, :]  # (K_i, K_{i+1})
        nxt[i] = total.argmin(axis=1)
        togo = problem.vertex_costs[i] + total.min(axis=1)
    choice = [int(np.argmin(togo))]
    for i in range(n - 1):
        choice.append(int(nxt[i][choice[-1]]))
    return _answer(problem, choice, "student-chain-dp")


@SOLVERS.register("student-tree-dp", "assignment 1: dynamic program over a tree",
                  exact=True, scope="tree", memory_cap=False)
def solve_tree(problem: Problem, *, time_limit: float | None = None,
               seed: int | None = None) -> Solution:
    """The cheapest choice for a tree (connected, n - 1 edges), leaves first."""
    n = problem.num_vertices
    if len(problem.edges) != n - 1:
        raise ProblemError(f"student-tree-dp needs a tree: {n} vertices need {n - 1} edges, "
                           f"got {len(problem.edges)}")
    _refuse_caps(problem, "student-tree-dp")
    neighbors = problem.neighbors()
    parent = [-2] * n
    parent[0], stack, preorder = -1, [0], []
    while stack:  # depth-first, parents before children
        v = stack.pop()
        preorder.append(v)
        for w in neighbors[v]:
            if parent[w] == -2:
                parent[w] = v
                stack.append(w)
    if len(preorder) != n:
        raise ProblemError("student-tree-dp needs a connected Problem")
    sub = [c.copy() for c in problem.vertex_costs]  # sub[v][c]: cheapest subtree of v, v at c
    follow: dict[int, np.ndarray] = {}              # follow[w][c]: w's pick when its parent is at c
    for w in reversed(preorder[1:]):
        total = problem.edge_matrix(parent[w], w) + sub[w][None, :]
        follow[w] = total.argmin(axis=1)
        sub[parent[w]] += total.min(axis=1)
    choice = [0] * n
    choice[0] = int(np.argmin(sub[0]))
    for w in preorder[1:]:
        choice[w] = int(follow[w][choice[parent[w]]])
    return _answer(problem, choice, "student-tree-dp")
