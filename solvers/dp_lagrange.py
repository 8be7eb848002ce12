"""Lagrangian bounds for the capped PaSE DP (:mod:`pase.solvers.dp_memory`).

Relaxing the cap with a multiplier ``lam >= 0`` leaves the plain DP on
``cost + lam * memory``: its minimum, less ``lam * cap``, bounds the capped
optimum from below, and its minimiser, when it fits, bounds it from above.
:func:`lagrange` searches ``lam`` (the 1-D cutting-plane method) and returns,
for the best one, the inside tables (the plain DP's ``R(i)`` over ``D(i)``) and
outside tables (the least value of everything outside ``X(i)``, per ``D(i)``
configuration), so that any partial strategy's completions can be bounded.

The dense per-step arithmetic is chunked by rows of the first axis, like the
plain DP, so no step holds more than a few MiB of temporaries beyond its tables.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pase.problem import Problem
from pase.solvers.dp_plan import CHUNK_BYTES, VALUE_BYTES, sum_into
from pase.solvers.ordering import Elimination

# Slack of the Lagrangian cost bounds, relative to the summed magnitudes of the
# terms: far above the rounding of a few thousand float64 additions.
BOUND_RTOL = 1e-11
# Plain DPs the Lagrangian search may spend (bracketing over many orders of
# magnitude, then typically under ten cutting-plane steps), and its tolerance
# for "the DP found nothing below the crossing of two lines".
LAGRANGE_RUNS = 40
LAGRANGE_RTOL = 1e-12
# Bracketing steps of the multiplier, as a factor.
LAGRANGE_STEP = 16.0

Choice = tuple[int, ...]
# The plain DP on cost + lam * memory: lam -> (a minimiser, the minimum).
Minimiser = Callable[[float], tuple[Choice, float]]


@dataclass
class Bound:
    """The Lagrangian bound at one multiplier: ``lam``, inside and outside tables."""

    lam: float
    inside: list[np.ndarray]
    outside: list[np.ndarray]
    slack: float      # rounding allowance of the bound, in cost units


class Tables:
    """Dense per-step arrays of one Problem under one elimination, in row chunks."""

    def __init__(self, problem: Problem, elim: Elimination):
        assert problem.memory is not None
        self.problem, self.elim = problem, elim
        self.sizes = [int(k) for k in problem.sizes]
        self.memory = problem.memory
        self.edge_cost = dict(zip(problem.edges, problem.edge_costs))

    def full(self, i: int) -> tuple[int, ...]:
        """Axes of step ``i``'s work: ``D(i)`` then ``v(i)``, in table order."""
        return self.elim.dependent[i] + (self.elim.order[i],)

    def shape(self, axes: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.sizes[u] for u in axes)

    def terms(self, i: int, lam: float = 0.0) -> list[np.ndarray]:
        """Vertex and edge costs step ``i`` adds (plus ``lam`` times v's memory),
        as views over its full axes."""
        v, full = self.elim.order[i], self.full(i)
        own = self.problem.vertex_costs[v]
        if lam:
            own = own + lam * self.memory[v]
        out = [expand(own, (v,), full)]
        for u in self.elim.later_neighbors[i]:
            matrix = self.edge_cost[(u, v)] if u < v else self.edge_cost[(v, u)].T
            out.append(expand(matrix, (u, v), full))
        return out

    def blocks(self, i: int) -> Iterator[tuple[int, int]]:
        """Row ranges of the first axis, each about CHUNK_BYTES of float64.

        A root (no dependent set) is one block: its only axis is reduced.
        """
        shape = self.shape(self.full(i))
        if len(shape) == 1:
            yield 0, shape[0]
            return
        rows = max(1, CHUNK_BYTES // (VALUE_BYTES * math.prod(shape[1:])))
        for r0 in range(0, shape[0], rows):
            yield r0, min(r0 + rows, shape[0])

    def inside(self, lam: float) -> list[np.ndarray]:
        """The plain DP's value tables ``R(i)`` on ``cost + lam * memory``."""
        elim, values = self.elim, []
        for i in range(len(elim.order)):
            full = self.full(i)
            shape = self.shape(full)
            arrays = fold(self.terms(i, lam) + [expand(values[j], elim.dependent[j], full)
                                                 for j in elim.children[i]])
            table = np.empty(shape[:-1])
            for r0, r1 in self.blocks(i):
                target = table[r0:r1] if table.ndim else table
                target[...] = block_sum(arrays, r0, r1, shape).min(axis=-1)
            values.append(table)
        return values

    def outside(self, lam: float, inside: list[np.ndarray]) -> list[np.ndarray]:
        """Per step, per ``D(i)`` configuration: the least ``cost + lam * memory`` of
        everything outside ``X(i)`` (edges from ``X(i)`` to ``D(i)`` count as inside)."""
        elim = self.elim
        out: list[np.ndarray] = [np.empty(0)] * len(elim.order)
        roots = elim.roots
        for r in roots:
            out[r] = np.array(sum(float(inside[q]) for q in roots if q != r), dtype=np.float64)
        for i in reversed(range(len(elim.order))):
            dep, kids, full = elim.dependent[i], elim.children[i], self.full(i)
            shape = self.shape(full)
            base = self.terms(i, lam) + [expand(out[i], dep, full)]
            for j in kids:
                arrays = fold(base + [expand(inside[k], elim.dependent[k], full)
                                       for k in kids if k != j])
                kept = set(elim.dependent[j])
                drop = tuple(a for a, u in enumerate(full) if u not in kept)
                result = np.full(self.shape(elim.dependent[j]), np.inf)
                for r0, r1 in self.blocks(i):
                    part = block_sum(arrays, r0, r1, shape).min(axis=drop)
                    if dep and dep[0] in kept:  # the rows are the result's first axis
                        result[r0:r1] = part
                    else:
                        np.minimum(result, part, out=result)
                out[j] = result
        return out


def lagrange(tables: Tables, cap: float, minimise: Minimiser, tick: Callable[[str], None],
              ) -> tuple[Bound, tuple[Choice, float] | None, dict[str, Any]]:
    """Maximise the Lagrangian dual ``min(cost + lam * memory) - lam * cap`` over ``lam``.

    The dual is concave and piecewise linear: each strategy is a line. Bracket
    the multiplier where the minimiser starts to fit (between 0, where it does
    not, and the least-memory strategy, or by geometric steps), then jump to
    where the lines of the two bracketing minimisers cross; when the
    DP finds nothing below that crossing it is the maximum (the 1-D cutting
    plane method, finite on a finite set of strategies). Every run gives a
    lower bound and, when its minimiser fits, an upper bound. Returns the best
    multiplier's tables, the best fitting strategy, and statistics.
    """
    problem = tables.problem
    best: tuple[Choice, float] | None = None
    top = (-math.inf, 0.0)  # (best lower bound, its multiplier)
    runs = 0

    def run(lam: float) -> tuple[bool, float, float, float]:
        """(fits, cost, memory, DP minimum) of a minimiser at ``lam``."""
        nonlocal best, top, runs
        runs += 1
        choice, total = minimise(lam)
        tick("searching the Lagrange multiplier")
        if total == math.inf:  # lam * memory overflowed: treat lam as too large
            return True, math.inf, -math.inf, math.inf
        top = max(top, (total - lam * cap, lam))
        cost, fits = problem.evaluate(choice), problem.fits(choice)
        if fits and (best is None or cost < best[1]):
            best = (choice, cost)
        return fits, cost, problem.memory_of(choice), total

    lo = (0.0,) + run(0.0)[1:3]  # the unconstrained optimum: it does not fit
    hi: tuple[float, float, float] | None = None
    # Each vertex at its least memory (the cheapest such candidate) fits the
    # cap; when its cost is finite its line closes the bracket at lam = inf.
    least = tuple(int(np.lexsort((c, m))[0])
                  for c, m in zip(problem.vertex_costs, tables.memory))
    cost = problem.evaluate(least)
    if math.isfinite(cost) and problem.fits(least):
        hi = (math.inf, cost, problem.memory_of(least))
        best = (least, cost)
    # Otherwise step from a multiplier that weighs the memory spread like the cost scale.
    spread = sum(finite_max(m) - finite_min(m) for m in tables.memory)
    scale = sum(finite_max(np.abs(c)) for c in problem.vertex_costs)
    lam = max(scale, 1.0) / max(spread, 1e-300)
    while hi is None and runs < LAGRANGE_RUNS and 1e-300 < lam < 1e300:
        fits, cost, mem, _ = run(lam)
        if fits:
            hi = (lam, cost, mem)
            if lo[0] > 0.0:
                break
            lam /= LAGRANGE_STEP
        else:
            lo = (lam, cost, mem)
            if hi is not None:
                break
            lam *= LAGRANGE_STEP
    while runs < LAGRANGE_RUNS and hi is not None and math.isfinite(hi[1]) and lo[2] > hi[2]:
        lam = (hi[1] - lo[1]) / (lo[2] - hi[2])
        if not lo[0] < lam < hi[0]:  # rounding: fall back to bisection
            lam = 0.5 * (lo[0] + hi[0])
            if not lo[0] < lam < hi[0]:
                break
        crossing = lo[1] + lam * lo[2]
        fits, cost, mem, total = run(lam)
        if total >= crossing - LAGRANGE_RTOL * abs(crossing):
            break  # no strategy below both lines: lam maximises the dual
        if fits:
            hi = (lam, cost, mem)
        else:
            lo = (lam, cost, mem)
    lower, lam = top
    stats: dict[str, Any] = {"lagrangian_runs": runs, "lagrangian_bound": lower,
                             "lagrangian_multiplier": lam,
                             "lagrangian_upper": None if best is None else best[1]}
    magnitude = (sum(finite_max(np.abs(c)) for c in problem.vertex_costs + problem.edge_costs)
                 + lam * (abs(cap) + sum(finite_max(np.abs(m)) for m in tables.memory)))
    inside = tables.inside(lam)
    outside = tables.outside(lam, inside)
    tick("computing the Lagrangian bounds")
    return Bound(lam, inside, outside, BOUND_RTOL * magnitude), best, stats


def fold(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same broadcast sum with fewer terms: each joins a larger one it fits in.

    Adding a small term into a copy of a larger one costs the larger one's
    size, far less than one more pass over the full block.
    """
    bases: list[np.ndarray] = []
    for a in sorted(arrays, key=lambda a: -a.size):
        host = next((b for b in bases if all(x in (1, y) for x, y in zip(a.shape, b.shape))),
                    None)
        if host is None:
            bases.append(np.array(a, dtype=np.float64, order="C"))  # a copy: terms are views
        else:
            host += a
    return bases


def block_sum(arrays: list[np.ndarray], r0: int, r1: int, shape: tuple[int, ...]) -> np.ndarray:
    """Rows ``r0:r1`` of the broadcast sum of ``arrays`` over ``shape``."""
    return sum_into(np.empty((r1 - r0,) + shape[1:]), [rows(a, r0, r1) for a in arrays])


def rows(array: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """Rows ``r0:r1`` of a term, or the term itself when it broadcasts along them."""
    return array[r0:r1] if array.ndim and array.shape[0] != 1 else array


def finite_max(values: np.ndarray) -> float:
    return float(values[np.isfinite(values)].max(initial=0.0))


def finite_min(values: np.ndarray) -> float:
    return float(values[np.isfinite(values)].min(initial=0.0))


def expand(array: np.ndarray, axes: tuple[int, ...], target: tuple[int, ...]) -> np.ndarray:
    """View of ``array`` over ``axes`` with singleton axes, to broadcast over ``target``.

    Both are in table order (latest position first), as in the plain DP.
    """
    present = set(axes)
    return np.asarray(array)[tuple(slice(None) if a in present else None for a in target)]
