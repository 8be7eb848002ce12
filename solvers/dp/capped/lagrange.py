"""Lagrangian bounds for the capped PaSE DP (:mod:`pase.solvers.dp.capped.memory`).

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

from pase.array_memo import kept
from pase.problem import Problem
from pase.solvers.dp.kernel import fold, folded, row_blocks
from pase.solvers.dp.ordering import Elimination

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
Axes = tuple[int, ...]
# The plain DP under the solver's plan, on a Problem of the same graph:
# run(problem, keep=False) -> (the minimum, a minimiser, value tables R(i) by
# position when keep is true).
PlainDP = Callable[..., tuple[float, Choice, dict[int, np.ndarray]]]


@dataclass
class Dual:
    """A multiplier found on another route to the same Problem (the folded blocks') and the
    best fitting strategy it saw, if any: the capped dp starts from them."""

    lam: float
    best: tuple[Choice, float] | None


@dataclass
class Bound:
    """The Lagrangian bound at one multiplier: ``lam``, inside and outside tables."""

    lam: float
    inside: list[np.ndarray]
    outside: list[np.ndarray]
    slack: float      # rounding allowance of the bound, in cost units


def shifted(problem: Problem, lam: float) -> Problem:
    """The same graph with vertex costs ``cost + lam * memory`` and no cap."""
    assert problem.memory is not None
    costs = [c + lam * m for c, m in zip(problem.vertex_costs, problem.memory)]
    return Problem(costs, problem.edges, problem.edge_costs, names=problem.names)


class Tables:
    """Per-step terms and tables of one Problem under one elimination."""

    def __init__(self, problem: Problem, elim: Elimination, run: PlainDP | None = None):
        assert problem.memory is not None
        self.problem, self.elim, self.run = problem, elim, run
        self.sizes = [int(k) for k in problem.sizes]
        self.memory = problem.memory

    def full(self, i: int) -> Axes:
        """Axes of step ``i``'s work: ``D(i)`` then ``v(i)``, in table order."""
        return self.elim.dependent[i] + (self.elim.order[i],)

    def shape(self, axes: Axes) -> tuple[int, ...]:
        return tuple(self.sizes[u] for u in axes)

    def terms(self, i: int, lam: float = 0.0) -> tuple[list[np.ndarray], list[Axes]]:
        """Vertex costs (plus ``lam`` times v's memory) and edge costs step ``i``
        adds, with their axes."""
        v = self.elim.order[i]
        own = self.problem.vertex_costs[v]
        if lam:
            own = own + lam * self.memory[v]
        later = self.elim.later_neighbors[i]
        return ([own] + [self.problem.edge_matrix(u, v) for u in later],
                [(v,)] + [(u, v) for u in later])

    def reduce(self, arrays: list[np.ndarray], axes: list[Axes], i: int
               ) -> Iterator[tuple[int, int, np.ndarray]]:
        """Row blocks of step ``i``'s sum of ``arrays`` (folded), over its full axes."""
        full = self.full(i)
        groups = fold(axes, [math.prod(self.sizes[u] for u in a) for a in axes])
        bases = folded(arrays, axes, groups, full)
        return row_blocks(bases, self.shape(full))

    def inside(self, lam: float) -> list[np.ndarray]:
        """The plain DP's value tables ``R(i)`` on ``cost + lam * memory``."""
        assert self.run is not None, "inside tables need the plain DP"
        values = self.run(shifted(self.problem, lam), keep=True)[2]
        return [values[i] for i in range(len(self.elim.order))]

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
            arrays, axes = self.terms(i, lam)
            for j in kids:
                others = [k for k in kids if k != j]
                kept = set(elim.dependent[j])
                drop = tuple(a for a, u in enumerate(full) if u not in kept)
                result = np.full(self.shape(elim.dependent[j]), np.inf)
                for r0, r1, block in self.reduce(
                        arrays + [out[i]] + [inside[k] for k in others],
                        axes + [dep] + [elim.dependent[k] for k in others], i):
                    part = block.min(axis=drop)
                    if dep and dep[0] in kept:  # the rows are the result's first axis
                        result[r0:r1] = part
                    else:
                        np.minimum(result, part, out=result)
                out[j] = result
        return out


    def screen(self, i: int, bound: Bound, reach: float) -> tuple[np.ndarray, np.ndarray]:
        """Configurations of step ``i`` (flat indices) whose Lagrangian bound is at
        most ``reach``, with the bound; with no finite ``reach``, those of finite cost."""
        elim, shape = self.elim, self.shape(self.full(i))
        arrays, axes = self.terms(i)
        if math.isfinite(reach):
            arrays, axes = self.terms(i, bound.lam)
            arrays += [bound.outside[i]] + [bound.inside[j] for j in elim.children[i]]
            axes += [elim.dependent[i]] + [elim.dependent[j] for j in elim.children[i]]
        row_entries = math.prod(shape[1:])
        entries, values = [], []
        for r0, _, block in self.reduce(arrays, axes, i):
            total = block.reshape(-1)
            at = np.flatnonzero(total <= reach if math.isfinite(reach) else total < math.inf)
            entries.append(at + r0 * row_entries)
            values.append(total[at])
        return np.concatenate(entries), np.concatenate(values)


def lagrange(tables: Tables, cap: float, free: tuple[Choice, float] | None,
             tick: Callable[[str], None], dual: Dual | None = None,
             ) -> tuple[Bound, tuple[Choice, float] | None, dict[str, Any]]:
    """The best multiplier (:func:`dual_search` with the plain DP, or ``dual``'s) and its
    inside and outside tables, the best fitting strategy, and statistics."""
    problem = tables.problem

    def minimise(lam: float) -> tuple[float, Choice]:
        assert tables.run is not None
        total, choice, _ = tables.run(shifted(problem, lam))
        return total, choice

    if dual is None:
        assert free is not None
        best, stats = dual_search(problem, cap, free, minimise, tick)
    else:
        best = dual.best
        stats = {"lagrangian_runs": 0, "lagrangian_multiplier": dual.lam,
                 "lagrangian_upper": None if best is None else best[1]}
    lam = stats["lagrangian_multiplier"]
    inside = tables.inside(lam)
    outside = tables.outside(lam, inside)
    if dual is not None:  # the bound at lam, as the plain DP sums it on this Problem
        roots = tables.elim.roots
        stats["lagrangian_bound"] = sum(float(inside[r]) for r in roots) - lam * cap
    tick("computing the Lagrangian bounds")
    return Bound(lam, inside, outside, dual_slack(problem, cap, lam)), best, stats


def dual_slack(problem: Problem, cap: float, lam: float) -> float:
    """Rounding allowance of a Lagrangian bound at ``lam``, in cost units."""
    return _slack_of(problem, cap)(lam)


def _slack_of(problem: Problem, cap: float) -> Callable[[float], float]:
    """:func:`dual_slack` as a function of ``lam`` (the magnitudes summed once)."""
    assert problem.memory is not None
    costs = _magnitude(problem.vertex_costs + problem.edge_costs)
    memory = abs(cap) + _magnitude(problem.memory)
    return lambda lam: BOUND_RTOL * (costs + lam * memory)


def _magnitude(arrays: list[np.ndarray]) -> float:
    """The sum of each array's largest finite magnitude (an array many terms share, such
    as a layer matrix, is scanned once and counted for each)."""
    seen: dict[int, float] = {}
    for a in arrays:
        if id(a) not in seen:  # a read-only array's, once in its life
            seen[id(a)] = kept(_MAGNITUDES, a, None, lambda: finite_max(np.abs(a)))  # noqa: B023
    return sum(seen[id(a)] for a in arrays)


# (id, None) -> a read-only array's largest finite magnitude (pase.array_memo.kept)
_MAGNITUDES: dict = {}


def dual_search(problem: Problem, cap: float, free: tuple[Choice, float],
                minimise: Callable[[float], tuple[float, Choice]],
                tick: Callable[[str], None],
                ) -> tuple[tuple[Choice, float] | None, dict[str, Any]]:
    """Maximise the Lagrangian dual ``min(cost + lam * memory) - lam * cap`` over ``lam``.

    The dual is concave and piecewise linear: each strategy is a line. Bracket
    the multiplier where the minimiser starts to fit (between 0, where it does
    not, and the least-memory strategy, or by geometric steps), then jump to
    where the lines of the two bracketing minimisers cross; when the
    DP finds nothing below that crossing it is the maximum (the 1-D cutting
    plane method, finite on a finite set of strategies). Every run gives a
    lower bound and, when its minimiser fits, an upper bound. ``minimise(lam)``
    returns the least ``cost + lam * memory`` and a minimiser (any exact method:
    the plain DP, or the DP with repeated blocks folded). Returns the best
    fitting strategy (None if none was seen) and statistics, among them
    ``lagrangian_bound`` (the best lower bound) and ``lagrangian_multiplier``.
    ``free`` is the unconstrained optimum (the minimiser at ``lam = 0``) and its cost.
    """
    assert problem.memory is not None
    memory = problem.memory
    best: tuple[Choice, float] | None = None
    top = (-math.inf, 0.0)  # (best lower bound, its multiplier)
    runs = 0
    slack = _slack_of(problem, cap)

    def closed() -> bool:
        """A fitting strategy meets the best bound: it is optimal, no multiplier can do
        better (ties in cost with less memory than the free optimum end here at once)."""
        return best is not None and best[1] - top[0] <= slack(top[1])

    def probe(lam: float) -> tuple[bool, float, float, float]:
        """(fits, cost, memory, DP minimum) of a minimiser at ``lam``."""
        nonlocal best, top, runs
        runs += 1
        if lam == 0:
            choice, total = free
        else:
            total, choice = minimise(lam)
        tick("searching the Lagrange multiplier")
        if total == math.inf:  # lam * memory overflowed: treat lam as too large
            return True, math.inf, -math.inf, math.inf
        top = max(top, (total - lam * cap, lam))
        cost, fits = problem.evaluate(choice), problem.fits(choice)
        if fits and (best is None or cost < best[1]):
            best = (choice, cost)
        return fits, cost, problem.memory_of(choice), total

    lo = (0.0,) + probe(0.0)[1:3]  # the unconstrained optimum: it does not fit
    hi: tuple[float, float, float] | None = None
    # Each vertex at its least memory (the cheapest such candidate) fits the
    # cap; when its cost is finite its line closes the bracket at lam = inf.
    least = tuple(int(np.lexsort((c, m))[0])
                  for c, m in zip(problem.vertex_costs, memory))
    cost = problem.evaluate(least)
    if math.isfinite(cost) and problem.fits(least):
        hi = (math.inf, cost, problem.memory_of(least))
        best = (least, cost)
    # Otherwise step from a multiplier that weighs the memory spread like the cost scale.
    spread = sum(finite_max(m) - finite_min(m) for m in memory)
    scale = sum(finite_max(np.abs(c)) for c in problem.vertex_costs)
    lam = max(scale, 1.0) / max(spread, 1e-300)
    while hi is None and runs < LAGRANGE_RUNS and 1e-300 < lam < 1e300 and not closed():
        fits, cost, mem, _ = probe(lam)
        if fits:
            hi = (lam, cost, mem)
            if lo[0] > 0.0 or closed():
                break
            lam /= LAGRANGE_STEP
        else:
            lo = (lam, cost, mem)
            if hi is not None:
                break
            lam *= LAGRANGE_STEP
    while runs < LAGRANGE_RUNS and hi is not None and math.isfinite(hi[1]) and lo[2] > hi[2] \
            and not closed():
        lam = (hi[1] - lo[1]) / (lo[2] - hi[2])
        if not lo[0] < lam < hi[0]:  # rounding: fall back to bisection
            lam = 0.5 * (lo[0] + hi[0])
            if not lo[0] < lam < hi[0]:
                break
        crossing = lo[1] + lam * lo[2]
        fits, cost, mem, total = probe(lam)
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
    return best, stats


def finite_max(values: np.ndarray) -> float:
    return float(values[np.isfinite(values)].max(initial=0.0))


def finite_min(values: np.ndarray) -> float:
    return float(values[np.isfinite(values)].min(initial=0.0))
