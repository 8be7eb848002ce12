"""Vertex orderings for the PaSE dynamic program, and the sets they induce.

An ordering is a function ``order(problem) -> list[int]`` over the Problem's
undirected graph. :func:`eliminate` turns an order into the DP's structure: for
each position ``i`` the dependent set ``D(i)`` and the connected subsets
``S(i)`` (each identified by the position of its last vertex), from which the
connected set ``X(i)`` follows.

Two rules give ``D(i)``:

- ``"connected"`` (the paper's GenerateSeq DP): ``X(i)`` is what ``v(i)``
  reaches through the first ``i`` vertices, ``D(i) = N(X(i))`` among later
  vertices, and ``S(i)`` the components of ``X(i) - {v(i)}``.
- ``"prefix"`` (the paper's breadth-first "BF" baseline): ``X(i)`` is every
  vertex up to ``i``, ``D(i) = N(V<=i) ∩ V>i``, and the only child is ``i - 1``.

Examples:
    >>> import numpy as np
    >>> from pase.problem import Problem
    >>> path = Problem([np.zeros(2)] * 3, [(0, 1), (1, 2)], [np.zeros((2, 2))] * 2)
    >>> generateseq(path)
    [0, 1, 2]
    >>> e = eliminate(path, [1, 0, 2])
    >>> e.dependent, e.children
    (((2, 0), (2,), ()), ((), (0,), (1,)))
    >>> fill_in(path, [1, 0, 2])  # eliminating 1 first joins 0 and 2
    1
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from pase.errors import OptionError
from pase.problem import Problem

RULES = ("connected", "prefix")


def _adjacency(problem: Problem) -> list[set[int]]:
    return [set(nbrs) for nbrs in problem.neighbors()]


def _eliminate_vertex(d: list[set[int]], v: int) -> None:
    """Join ``v``'s remaining neighbours pairwise and drop ``v`` from their sets."""
    for u in d[v]:
        d[u] |= d[v]
        d[u] -= {u, v}


def generateseq(problem: Problem) -> list[int]:
    """The paper's GenerateSeq: minimum-degree elimination order.

    Ties go to the lowest vertex index (the earliest-built op).
    """
    d = _adjacency(problem)
    heap = [(len(d[v]), v) for v in range(problem.num_vertices)]
    heapq.heapify(heap)
    done = [False] * problem.num_vertices
    order: list[int] = []
    while heap:
        degree, v = heapq.heappop(heap)
        if done[v] or degree != len(d[v]):
            continue  # a stale heap entry; the fresh one is still queued
        done[v] = True
        order.append(v)
        _eliminate_vertex(d, v)
        for u in d[v]:
            heapq.heappush(heap, (len(d[u]), u))
    return order


def bfs(problem: Problem) -> list[int]:
    """Breadth-first order from vertex 0, neighbours in index order.

    Each further component restarts at its lowest unvisited vertex. The DP
    pairs this order with the "prefix" rule, reproducing the paper's BF column.
    """
    adj = [sorted(nbrs) for nbrs in problem.neighbors()]
    seen = [False] * problem.num_vertices
    order: list[int] = []
    for start in range(problem.num_vertices):
        if seen[start]:
            continue
        seen[start] = True
        queue = deque([start])
        while queue:
            v = queue.popleft()
            order.append(v)
            for u in adj[v]:
                if not seen[u]:
                    seen[u] = True
                    queue.append(u)
    return order


def _fill(d: list[set[int]], v: int) -> int:
    """Edges that eliminating ``v`` would add between its current neighbours."""
    nbrs = sorted(d[v])
    return sum(1 for k, a in enumerate(nbrs) for b in nbrs[k + 1:] if b not in d[a])


def min_fill(problem: Problem) -> list[int]:
    """Minimum fill-in elimination order.

    Picks the vertex whose elimination adds the fewest fill edges; ties go to
    the smaller current degree, then the lowest index.
    """
    d = _adjacency(problem)
    remaining = set(range(problem.num_vertices))
    key = {v: (_fill(d, v), len(d[v]), v) for v in remaining}
    order: list[int] = []
    while remaining:
        v = min(remaining, key=key.__getitem__)
        remaining.remove(v)
        order.append(v)
        nbrs = d[v]
        _eliminate_vertex(d, v)
        # Only the neighbours and their neighbours can see their fill change.
        dirty = set(nbrs)
        for u in nbrs:
            dirty |= d[u]
        for u in dirty:
            key[u] = (_fill(d, u), len(d[u]), u)
        del key[v]
    return order


