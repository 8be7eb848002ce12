"""The symbolic half of the PaSE DP: what each step adds, and what it costs.

A :class:`Plan` is built from a Problem and an ordering before any numeric
work. For every position it fixes the terms the step sums (vertex cost, edge
matrices to later neighbours, child tables), how small terms are folded into
larger ones, how the broadcast is chunked, and so the exact bytes the DP will
hold. :mod:`pase.solvers.dp` executes a Plan step by step and keeps to it; the
peak it predicts is what the memory guard checks.

Memory model (all of it mirrored by the executor):

- every step keeps an argmin table over ``D(i)`` (the smallest unsigned dtype
  that holds ``K_v - 1``) until back-substitution;
- every step's value table over ``D(i)`` (float64) lives until its parent step
  ends;
- during a step: its two new tables, a float64 copy of each edge or vertex
  term that is a group's base, and, chunked over the first dependent
  axis, a float64 broadcast buffer (unless one term already spans every axis)
  plus two intp buffers for the argmin and the gather offsets.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pase.errors import OptionError
from pase.problem import Problem
from pase.solvers.ordering import ORDERINGS, Elimination, eliminate, rule_for

VALUE_BYTES = np.dtype(np.float64).itemsize
INDEX_BYTES = np.dtype(np.intp).itemsize
# Target size of one chunk of the broadcast buffer. Small enough to stay in
# cache between the add passes and the argmin: on a 2 MiB-L2 EPYC, 1-16 MiB
# chunks ran twice as fast as one 1 GiB array.
CHUNK_BYTES = 4 * 2**20


def argmin_dtype(k: int) -> np.dtype:
    """Smallest unsigned dtype that holds a candidate index below ``k``."""
    return np.min_scalar_type(max(k - 1, 0))


@dataclass(frozen=True)
class Term:
    """One summand of a step, over ``axes`` (vertices, in table axis order).

    ``kind`` is ``"child"`` (``ref`` = the child's position, a value table),
    ``"edge"`` (``ref`` = the later neighbour) or ``"vertex"`` (``ref`` = v(i)).
    """

    kind: str
    ref: int
    axes: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """Position ``i`` of the DP: ``R(i)`` and its argmin over ``D(i)``.

    ``groups`` partition the terms; each group's first term is its base and
    the rest are added into it (in place for a child table, into a copy
    otherwise) before the bases are broadcast-added. ``direct`` means a single
    base spans every axis, so it is reduced without a broadcast buffer.
    """

    position: int
    vertex: int
    dependent: tuple[int, ...]
    groups: tuple[tuple[Term, ...], ...]
    direct: bool
    chunk_rows: int
    entries: int
    transient_bytes: int
    peak_bytes: int


@dataclass(frozen=True)
class Plan:
    """An ordering's DP steps and its predicted size, before any numeric work."""

    ordering: str
    elimination: Elimination
    steps: tuple[Step, ...]

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
        return {"ordering": self.ordering, "max_dependent_set": self.max_dependent_set,
                "table_entries": self.table_entries, "peak_table_bytes": self.peak_bytes}


def plan(problem: Problem, ordering: str = "generateseq") -> Plan:
    """The DP plan of ``problem`` under a named ordering (see ``ORDERINGS``).

    Examples:
        >>> import numpy as np
        >>> from pase.problem import Problem
        >>> p = Problem([np.zeros(3)] * 3, [(0, 1), (1, 2)], [np.zeros((3, 3))] * 2)
        >>> plan(p).summary()["table_entries"]  # 3*3 + 3*3 + 3
        21
    """
    if ordering not in ORDERINGS:
        raise OptionError(f"unknown ordering {ordering!r}; choose from "
                          f"{', '.join(sorted(ORDERINGS))}")
    order = ORDERINGS[ordering](problem)
    return plan_for_order(problem, order, rule_for(ordering), ordering)


def plan_for_order(problem: Problem, order: list[int] | tuple[int, ...],
                   rule: str = "connected", name: str = "custom") -> Plan:
    """The DP plan for an explicit order under a dependent-set rule."""
    elim = eliminate(problem, order, rule)
    sizes = [int(k) for k in problem.sizes]
    held = 0  # bytes of tables kept from earlier steps
    steps = []
    for i, v in enumerate(elim.order):
        dep = elim.dependent[i]
        m = math.prod(sizes[u] for u in dep)
        entries = m * sizes[v]
        groups = _fold(elim, i, sizes)
        axes = set(dep) | {v}
        direct = len(groups) == 1 and set(groups[0][0].axes) == axes
        rows_total = sizes[dep[0]] if dep else 1
        row_entries = m // rows_total
        rows = max(1, min(rows_total, CHUNK_BYTES // (row_entries * sizes[v] * VALUE_BYTES)))
        chunk = rows * row_entries
        # Edge and vertex bases are copied (small: at most K_u * K_v) so terms
        # can be folded into them without touching the Problem's arrays.
        transient = 2 * chunk * INDEX_BYTES + sum(
            math.prod(sizes[u] for u in g[0].axes) * VALUE_BYTES
            for g in groups if g[0].kind != "child")
        if not direct:
            transient += chunk * sizes[v] * VALUE_BYTES
        tables = m * (VALUE_BYTES + argmin_dtype(sizes[v]).itemsize)
        steps.append(Step(i, v, dep, groups, direct, rows, entries, transient,
                          held + tables + transient))
        held += tables - sum(VALUE_BYTES * math.prod(sizes[u] for u in elim.dependent[j])
                             for j in elim.children[i])
    return Plan(name, elim, tuple(steps))


def _fold(elim: Elimination, i: int, sizes: list[int]) -> tuple[tuple[Term, ...], ...]:
    """Group step ``i``'s terms: each joins the smallest base spanning its axes."""
    v = elim.order[i]
    terms = ([Term("child", j, elim.dependent[j]) for j in elim.children[i]]
             + [Term("edge", u, (u, v)) for u in elim.later_neighbors[i]]
             + [Term("vertex", v, (v,))])

    def entries(t: Term) -> int:
        return math.prod(sizes[u] for u in t.axes)

    # Largest first, so every term can fold into a base seen before it; a small
    # child table then folds into an edge matrix instead of costing a full pass.
    terms.sort(key=lambda t: (-entries(t), -len(t.axes)))
    groups: list[list[Term]] = []
    for t in terms:
        hosts = [g for g in groups if set(t.axes) <= set(g[0].axes)]
        if hosts:
            min(hosts, key=lambda g: entries(g[0])).append(t)
        else:
            groups.append([t])
    return tuple(tuple(g) for g in groups)


def sum_into(out: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """The broadcast sum of ``parts`` written into ``out`` (no temporaries).

    np.add into a buffer: np.array of a broadcast view takes a far slower copy path.
    """
    if len(parts) == 1:
        np.copyto(out, parts[0])
    else:
        np.add(parts[0], parts[1], out=out)
    for part in parts[2:]:
        np.add(out, part, out=out)
    return out
