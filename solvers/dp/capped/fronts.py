"""Pareto fronts of (cost, memory) per table entry: one round of the capped DP.

See :mod:`pase.solvers.dp.capped.memory` for the method. Points are flat numpy
arrays grouped by configuration (fronts are CSR tables), so each operation is
vectorised over all configurations and points of a step: no Python loop over
entries. Only a step's first points touch every configuration, in row
blocks; later work is proportional to the surviving points. Each kept point
stores ``v(i)``'s candidate and the index of the point it used in each child's
front, for back-substitution. Equal points keep the first generated (sorts are
stable), so answers are deterministic.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from pase.solvers.dp.capped.lagrange import Bound, Choice, Tables, finite_max
from pase.solvers.dp.kernel import expand
from pase.solvers.dp.ordering import Elimination

if TYPE_CHECKING:
    from pase.solvers.dp.capped.memory import Guard, Screened

# Pruning against the cap compares sums taken in another order than
# Problem.memory_of, so it keeps points up to this relative slack over the cap;
# the final choice is checked with Problem.fits, which decides exactly.
CAP_RTOL = 1e-12
# Pairs of points a Minkowski sum builds at once (about 100 bytes each).
PAIR_CHUNK = 2**21


@dataclass
class Front:
    """A front per table entry: points ``start[e]:start[e + 1]``, memory ascending."""

    start: np.ndarray
    cost: np.ndarray
    mem: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.start)


@dataclass
class _Back:
    """What a step's kept points chose: ``v(i)``'s candidate and a point per child."""

    vertex_choice: np.ndarray
    child_point: list[np.ndarray]


@dataclass
class _Points:
    """Points being built, by flat configuration ``entry`` (non-decreasing)."""

    entry: np.ndarray
    cost: np.ndarray
    mem: np.ndarray
    pointers: list[np.ndarray]

    def take(self, index: np.ndarray) -> _Points:
        return _Points(self.entry[index], self.cost[index], self.mem[index],
                       [p[index] for p in self.pointers])


def pareto_round(tables: Tables, cap: float, bound: Bound, upper: float, guard: Guard,
               screened: Screened) -> tuple[tuple[Choice, float] | None, dict[str, Any]]:
    """One round: the fronts of every step, keeping strategies that may cost <= ``upper``."""
    guard.kept = 0
    problem, elim, memory = tables.problem, tables.elim, tables.memory
    min_mem = np.array([float(m.min()) for m in memory])
    total_min = float(min_mem.sum())
    limit = cap + CAP_RTOL * max(abs(cap), sum(finite_max(np.abs(m)) for m in memory))
    # A point survives while cost + lam * memory + (the rest, at its best) <= ceiling.
    lam, ceiling = bound.lam, upper + bound.slack + bound.lam * cap
    pruning = math.isfinite(ceiling)

    fronts: dict[int, Front] = {}
    backs: list[_Back] = []
    inside_min = [0.0] * len(elim.order)  # least memory X(i) can take
    max_front = 0
    for i, v in enumerate(elim.order):
        dep, kids, full = elim.dependent[i], elim.children[i], tables.full(i)
        shape = tables.shape(full)
        # Least memory outside the points: D(i) as configured, every other
        # vertex at its minimum (a child's minimum leaves as the child joins).
        dep_mem = np.zeros(shape[:-1])
        for u in dep:
            dep_mem = dep_mem + expand(memory[u], (u,), dep)
        rest_min = total_min - float(min_mem[list(full)].sum()) - sum(inside_min[j] for j in kids)
        pts = _first_points(tables, i, bound, screened, dep_mem,
                            rest_min + sum(inside_min[j] for j in kids), limit, ceiling)
        for n, j in enumerate(kids):
            # What the points still lack: D(i), the rest of the graph, later children.
            left = _Leftover(tables, i, bound if pruning else None, dep_mem,
                             rest_min + sum(inside_min[k] for k in kids[n + 1:]), kids[n + 1:])
            pts = _minkowski(pts, fronts.pop(j), partial(left.project, elim.dependent[j]),
                             partial(_prune, left=left, limit=limit, lam=lam, ceiling=ceiling),
                             guard, v)
        # Minimise over v(i): the union of its candidates' fronts per D(i) entry.
        kv, table_size = tables.sizes[v], math.prod(shape[:-1])
        vertex_choice = pts.entry % kv
        pts.entry = pts.entry // kv
        keep = _pareto(pts.entry, pts.cost, pts.mem)
        pts, vertex_choice = pts.take(keep), vertex_choice[keep]
        start = np.zeros(table_size + 1, dtype=np.int64)
        np.cumsum(np.bincount(pts.entry, minlength=table_size), out=start[1:])
        fronts[i] = Front(start, pts.cost, pts.mem)
        backs.append(_Back(vertex_choice.astype(np.min_scalar_type(max(kv - 1, 0))),
                           [_compact(p) for p in pts.pointers]))
        guard.keeping(pts.cost.size, v)
        max_front = max(max_front, int(fronts[i].counts.max(initial=0)))
        inside_min[i] = float(min_mem[v]) + sum(inside_min[j] for j in kids)
        guard.tick(f"after {i + 1} of {len(elim.order)} vertices")

    # The components' fronts are independent: sum them like children of a
    # vertex-less root with one configuration.
    pts = _Points(np.zeros(1, dtype=np.int64), np.zeros(1), np.zeros(1), [])
    roots = elim.roots
    for n, r in enumerate(roots):
        mem_rest = total_min - sum(inside_min[q] for q in roots[:n + 1])
        lag_rest = sum(float(bound.inside[q]) for q in roots[n + 1:]) if pruning else 0.0

        left = _Leftover(tables, None, bound if pruning else None, np.zeros(()), mem_rest, (),
                         lag_rest)
        pts = _minkowski(pts, fronts.pop(r), np.zeros_like,
                         partial(_prune, left=left, limit=limit, lam=lam, ceiling=ceiling),
                         guard, None)
    stats = {"front_points": {"total": guard.kept, "max_per_entry": max_front,
                              "max_generated": guard.generated_max,
                              "final": int(pts.cost.size)}}
    # Cheapest first (the front is memory ascending, cost descending); Problem.fits
    # has the last word on points within rounding of the cap.
    for p in range(pts.cost.size - 1, -1, -1):
        choice = _back_substitute(elim, backs, roots, [q[p] for q in pts.pointers])
        if problem.fits(choice):
            return (choice, float(pts.cost[p])), stats
    return None, stats


class _Leftover:
    """Least memory and least Lagrangian value of what step ``i``'s points still lack.

    That is ``D(i)`` as configured, the ``pending`` children and every vertex
    outside ``X(i)`` and ``D(i)``; ``i = None`` is the final sum of the components,
    with ``rest`` (least memory) and ``lag_rest`` (Lagrangian value) given.
    """

    def __init__(self, tables: Tables, i: int | None, bound: Bound | None,
                 dep_mem: np.ndarray, rest: float, pending: tuple[int, ...],
                 lag_rest: float = 0.0):
        self.tables, self.bound, self.dep_mem = tables, bound, dep_mem.reshape(-1)
        self.rest, self.pending, self.lag_rest = rest, pending, lag_rest
        self.full = () if i is None else tables.full(i)
        self.shape = tables.shape(self.full)
        self.outside = None if bound is None or i is None else bound.outside[i].reshape(-1)

    def project(self, axes: tuple[int, ...], entry: np.ndarray) -> np.ndarray:
        """Flat indices into a table over ``axes`` of the configurations ``entry``."""
        return _flat(np.unravel_index(entry, self.shape), self.full, axes, self.tables)

    def __call__(self, entry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.full:  # the final sum: nothing depends on a configuration
            lag = self.lag_rest if self.bound is not None else 0.0
            return np.full(entry.size, self.rest), np.full(entry.size, lag)
        dep = self.full[:-1]
        at_dep = self.project(dep, entry)
        mem = self.dep_mem[at_dep] + self.rest
        if self.bound is None or self.outside is None:
            return mem, np.zeros(entry.size)
        lag = self.outside[at_dep]
        for k in self.pending:
            lag = lag + self.bound.inside[k].reshape(-1)[
                self.project(self.tables.elim.dependent[k], entry)]
        return mem, lag


def _prune(pts: _Points, *, left: _Leftover, limit: float, lam: float,
           ceiling: float) -> _Points:
    """Drop points that cannot fit or cannot beat the ceiling, then dominated ones."""
    mem_left, lag_left = left(pts.entry)
    pts = pts.take(_survivors(pts, mem_left, lag_left, limit, lam, ceiling))
    return pts.take(_pareto(pts.entry, pts.cost, pts.mem))


def _first_points(tables: Tables, i: int, bound: Bound, screened: Screened,
                  dep_mem: np.ndarray, rest_min: float, limit: float,
                  ceiling: float) -> _Points:
    """Step ``i``'s configurations that survive pruning, one point each.

    ``rest_min`` is the least memory of every vertex outside ``D(i)`` and
    ``v(i)``. The bound is screened in row blocks over every configuration
    (once per solve while the cache budget lasts); costs and memory are then
    gathered for the few that pass.
    """
    elim, v, full = tables.elim, tables.elim.order[i], tables.full(i)
    dep, shape = elim.dependent[i], tables.shape(full)
    if i in screened.steps:
        entry, value = screened.steps[i]
    else:
        cacheable = math.isfinite(screened.ceiling) and math.isfinite(ceiling)
        entry, value = tables.screen(i, bound, screened.ceiling if cacheable else ceiling)
        if cacheable and value.size <= screened.budget:
            screened.steps[i] = (entry, value)
            screened.budget -= value.size
    if math.isfinite(ceiling):
        entry = entry[value <= ceiling]
    coords = np.unravel_index(entry, shape)
    cost = tables.problem.vertex_costs[v][coords[-1]]
    for u in elim.later_neighbors[i]:
        cost = cost + tables.problem.edge_matrix(u, v)[coords[full.index(u)], coords[-1]]
    mem = tables.memory[v][coords[-1]]
    at = np.flatnonzero(np.isfinite(cost) & (
        mem + dep_mem.reshape(-1)[_flat(coords, full, dep, tables)] + rest_min <= limit))
    return _Points(entry[at], cost[at], mem[at], [])


def _survivors(pts: _Points, mem_left: np.ndarray, lag_left: np.ndarray, limit: float,
               lam: float, ceiling: float) -> np.ndarray:
    """Points that may still fit the cap and beat the best known strategy."""
    ok = pts.mem + mem_left <= limit
    if math.isfinite(ceiling):
        with np.errstate(invalid="ignore"):  # inf - inf: a dead end, dropped as NaN
            ok &= pts.cost + lam * pts.mem + lag_left <= ceiling
    return np.flatnonzero(ok)


def _minkowski(pts: _Points, child: Front, project: Callable[[np.ndarray], np.ndarray],
               prune: Callable[[_Points], _Points], guard: Guard,
               vertex: int | None) -> _Points:
    """Every point of ``pts`` plus every point of the child's front at its entry, pruned.

    ``project`` maps configurations to the child's table entries. Pairs are
    built a run of whole configurations at a time (pruning never looks across
    configurations), about PAIR_CHUNK at once.
    """
    n = pts.entry.size
    first = np.flatnonzero(np.diff(pts.entry, prepend=-1))  # entries are grouped
    count_a = np.diff(np.append(first, n))
    at = project(pts.entry[first])
    count_b, start_b = child.counts[at], child.start[at]
    pairs = count_a * count_b
    ends = np.cumsum(pairs)
    guard.generating(int(ends[-1]) if ends.size else 0, vertex)
    parts, g0 = [], 0
    while g0 < first.size:
        guard.tick(f"combining fronts at vertex {vertex}")  # one vertex can hold minutes
        base = int(ends[g0 - 1]) if g0 else 0
        g1 = max(g0 + 1, int(np.searchsorted(ends, base + PAIR_CHUNK, side="right")))
        group = np.repeat(np.arange(g0, g1), pairs[g0:g1])
        # k-th pair of a group: the (k // count_b)-th point of pts, (k % count_b)-th of the child.
        k = np.arange(base, int(ends[g1 - 1])) - (ends[group] - pairs[group])
        width = count_b[group]
        a = first[group] + k // width
        b = start_b[group] + k % width
        parts.append(prune(_Points(pts.entry[a], pts.cost[a] + child.cost[b],
                                   pts.mem[a] + child.mem[b],
                                   [p[a] for p in pts.pointers] + [b])))
        g0 = g1
    if not parts:
        return _Points(pts.entry[:0], pts.cost[:0], pts.mem[:0],
                       [p[:0] for p in pts.pointers] + [np.zeros(0, dtype=np.int64)])
    return _Points(*(np.concatenate(x) for x in zip(*((q.entry, q.cost, q.mem) for q in parts))),
                   [np.concatenate(x) for x in zip(*(q.pointers for q in parts))])


def _flat(coords: tuple[np.ndarray, ...], full: tuple[int, ...], axes: tuple[int, ...],
          tables: Tables) -> np.ndarray:
    """Flat indices into a table over ``axes`` (a subset of ``full``) at ``coords``."""
    if not axes:
        return np.zeros(coords[0].shape, dtype=np.intp)
    where = {u: a for a, u in enumerate(full)}
    return np.ravel_multi_index(tuple(coords[where[u]] for u in axes), tables.shape(axes))


def _pareto(entry: np.ndarray, cost: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """Indices of each entry's Pareto front, by entry then memory ascending.

    Within an entry sorted by memory then cost, a point survives iff it is
    strictly cheaper than every point before it: a running minimum per entry,
    done for all entries at once on integer keys (cost ranks, offset so earlier
    entries always rank above later ones and never leak into them).
    """
    if entry.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((cost, mem, entry))  # stable: ties keep generation order
    e, c = entry[order], cost[order]
    rank = np.unique(c, return_inverse=True)[1].astype(np.int64).reshape(-1)
    span = int(rank.max()) + 1
    key = (int(e[-1]) - e).astype(np.int64) * span + rank
    best_before = np.minimum.accumulate(key)
    keep = np.ones(order.size, dtype=bool)
    keep[1:] = key[1:] < best_before[:-1]
    return order[keep]


def _compact(pointer: np.ndarray) -> np.ndarray:
    return pointer.astype(np.min_scalar_type(max(int(pointer.max(initial=0)), 0)))


def _back_substitute(elim: Elimination, backs: list[_Back], roots: tuple[int, ...],
                     root_points: list[int]) -> tuple[int, ...]:
    choice = [0] * len(elim.order)
    stack = list(zip(roots, (int(p) for p in root_points)))
    while stack:
        i, p = stack.pop()
        back = backs[i]
        choice[elim.order[i]] = int(back.vertex_choice[p])
        stack.extend((j, int(ptr[p])) for j, ptr in zip(elim.children[i], back.child_point))
    return tuple(choice)
