"""Reference dynamic programs for chains and trees: short, plain, the graders' oracle.

Both return ``(cost, choice)`` for a Problem without a memory cap.

    >>> from pase.testing import random_chain
    >>> cost, choice = reference_chain_dp(random_chain(5, seed=0))
"""
from __future__ import annotations

from pase.errors import ProblemError
from pase.problem import Problem


def reference_chain_dp(problem: Problem) -> tuple[float, tuple[int, ...]]:
    """Optimum of a chain (edges ``(0, 1), (1, 2), ...``), vertex by vertex."""
    n = problem.num_vertices
    if problem.edges != [(i, i + 1) for i in range(n - 1)] or problem.memory_cap is not None:
        raise ProblemError("reference_chain_dp needs an uncapped chain 0-1-2-...")
    best = problem.vertex_costs[0]  # best[c]: cheapest prefix 0..i with vertex i at c
    came_from = []                  # came_from[i - 1][c]: vertex i-1's candidate behind best[c]
    for i in range(1, n):
        total = best[:, None] + problem.edge_matrix(i - 1, i)  # (K_{i-1}, K_i)
        came_from.append(total.argmin(axis=0))
        best = total.min(axis=0) + problem.vertex_costs[i]
    choice = [int(best.argmin())]
    for back in reversed(came_from):  # walk back from the last vertex
        choice.append(int(back[choice[-1]]))
    return float(best.min()), tuple(reversed(choice))


def reference_tree_dp(problem: Problem) -> tuple[float, tuple[int, ...]]:
    """Optimum of a tree (connected, ``n - 1`` edges), leaves first, rooted at vertex 0."""
    n = problem.num_vertices
    if len(problem.edges) != n - 1 or problem.memory_cap is not None:
        raise ProblemError("reference_tree_dp needs an uncapped tree (n - 1 edges)")
    order, parent, nbrs = [0], {0: -1}, problem.neighbors()  # breadth-first from 0
    for v in order:
        for w in nbrs[v]:
            if w not in parent:
                parent[w] = v
                order.append(w)
    if len(order) != n:
        raise ProblemError("reference_tree_dp needs a connected Problem")
    best = list(problem.vertex_costs)  # best[v][c]: cheapest subtree of v with v at c
    pick = {}                          # pick[v][c]: v's candidate when its parent is at c
    for v in reversed(order[1:]):      # children before their parents
        total = problem.edge_matrix(parent[v], v) + best[v][None, :]  # (K_parent, K_v)
        pick[v] = total.argmin(axis=1)
        best[parent[v]] = best[parent[v]] + total.min(axis=1)
    choice = [0] * n
    choice[0] = int(best[0].argmin())
    for v in order[1:]:                # parents before their children
        choice[v] = int(pick[v][choice[parent[v]]])
    return float(best[0].min()), tuple(choice)
