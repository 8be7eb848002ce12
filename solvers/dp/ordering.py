"""Vertex orderings for the PaSE dynamic program, and the sets they induce.

An ordering is a function ``order(graph, stop=None) -> list[int]`` over
the undirected graph of any object with ``num_vertices`` and ``edges`` (a
Problem, or a ProblemShape with no cost arrays). :func:`eliminate` turns an
order into the DP's structure: for each position ``i`` the dependent set
``D(i)`` and the connected subsets ``S(i)`` (each identified by the position of
its last vertex), from which the connected set ``X(i)`` follows.

Two rules give ``D(i)``:

- ``"connected"`` (the paper's GenerateSeq DP): ``X(i)`` is what ``v(i)``
  reaches through the first ``i`` vertices, ``D(i) = N(X(i))`` among later
  vertices, and ``S(i)`` the components of ``X(i) - {v(i)}``. This is ``v(i)``'s
  neighbourhood in the elimination game, so the orderings that play that game
  (minimum degree, minimum fill) see each ``|D(i)|`` as they go.
- ``"prefix"`` (the paper's breadth-first "BF" baseline): ``X(i)`` is every
  vertex up to ``i``, ``D(i) = N(V<=i) ∩ V>i``, and the only child is ``i - 1``.

``stop`` (for orderings and :func:`eliminate`) is a predicate on a vertex and
its dependent set: the first position it accepts is the last one. The DP
stops where a step could not run (too many axes, too many bytes): on graphs
of thousands of vertices the rest of the game is what is slow.

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
import math
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pase.errors import OptionError

RULES = ("connected", "prefix")
# stop(v, dependent set of v): True makes v's position the last one.
Stop = Callable[[int, Collection[int]], bool]


def adjacency(graph: Any) -> list[set[int]]:
    """Neighbour sets of ``graph`` (anything with ``num_vertices`` and ``edges``)."""
    adj: list[set[int]] = [set() for _ in range(graph.num_vertices)]
    for u, v in graph.edges:
        adj[u].add(v)
        adj[v].add(u)
    return adj


def _eliminate_vertex(d: list[set[int]], v: int) -> None:
    """Join ``v``'s remaining neighbours pairwise and drop ``v`` from their sets."""
    for u in d[v]:
        d[u] |= d[v]
        d[u] -= {u, v}


def generateseq(graph: Any, stop: Stop | None = None) -> list[int]:
    """The paper's GenerateSeq: minimum-degree elimination order.

    Ties go to the lowest vertex index (the earliest-built op). Degrees live in
    a heap with lazy deletion: only the eliminated vertex's neighbours change.
    """
    d = adjacency(graph)
    heap = [(len(d[v]), v) for v in range(graph.num_vertices)]
    heapq.heapify(heap)
    done = [False] * graph.num_vertices
    order: list[int] = []
    while heap:
        degree, v = heapq.heappop(heap)
        if done[v] or degree != len(d[v]):
            continue  # a stale heap entry; the fresh one is still queued
        done[v] = True
        order.append(v)
        if stop is not None and stop(v, d[v]):
            break
        _eliminate_vertex(d, v)
        for u in d[v]:
            heapq.heappush(heap, (len(d[u]), u))
    return order


def bfs(graph: Any, stop: Stop | None = None) -> list[int]:
    """Breadth-first order from vertex 0, neighbours in index order.

    Each further component restarts at its lowest unvisited vertex. The DP
    pairs this order with the "prefix" rule, reproducing the paper's BF column.
    Linear time, so ``stop`` is left to :func:`eliminate`.
    """
    adj = [sorted(nbrs) for nbrs in adjacency(graph)]
    seen = [False] * graph.num_vertices
    order: list[int] = []
    for start in range(graph.num_vertices):
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
    """Edges that eliminating ``v`` would add: pairs of its neighbours not adjacent."""
    nbrs = d[v]
    k = len(nbrs)
    return k * (k - 1) // 2 - sum(len(d[u] & nbrs) for u in nbrs) // 2


def min_fill(graph: Any, stop: Stop | None = None) -> list[int]:
    """Minimum fill-in elimination order.

    Picks the vertex whose elimination adds the fewest fill edges; ties go to
    the smaller current degree, then the lowest index. Keys live in a heap
    with lazy deletion and are updated incrementally (:func:`_update_fill`).
    """
    d = adjacency(graph)
    fill = [_fill(d, v) for v in range(graph.num_vertices)]
    heap = [(fill[v], len(d[v]), v) for v in range(graph.num_vertices)]
    heapq.heapify(heap)
    done = [False] * graph.num_vertices
    order: list[int] = []
    while heap:
        f, degree, v = heapq.heappop(heap)
        if done[v] or f != fill[v] or degree != len(d[v]):
            continue  # stale
        done[v] = True
        order.append(v)
        if stop is not None and stop(v, d[v]):
            break
        changed = _update_fill(d, fill, v)
        _eliminate_vertex(d, v)
        for w in changed:
            heapq.heappush(heap, (fill[w], len(d[w]), w))
    return order