def fill_in(problem: Problem, order: Sequence[int]) -> int:
    """Number of fill edges that eliminating the vertices in ``order`` adds."""
    d = _adjacency(problem)
    fill = 0
    for v in order:
        fill += _fill(d, v)
        _eliminate_vertex(d, v)
    return fill


ORDERINGS: Mapping[str, Callable[[Problem], list[int]]] = MappingProxyType({
    "generateseq": generateseq,
    "bfs": bfs,
    "min-fill": min_fill,
})


def rule_for(ordering: str) -> str:
    """The dependent-set rule the DP uses with a named ordering."""
    return "prefix" if ordering == "bfs" else "connected"


@dataclass(frozen=True)
class Elimination:
    """The DP's structure for one order.

    Attributes:
        order: the vertex at each position.
        rule: ``"connected"`` or ``"prefix"`` (see the module docstring).
        dependent: ``D(i)`` per position, latest position first; this is also
            the axis order of the table ``R(i)``.
        children: ``S(i)`` per position, as the positions ``j`` of the last
            vertex of each connected subset, ascending.
        later_neighbors: neighbours of ``v(i)`` at later positions, latest first
            (the edges whose cost step ``i`` adds).
    """

    order: tuple[int, ...]
    rule: str
    dependent: tuple[tuple[int, ...], ...]
    children: tuple[tuple[int, ...], ...]
    later_neighbors: tuple[tuple[int, ...], ...]

    @property
    def roots(self) -> tuple[int, ...]:
        """Positions no later position consumes: one per component (prefix: the last)."""
        consumed = {j for kids in self.children for j in kids}
        return tuple(i for i in range(len(self.order)) if i not in consumed)

    def connected_set(self, i: int) -> tuple[int, ...]:
        """``X(i)``: the vertices whose choices ``R(i)`` has minimised over, sorted."""
        out, stack = [], [i]
        while stack:
            j = stack.pop()
            out.append(self.order[j])
            stack.extend(self.children[j])
        return tuple(sorted(out))

    @property
    def max_dependent_set(self) -> int:
        return max((len(dep) for dep in self.dependent), default=0)


def eliminate(problem: Problem, order: Sequence[int], rule: str = "connected") -> Elimination:
    """Dependent sets and connected subsets of ``order`` under ``rule``.

    Runs in near-linear time in the total size of the dependent sets: the
    connected rule merges components with a union-find, each carrying its
    dependent set.
    """
    if rule not in RULES:
        raise OptionError(f"unknown dependent-set rule {rule!r}; choose from {', '.join(RULES)}")
    n = problem.num_vertices
    order = tuple(int(v) for v in order)
    if sorted(order) != list(range(n)):
        raise OptionError(f"an order must be a permutation of 0..{n - 1}, got {list(order)}")
    pos = [0] * n
    for i, v in enumerate(order):
        pos[v] = i
    adj = problem.neighbors()
    later = [tuple(sorted((u for u in adj[v] if pos[u] > i), key=lambda u: -pos[u]))
             for i, v in enumerate(order)]

    def by_position(vertices: set[int]) -> tuple[int, ...]:
        return tuple(sorted(vertices, key=lambda u: -pos[u]))

    dependent: list[tuple[int, ...]] = []
    children: list[tuple[int, ...]] = []
    if rule == "prefix":
        frontier: set[int] = set()
        for i, v in enumerate(order):
            frontier.discard(v)
            frontier.update(later[i])
            dependent.append(by_position(frontier))
            children.append((i - 1,) if i else ())
    else:
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        last: dict[int, int] = {}          # component root -> position of its last vertex
        deps: dict[int, set[int]] = {}     # component root -> its dependent set
        for i, v in enumerate(order):
            roots = {find(u) for u in adj[v] if pos[u] < i}
            dep = set(later[i])
            for r in roots:
                dep |= deps.pop(r)
                parent[r] = v
            dep.discard(v)
            children.append(tuple(sorted(last.pop(r) for r in roots)))
            last[v], deps[v] = i, dep
            dependent.append(by_position(dep))
    return Elimination(order, rule, tuple(dependent), tuple(children), tuple(later))
