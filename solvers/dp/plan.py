"""The symbolic half of the PaSE DP: what each step adds, and what it costs.

A :class:`Plan` is built from the graph's shape (vertex names, candidate
counts, edges: a Problem or a ProblemShape, no cost arrays needed) and an
ordering, before any numeric work. For every position it fixes the terms the
step sums, how they fold (:func:`pase.solvers.dp.kernel.fold`), how the
broadcast is chunked, and so the exact bytes the DP will hold.
:mod:`pase.solvers.dp.core` executes a Plan step by step and keeps to it; the
peak it predicts is what the memory guard (:func:`refuse_over_budget`) checks,
before any work. :func:`plan` picks the ordering ``solve`` would run.

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
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from pase.errors import OptionError, TooLargeError, check_choice, check_float
from pase.solvers.dp.kernel import (
    INDEX_BYTES,
    VALUE_BYTES,
    argmin_dtype,
    chunk_cols,
    chunk_rows,
    fold,
)
from pase.solvers.dp.ordering import ORDERINGS, Elimination, Stop, eliminate, rule_for

MAX_DEPENDENT_SET = 64
DEFAULT_MEMORY_BUDGET = 4 * 2**30
# Orderings "auto" compares; bfs is left out: it is the paper's blow-up baseline.
AUTO_ORDERINGS = ("generateseq", "min-fill")
CHOICES = ("auto",) + tuple(ORDERINGS)


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
    fold_entries: int = 0  # entries the folds pass over: base copies, terms added into bases
    chunk_cols: int = 0  # rows of the second axis per block where one row is too large (tiles)


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
    def fold_entries(self) -> int:
        """Sum over steps of the entries their folds pass over (a copied base once, and
        once more per term added into a base): the work besides the min-plus itself,
        which is most of a step whose tables are no larger than its edge matrices."""
        return sum(s.fold_entries for s in self.steps)

    @property
    def peak_bytes(self) -> int:
        return max((s.peak_bytes for s in self.steps), default=0)

    @property
    def peak_step(self) -> Step | None:
        return max(self.steps, key=lambda s: s.peak_bytes, default=None)

    def fits(self, budget: float) -> bool:
        """Whether the whole plan was made and its peak is within ``budget`` bytes."""
        return self.complete and self.peak_bytes <= budget

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
        direct = len(groups) == 1 and entries[groups[0][0]] == tables[i] * kv
        cols = 0 if direct else chunk_cols(lead)
        chunk = rows * math.prod(lead[1:-1]) if not cols else cols * math.prod(lead[2:-1])
        # Edge and vertex bases are copied (small: at most K_u * K_v) so terms
        # can be folded into them without touching the Problem's arrays.
        transient = 2 * chunk * INDEX_BYTES + sum(
            entries[g[0]] * VALUE_BYTES for g in groups if g[0] >= len(kids))
        if not direct:
            transient += chunk * kv * VALUE_BYTES
        own = tables[i] * (VALUE_BYTES + argmin_dtype(kv).itemsize)
        passes = sum(entries[g[0]] * (len(g) - (g[0] < len(kids))) for g in groups)
        steps.append(Step(i, v, dep, kids, later, full, term_axes, groups, direct, rows,
                          tables[i] * kv, held + own + transient, passes, cols))
        held += own - sum(VALUE_BYTES * tables[j] for j in kids)
    return Plan(name, elim, tuple(steps))


def plan(shape: Any, ordering: str = "auto", *,
         memory_budget: float = DEFAULT_MEMORY_BUDGET) -> Plan:
    """The plan ``solve`` would execute, with its predicted size (for dry runs).

    ``shape`` is a Problem or anything with ``names``, ``sizes``, ``edges``
    and ``num_vertices`` (a ProblemShape): no cost arrays are needed.
    ``memory_budget`` matters to ``"auto"`` only; a plan over it is still
    planned in full (``solve`` stops planning at the first table over it).

    Examples:
        >>> from pase.testing import random_problem
        >>> p = plan(random_problem(6, seed=1))
        >>> p.ordering, p.max_dependent_set <= 2
        ('generateseq', True)
    """
    check_choice("ordering", ordering, CHOICES)
    budget = check_float("memory_budget", memory_budget, 0.0, strict=True, finite=False)
    return choose(shape, ordering, budget)[0]


def choose(shape: Any, ordering: str, budget: float, limit_bytes: float | None = None,
           ) -> tuple[Plan, dict[str, dict[str, Any]]]:
    """The plan of ``ordering`` (``"auto"``: of AUTO_ORDERINGS, see :func:`auto`) and,
    for ``"auto"``, every candidate's summary by name (``solve``'s ``stats["predicted"]``)."""
    if ordering != "auto":
        return plan_ordering(shape, ordering, limit_bytes=limit_bytes), {}
    plans = [plan_ordering(shape, name, limit_bytes=limit_bytes) for name in AUTO_ORDERINGS]
    return auto(plans, budget), {p.ordering: p.summary() for p in plans}


def auto(plans: list[Plan], budget: float) -> Plan:
    """The plan that fits ``budget`` with the fewest table entries; ties keep the first."""
    return min(plans, key=lambda p: (not p.fits(budget), not p.complete, p.table_entries))


def refuse_over_budget(shape: Any, chosen: Plan, budget: float) -> None:
    """TooLargeError naming the step that breaks the budget or numpy's axis limit."""
    names, sizes = shape.names, shape.sizes
    if not chosen.steps:
        return
    widest = max(chosen.steps, key=lambda s: len(s.dependent))
    if len(widest.dependent) + 1 > min(_max_axes(), MAX_DEPENDENT_SET + 1):
        raise TooLargeError(
            f"dp (ordering {chosen.ordering!r}) needs a table over {len(widest.dependent)} "
            f"dependent vertices at vertex {names[widest.vertex]!r}, more axes than numpy "
            f"arrays take; try another ordering, fewer devices, or a heuristic solver "
            f"(greedy, mcmc)")
    if chosen.fits(budget):
        return
    step = chosen.peak_step if chosen.complete else chosen.steps[-1]
    at_least = "" if chosen.complete else "at least "
    dep = ", ".join(f"{names[u]} ({sizes[u]})" for u in sorted(step.dependent)) or "none"
    others = ", ".join(n for n in AUTO_ORDERINGS if n != chosen.ordering)
    raise TooLargeError(
        f"dp (ordering {chosen.ordering!r}) needs {at_least}{_human(step.peak_bytes)} "
        f"({_count(step.peak_bytes)} bytes) at vertex {names[step.vertex]!r} "
        f"({sizes[step.vertex]} candidates; dependent set with candidate counts: {dep}), over "
        f"memory_budget={_human(budget)} ({_count(budget)} bytes); try another ordering "
        f"({others}), fewer devices, or a larger memory_budget")


def finite(x: float) -> float:
    """``x`` as a JSON-safe number: an int when exact in int64, else a float capped finite."""
    if isinstance(x, int) and x < 2**63:
        return x
    return float(x) if x < sys.float_info.max else sys.float_info.max


def _max_axes() -> int:
    """The most axes a numpy array may have (32 before numpy 2, 64 since)."""
    return 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


def _human(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{finite(nbytes) / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


def _count(n: float) -> str:
    """A byte count: exact up to int64, then three digits."""
    return f"{int(n)}" if n < 2**63 else f"{finite(n):.3g}"