def _update_fill(d: list[set[int]], fill: list[int], v: int) -> set[int]:
    """Update ``fill`` for eliminating ``v`` (``d`` still before it); the vertices changed.

    Eliminating ``v`` makes its neighbourhood ``N`` a clique. A vertex ``w``
    adjacent to both ends of a new edge loses one missing pair. A neighbour
    ``a`` in ``N`` also loses its pairs with ``v`` (one per old neighbour
    ``x`` outside ``N``, set ``R``) and gains its new neighbours ``b``, each
    missing the members of ``R`` it is not adjacent to.
    """
    nbrs = d[v]
    new = {a: nbrs - d[a] - {a} for a in nbrs}
    for a in nbrs:
        rest = d[a] - nbrs
        rest.discard(v)
        fill[a] -= len(rest)
        if new[a] and rest:  # missing pairs between rest and new: all but the edges
            small, large = sorted((rest, new[a]), key=len)
            fill[a] += len(small) * len(large) - sum(len(d[x] & large) for x in small)
    common: Counter[int] = Counter()
    for a in nbrs:
        for b in new[a]:
            if a < b:
                common.update(d[a] & d[b])
    common.pop(v, None)
    for w, count in common.items():
        fill[w] -= count
    return nbrs | common.keys()


def inner_order(graph: Any, kept: Collection[int]) -> list[int]:
    """Greedy minimum-weight elimination of the vertices not in ``kept``, which stay in the graph.

    Weight: the entries of the step's table, ``K_v`` times the product over the
    current neighbours; ties go to the lower index. Repeated blocks
    (:mod:`pase.solvers.dp.blocks.fold`) eliminate a block's inside so.
    """
    d = adjacency(graph)
    sizes = [int(k) for k in graph.sizes]
    left = [v for v in range(graph.num_vertices) if v not in kept]
    order = []
    while left:
        v = min(left, key=lambda u: (sizes[u] * math.prod(sizes[w] for w in d[u]), u))
        left.remove(v)
        order.append(v)
        _eliminate_vertex(d, v)
    return order


def fill_in(graph: Any, order: Sequence[int]) -> int:
    """Number of fill edges that eliminating the vertices in ``order`` adds."""
    d = adjacency(graph)
    fill = 0
    for v in order:
        fill += _fill(d, v)
        _eliminate_vertex(d, v)
    return fill


ORDERINGS: Mapping[str, Callable[..., list[int]]] = MappingProxyType({
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
        order: the vertex at each position; fewer than all vertices when the
            elimination stopped early (see ``complete``).
        rule: ``"connected"`` or ``"prefix"`` (see the module docstring).
        dependent: ``D(i)`` per position, latest position first; this is also
            the axis order of the table ``R(i)``.
        children: ``S(i)`` per position, as the positions ``j`` of the last
            vertex of each connected subset, ascending.
        later_neighbors: neighbours of ``v(i)`` at later positions, latest first
            (the edges whose cost step ``i`` adds).
        complete: whether every vertex has a position.
    """

    order: tuple[int, ...]
    rule: str
    dependent: tuple[tuple[int, ...], ...]
    children: tuple[tuple[int, ...], ...]
    later_neighbors: tuple[tuple[int, ...], ...]
    complete: bool = True

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


def eliminate(graph: Any, order: Sequence[int], rule: str = "connected", *,
              stop: Stop | None = None) -> Elimination:
    """Dependent sets and connected subsets of ``order`` under ``rule``.

    ``order`` is a permutation of the vertices, or a prefix of one when
    ``stop`` is given; the result then ends at the first position ``stop``
    accepts (``complete=False`` when vertices are left). Runs in near-linear
    time in the total size of the dependent sets: the connected rule merges
    components with a union-find, each carrying its dependent set.
    """
    if rule not in RULES:
        raise OptionError(f"unknown dependent-set rule {rule!r}; choose from {', '.join(RULES)}")
    n = graph.num_vertices
    order = tuple(int(v) for v in order)
    placed = set(order)
    if len(placed) != len(order) or not placed <= set(range(n)) or (
            len(order) < n and stop is None):
        raise OptionError(f"an order must be a permutation of 0..{n - 1}, got {list(order)}")
    pos = [n + v for v in range(n)]  # unplaced vertices (a stopped prefix) come last
    for i, v in enumerate(order):
        pos[v] = i
    adj = adjacency(graph)
    dependent: list[tuple[int, ...]] = []
    children: list[tuple[int, ...]] = []
    later: list[tuple[int, ...]] = []
    frontier: set[int] = set()         # prefix rule: N(V<=i) among later vertices
    parent = list(range(n))            # connected rule: union-find of eliminated components
    last: dict[int, int] = {}          # component root -> position of its last vertex
    deps: dict[int, set[int]] = {}     # component root -> its dependent set

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, v in enumerate(order):
        later.append(tuple(sorted((u for u in adj[v] if pos[u] > i), key=lambda u: -pos[u])))
        if rule == "prefix":
            frontier.discard(v)
            frontier.update(later[i])
            dep, kids = set(frontier), ((i - 1,) if i else ())
        else:
            roots = {find(u) for u in adj[v] if pos[u] < i}
            dep = set(later[i])
            for r in roots:
                dep |= deps.pop(r)
                parent[r] = v
            dep.discard(v)
            kids = tuple(sorted(last.pop(r) for r in roots))
            last[v], deps[v] = i, dep
        dependent.append(tuple(sorted(dep, key=lambda u: -pos[u])))
        children.append(kids)
        if stop is not None and stop(v, dep):
            break
    return Elimination(order[:len(dependent)], rule, tuple(dependent), tuple(children),
                       tuple(later), len(dependent) == n)
