"""Which edges the decomposition keeps: a spanning forest plus what the dp can afford.

The relaxed Problem keeps every vertex and a subset of the edges; the dp solves it
once per dual step, so its plan must stay small. A maximum spanning forest (weight:
an edge matrix's mean, how much a mismatch across it costs on average) keeps every
component connected at a dependent set of one; the remaining edges are then added in
order, ``first`` (edges the last round found in conflict) before the rest by weight,
as long as the plan stays under ``entries`` table entries. A binary search over that
order finds the longest prefix that fits: a few plans instead of one per edge.

Only the shape is needed (names, sizes, edges) and the weights, so a dry run picks
its edges the same way with every weight equal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from pase.problem import Problem
from pase.solvers.dp.plan import Plan, choose


@dataclass(frozen=True)
class Subgraph:
    """A shape with some of its edges: what the dp's planner reads."""

    names: Sequence[str]
    sizes: np.ndarray
    edges: list[tuple[int, int]]

    @property
    def num_vertices(self) -> int:
        return len(self.names)


def kept_edges(shape: Any, weights: Sequence[float], entries: float, budget: float,
               first: Iterable[int] = ()) -> tuple[list[int], Plan]:
    """Edge indices to keep (sorted) and the dp plan of the shape with only those."""
    by_weight = sorted(range(len(shape.edges)), key=lambda e: (-weights[e], e))
    forest, rest = _spanning_forest(shape.num_vertices, shape.edges, by_weight)
    in_forest = set(forest)
    preferred = [e for e in dict.fromkeys(first) if e not in in_forest]
    chosen_first = set(preferred)
    extra = preferred + [e for e in rest if e not in chosen_first]

    def plan_of(count: int) -> Plan:
        sub = Subgraph(shape.names, shape.sizes, [shape.edges[e] for e in sorted(forest + extra[:count])])
        return choose(sub, "auto", budget, limit_bytes=budget)[0]

    def fits(p: Plan) -> bool:
        return p.complete and p.fits(budget) and p.table_entries <= entries

    lo, hi = 0, len(extra)
    while lo < hi:  # the longest prefix of ``extra`` whose plan fits
        mid = (lo + hi + 1) // 2
        if fits(plan_of(mid)):
            lo = mid
        else:
            hi = mid - 1
    return sorted(forest + extra[:lo]), plan_of(lo)


def edge_weights(problem: Problem) -> list[float]:
    """Each edge matrix's mean; a matrix shared by many edges (repeated layers) is read once."""
    means: dict[int, float] = {}
    for m in problem.edge_costs:
        if id(m) not in means:
            means[id(m)] = float(m.mean())
    return [means[id(m)] for m in problem.edge_costs]


def keep_only(problem: Problem, edges: list[int]) -> Problem:
    """``problem`` with only the given edges (its vertex costs, memory and cap)."""
    return Problem(problem.vertex_costs, [problem.edges[e] for e in edges],
                   [problem.edge_costs[e] for e in edges], names=problem.names,
                   memory=problem.memory, memory_cap=problem.memory_cap, unit=problem.unit,
                   devices=problem.devices)


def _spanning_forest(n: int, edges: Sequence[tuple[int, int]],
                     order: list[int]) -> tuple[list[int], list[int]]:
    """Kruskal over ``order``: the forest's edges, and the others in the same order."""
    parent = list(range(n))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    forest, rest = [], []
    for e in order:
        a, b = (root(x) for x in edges[e])
        if a == b:
            rest.append(e)
        else:
            parent[a] = b
            forest.append(e)
    return forest, rest
