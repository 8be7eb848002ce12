"""The symbolic half of the PaSE DP: what each step adds, and what it costs.

A :class:`Plan` is built from the graph's shape (vertex names, candidate
counts, edges: a Problem or a ProblemShape, no cost arrays needed) and an
ordering, before any numeric work. For every position it fixes the terms the
step sums, how they fold (:func:`pase.solvers.dp.kernel.fold`), how the
broadcast is chunked, and so the exact bytes the DP will hold.
:mod:`pase.solvers.dp` executes a Plan step by step and keeps to it; the peak
it predicts is what the memory guard checks.

Memory model (all of it mirrored by :func:`pase.solvers.dp.kernel.min_plus`):

- every step keeps an argmin table over ``D(i)`` (the smallest unsigned dtype
  that holds ``K_v - 1``) until back-substitution;
- every step's value table over ``D(i)`` (float64) lives until its parent step
  ends;
- during a step: its two new tables, a float64 copy of each edge or vertex
  term that is a fold's base, and, chunked over the first dependent axis, a
  float64 broadcast buffer (unless one base spans every axis) plus two intp
  buffers for the argmin and the gather offsets.

A plan stops early (``complete`` is False) at the first step that cannot run:
a dependent set of more than ``MAX_DEPENDENT_SET`` vertices (numpy arrays
have at most 64 axes) or, when a byte limit is given, tables larger than it.
On graphs of thousands of vertices the rest of the ordering is what takes
minutes. Its figures then count the steps up to that one only: lower bounds.
"""
from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pase.errors import OptionError
from pase.solvers.dp.kernel import INDEX_BYTES, VALUE_BYTES, argmin_dtype, chunk_rows, fold
from pase.solvers.dp.ordering import ORDERINGS, Elimination, Stop, eliminate, rule_for

MAX_DEPENDENT_SET = 64


@dataclass(frozen=True)
class Step:
    """Position ``i`` of the DP: ``R(i)`` over ``D(i)`` and its argmin.

    The step sums its terms, in this order: the value tables of its
    ``children`` (positions), the edge matrices to its ``later`` neighbours
    and its vertex costs; ``term_axes`` are their axes. ``groups`` fold them
    (indices into the terms, base first); ``direct`` means one base spans
    every axis, so it is reduced without a broadcast buffer.
    """

    position: int
    vertex: int
    dependent: tuple[int, ...]
    children: tuple[int, ...]
    later: tuple[int, ...]
    shape: tuple[int, ...]
    term_axes: tuple[tuple[int, ...], ...]
    groups: tuple[tuple[int, ...], ...]
    direct: bool
    chunk_rows: int
    entries: int
    peak_bytes: int


@dataclass(frozen=True)
class Plan:
    """An ordering's DP steps and its predicted size, before any numeric work."""

    ordering: str
    elimination: Elimination
    steps: tuple[Step, ...]

    @property
    def complete(self) -> bool:
        """False when planning stopped at a step too wide to run (figures are lower bounds)."""
        return self.elimination.complete

    @property
    def max_dependent_set(self) -> int:
        return self.elimination.max_dependent_set

    @property
    def table_entries(self) -> int:
        """Sum over steps of ``K_v(i) * prod K over D(i)``: the min-plus work."""
        return sum(s.entries for s in self.steps)

    @property
    def peak_bytes(self) -> int:
        return max((s.peak_bytes for s in self.steps), default=0)

    @property
    def peak_step(self) -> Step | None:
        return max(self.steps, key=lambda s: s.peak_bytes, default=None)

    def summary(self) -> dict[str, Any]:
        out = {"ordering": self.ordering, "max_dependent_set": self.max_dependent_set,
               "table_entries": self.table_entries, "peak_table_bytes": self.peak_bytes}
        if not self.complete:
            out["complete"] = False
        return out


def plan_ordering(shape: Any, ordering: str, *, limit_bytes: float | None = None) -> Plan:
    """The DP plan of ``shape`` under a named ordering (see ``ORDERINGS``).

    ``shape`` is anything with ``names``, ``sizes``, ``edges`` and
    ``num_vertices``. With ``limit_bytes`` the plan stops at the first step
    whose tables alone (9 bytes an entry at least) are larger: the DP would
    refuse it anyway.

    Examples:
        >>> import numpy as np
        >>> from pase.problem import Problem
        >>> p = Problem([np.zeros(3)] * 3, [(0, 1), (1, 2)], [np.zeros((3, 3))] * 2)
        >>> plan_ordering(p, "generateseq").table_entries  # 3*3 + 3*3 + 3
        21
    """
    if ordering not in ORDERINGS:
        raise OptionError(f"unknown ordering {ordering!r}; choose from "
                          f"{', '.join(sorted(ORDERINGS))}")
    sizes = [int(k) for k in shape.sizes]
    # A step holds at least a float64 value and a uint8 argmin per entry of D(i);
    # tables over at most `safe` vertices fit the limit whatever their sizes.
    entry_bytes = VALUE_BYTES + 1
    safe = MAX_DEPENDENT_SET if limit_bytes is None else next(
        (w for w in range(MAX_DEPENDENT_SET + 1)
         if max(sizes, default=1) ** (w + 1) * entry_bytes > limit_bytes), MAX_DEPENDENT_SET)

    def stop(v: int, dependent: Collection[int]) -> bool:
        if len(dependent) <= safe:
            return False
        return len(dependent) > MAX_DEPENDENT_SET or math.prod(
            sizes[u] for u in dependent) * entry_bytes > limit_bytes  # type: ignore[operator]

    order = ORDERINGS[ordering](shape, stop)
    return plan_for_order(shape, order, rule_for(ordering), ordering, stop)


def plan_for_order(shape: Any, order: list[int] | tuple[int, ...], rule: str = "connected",
                   name: str = "custom", stop: Stop | None = None) -> Plan:
    """The DP plan for an explicit order (or a prefix of one, with ``stop``)."""
    elim = eliminate(shape, order, rule, stop=stop)
    sizes = [int(k) for k in shape.sizes]
    held = 0  # bytes of tables kept from earlier steps
    tables: list[int] = []  # entries of each step's tables, prod K over D(i)
    steps = []
    for i, v in enumerate(elim.order):
        dep, kids, later = elim.dependent[i], elim.children[i], elim.later_neighbors[i]
        kv = sizes[v]
        tables.append(math.prod(sizes[u] for u in dep))
        term_axes = tuple(elim.dependent[j] for j in kids) + tuple((u, v) for u in later) + ((v,),)
        entries = [tables[j] for j in kids] + [sizes[u] * kv for u in later] + [kv]
        groups = fold(term_axes, entries)
        full = tuple(sizes[u] for u in dep) + (kv,)
        lead = full if dep else (1,) + full
        rows = chunk_rows(lead)
        chunk = rows * math.prod(lead[1:-1])
        direct = len(groups) == 1 and entries[groups[0][0]] == tables[i] * kv
        # Edge and vertex bases are copied (small: at most K_u * K_v) so terms
        # can be folded into them without touching the Problem's arrays.
        transient = 2 * chunk * INDEX_BYTES + sum(
            entries[g[0]] * VALUE_BYTES for g in groups if g[0] >= len(kids))
        if not direct:
            transient += chunk * kv * VALUE_BYTES
        own = tables[i] * (VALUE_BYTES + argmin_dtype(kv).itemsize)
        steps.append(Step(i, v, dep, kids, later, full, term_axes, groups, direct, rows,
                          tables[i] * kv, held + own + transient))
        held += own - sum(VALUE_BYTES * tables[j] for j in kids)
    return Plan(name, elim, tuple(steps))
