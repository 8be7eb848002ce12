"""The one ILP formulation every backend solves, built as plain numpy arrays.

Columns (all in ``[0, 1]``):

* ``x[v, i]``: vertex ``v`` takes candidate ``i``; binary.
* ``y[e, i, j]``: edge ``e = (u, v)`` takes the pair ``(i, j)``. Given integral
  one-hot ``x`` the constraints below force ``y = x[u, i] * x[v, j]`` exactly,
  so float MIP backends may keep ``y`` continuous (fewer integer columns to
  branch on); CP-SAT makes everything Boolean.

Objective: ``sum cost[v, i] x[v, i] + sum cost[e, i, j] y[e, i, j]`` with the
constant :attr:`Formulation.offset` removed (see :func:`build`).

A ``+inf`` cost forbids its candidate or pair: the column is dropped, which is
the same as fixing it to 0. No scipy: the matrix is COO arrays built by hand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pase.problem import Problem
from pase.solvers.ilp.limits import Deadline


@dataclass(frozen=True)
class Formulation:
    """``min cost @ z + offset  s.t.  A z = rhs,  memory @ z[:num_x] <= memory_cap``.

    ``A`` is in COO form (``row``, ``col``, ``val``). Columns ``[0, num_x)`` are
    the ``x`` columns, the rest are ``y`` columns.
    """

    num_vertices: int
    num_x: int
    cost: np.ndarray         # objective coefficient per column, >= 0 (offset removed)
    offset: float            # constant: per-vertex plus per-edge minimum costs
    group: np.ndarray        # per column: v for x[v, .], num_vertices + e for y[e, ., .]
    x_vertex: np.ndarray     # per x column: its vertex
    x_candidate: np.ndarray  # per x column: its candidate index
    y_ends: np.ndarray       # per y column: the two x columns it multiplies, shape (num_y, 2)
    row: np.ndarray
    col: np.ndarray
    val: np.ndarray
    rhs: np.ndarray
    memory: np.ndarray | None  # per x column; None when the Problem has no cap
    memory_cap: float | None
    infeasible: str | None     # why no finite-cost choice can exist, else None

    @property
    def num_cols(self) -> int:
        return self.cost.size

    @property
    def num_rows(self) -> int:
        """Equality rows (the memory row, when present, comes on top)."""
        return self.rhs.size

    @property
    def num_groups(self) -> int:
        """Vertices plus edges: exactly one column per group is 1 in any solution."""
        return int(self.group.max()) + 1 if self.group.size else 0

    def choice_from_x(self, x_values: np.ndarray) -> tuple[int, ...]:
        """Decode a per-vertex choice from (possibly slightly fractional) x values."""
        best = np.full(self.num_vertices, -1.0)
        choice = np.zeros(self.num_vertices, dtype=np.int64)
        for col in range(self.num_x):
            v = self.x_vertex[col]
            if x_values[col] > best[v]:
                best[v], choice[v] = x_values[col], self.x_candidate[col]
        return tuple(int(c) for c in choice)

    def columns_for(self, choice: tuple[int, ...]) -> np.ndarray:
        """0/1 value of every column for a choice (a warm start for the backends).

        Forbidden candidates have no column; they simply leave the row unmatched.
        """
        z = np.zeros(self.num_cols)
        chosen = np.asarray(choice)[self.x_vertex] == self.x_candidate
        z[:self.num_x] = chosen
        if self.y_ends.size:
            z[self.num_x:] = chosen[self.y_ends[:, 0]] & chosen[self.y_ends[:, 1]]
        return z


def build(problem: Problem, deadline: Deadline | None = None) -> Formulation:
    """Build the formulation's arrays for ``problem``.

    Exactly one column per vertex and one per edge is 1 in any solution, so the
    minimum finite cost of each vertex and each edge is moved into ``offset``:
    every coefficient becomes >= 0 and small next to huge common parts (costs of
    1e13 that differ by 1e5 keep their difference exactly), which is what the
    integer scaling of CP-SAT and the tolerances of float MIP solvers need.
    With a ``deadline``, raises :class:`~pase.solvers.ilp.limits.OutOfTime` once it
    has passed.
    """
    n = problem.num_vertices
    costs, groups, rows, cols, vals, rhs = [], [], [], [], [], []
    offset_terms: list[float] = []
    infeasible = None
    cap = problem.memory_cap
    if cap is not None and cap == np.inf:
        cap = None  # an infinite cap constrains nothing

    # x columns: one per finite-cost vertex candidate (and finite memory under a cap).
    x_col = []  # per vertex: column of each candidate, -1 when forbidden
    next_col = 0
    for v, c in enumerate(problem.vertex_costs):
        ok = np.isfinite(c)
        if cap is not None:
            ok &= np.isfinite(problem.memory[v])
        idx = np.full(c.size, -1, dtype=np.int64)
        idx[ok] = np.arange(next_col, next_col + int(ok.sum()))
        next_col += int(ok.sum())
        x_col.append(idx)
        if not ok.any():
            infeasible = infeasible or (f"every candidate of vertex {v} ({problem.names[v]}) "
                                        "costs inf (or needs inf memory)")
            offset_terms.append(0.0)
            costs.append(np.zeros(0))
        else:
            low = float(c[ok].min())
            offset_terms.append(low)
            costs.append(c[ok] - low)
        groups.append(np.full(int(ok.sum()), v))
    num_x = next_col
    x_vertex = _cat(groups, np.int64)
    x_candidate = _cat([np.flatnonzero(i >= 0) for i in x_col], np.int64)

    # One-hot: sum_i x[v, i] = 1 for every vertex.
    for v in range(n):
        members = x_col[v][x_col[v] >= 0]
        rows.append(np.full(members.size, v))
        cols.append(members)
        vals.append(np.ones(members.size))
    rhs.append(np.ones(n))
    next_row = n

    y_ends = []
    for e, ((u, v), m) in enumerate(zip(problem.edges, problem.edge_costs)):
        if deadline is not None:
            deadline.check("building the ILP")
        # A pair exists only if both candidates exist and its own cost is finite.
        ok = np.isfinite(m) & (x_col[u][:, None] >= 0) & (x_col[v][None, :] >= 0)
        ii, jj = np.nonzero(ok)
        ycols = np.arange(next_col, next_col + ii.size)
        next_col += ii.size
        if ii.size == 0:
            infeasible = infeasible or (f"edge {problem.names[u]} -> {problem.names[v]} "
                                        "has no finite-cost pair")
            offset_terms.append(0.0)
        else:
            low = float(m[ii, jj].min())
            offset_terms.append(low)
            costs.append(m[ii, jj] - low)
        groups.append(np.full(ii.size, n + e))
        y_ends.append(np.stack([x_col[u][ii], x_col[v][jj]], axis=1))
        # Linearisation, source side: sum_j y[e, i, j] - x[u, i] = 0 for every i.
        # Target side:                sum_i y[e, i, j] - x[v, j] = 0 for every j.
        # A row whose x exists but whose pairs are all forbidden keeps only
        # -x = 0, which rightly forbids that candidate.
        for side, end in ((ii, x_col[u]), (jj, x_col[v])):
            present = np.flatnonzero(end >= 0)
            row_of = np.full(end.size, -1, dtype=np.int64)
            row_of[present] = np.arange(next_row, next_row + present.size)
            rows += [row_of[side], row_of[present]]
            cols += [ycols, end[present]]
            vals += [np.ones(ii.size), -np.ones(present.size)]
            rhs.append(np.zeros(present.size))
            next_row += present.size

    memory = None
    if cap is not None:
        memory = _cat([mem[x_col[v] >= 0] for v, mem in enumerate(problem.memory)], np.float64)
        least = sum(float(mem[x_col[v] >= 0].min(initial=np.inf)) for v, mem in
                    enumerate(problem.memory))
        most = sum(float(mem[x_col[v] >= 0].max(initial=0.0)) for v, mem in
                   enumerate(problem.memory))
        if least > cap:
            infeasible = infeasible or (f"memory cap {cap:g} is below the smallest possible "
                                        f"total memory {least:g}")
        elif most <= cap:  # every choice fits (float sums are monotone): no row needed
            memory, cap = None, None

    return Formulation(
        num_vertices=n, num_x=num_x, cost=_cat(costs, np.float64),
        offset=math.fsum(offset_terms), group=_cat(groups, np.int64),
        x_vertex=x_vertex, x_candidate=x_candidate,
        y_ends=_cat(y_ends, np.int64).reshape(-1, 2),
        row=_cat(rows, np.int64), col=_cat(cols, np.int64), val=_cat(vals, np.float64),
        rhs=_cat(rhs, np.float64), memory=memory, memory_cap=cap, infeasible=infeasible)


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def group_max(values: np.ndarray, group: np.ndarray, num_groups: int) -> np.ndarray:
    """Per-group maximum of ``values`` (0 for an empty group)."""
    out = np.zeros(num_groups)
    np.maximum.at(out, group, values)
    return out
