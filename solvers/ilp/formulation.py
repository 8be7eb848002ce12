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
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from pase.errors import OptionError, SolverUnavailableError, TooLargeError
from pase.problem import Problem, Solution, Status
from pase.solvers.greedy import greedy_choice

# A backend's answer is reported OPTIMAL only if, besides the backend's own proof,
# the float-evaluated cost is within this relative distance of the derived lower
# bound (relative to the cost, or to the largest offset-free coefficient when the
# cost is near 0); it absorbs CP-SAT's integer rounding and float MIP tolerances.
OPTIMAL_RTOL = 1e-6
INSTALL_HINT = 'pip install "pase[ilp]"'
# Float MIP backends (HiGHS, CBC): the conservative re-solve lowers the
# normalised cap (<= 1) by ten times their default 1e-6 MIP feasibility tolerance.
MEMORY_MARGIN = 1e-5
# Bound on the rounding of one normalised (|value| <= 1) memory term on its way
# into a float backend: 13 significant digits in an MPS file, division, sums.
ROW_ROUNDING = 1e-13


# Variables (candidate one-hots + edge config pairs) an ILP may have by default:
# the Transformer at p = 32 (5.1e6) drove a backend past 20 GiB on this 24 GiB
# machine, while Inception-v3 and ResNet-101 at p = 64 (1.6e6, 1.3e6) fit.
DEFAULT_MAX_VARIABLES = 2_000_000


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


def build(problem: Problem) -> Formulation:
    """Build the formulation's arrays for ``problem``.

    Exactly one column per vertex and one per edge is 1 in any solution, so the
    minimum finite cost of each vertex and each edge is moved into ``offset``:
    every coefficient becomes >= 0 and small next to huge common parts (costs of
    1e13 that differ by 1e5 keep their difference exactly), which is what the
    integer scaling of CP-SAT and the tolerances of float MIP solvers need.
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


# -- shared by the backends ---------------------------------------------------

@dataclass
class BackendResult:
    """What one backend run found, before it is checked against the true Problem."""

    choice: tuple[int, ...] | None  # None when no solution was found
    proven: bool                    # the backend proved its choice optimal for its model
    infeasible: bool                # the backend proved that its model has no solution
    time_limited: bool              # the backend stopped on the time limit
    bound: float | None             # valid lower bound on ``cost @ z`` (offset excluded)
    status: str                     # the backend's own status string
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    """One backend run. ``conservative=False`` may round the memory row looser
    (bounds and infeasibility stay valid); ``True`` rounds it tighter (every
    solution truly fits). ``start`` is a warm start: a value per column, or None.
    """

    def __call__(self, form: Formulation, *, conservative: bool, start: np.ndarray | None,
                 time_limit: float | None) -> BackendResult: ...


def float_memory_row(form: Formulation, conservative: bool,
                     raw_integers: bool = True) -> tuple[np.ndarray, float]:
    """The memory row ``coef @ x <= rhs`` for the float MIP backends.

    With ``raw_integers``, integral memory (bytes) goes in unscaled with
    ``rhs = floor(cap) + 0.5``: the same integer choices fit, and an absolute
    feasibility tolerance below half a byte cannot admit one more byte.
    Otherwise the row is divided by its largest entry so tolerances are
    relative; the conservative row is normalised too and lowered by
    :data:`MEMORY_MARGIN`.
    """
    mem, cap = form.memory, form.memory_cap
    if raw_integers and not conservative and np.all(mem == np.round(mem)):
        return mem, math.floor(cap) + 0.5
    norm = max(abs(cap), float(np.abs(mem).max(initial=0.0)), np.finfo(float).tiny)
    if conservative:
        return mem / norm, cap / norm - MEMORY_MARGIN
    # Loosen by the rounding a choice exactly at the cap can pick up (division,
    # float sums, CBC's 13-digit MPS file), else CBC calls such ties infeasible.
    return mem / norm, cap / norm + (form.num_vertices + 10) * ROW_ROUNDING


def check_size(problem: Problem, solver: str, max_variables: int) -> None:
    """Refuse a model whose variable count would exhaust memory before it starts."""
    count = int(problem.sizes.sum()) + sum(int(m.size) for m in problem.edge_costs)
    if count > max_variables:
        raise TooLargeError(
            f"{solver}: the ILP would have {count:,} variables ({len(problem.edges)} edges' "
            f"config pairs), over max_variables={max_variables:,}; at 5.1 million variables a "
            f"backend was killed for using over 20 GiB here. Use 'dp', fewer devices, or raise "
            f"max_variables")


def importable(load: Callable[[], object]) -> bool:
    """Whether an optional backend's import succeeds (a solver's ``available()``)."""
    try:
        load()
    except ImportError:
        return False
    return True


def unavailable(solver: str, package: str, err: ImportError) -> SolverUnavailableError:
    """The error a backend raises when its package is missing (chain ``err``)."""
    return SolverUnavailableError(
        f"solver {solver!r} needs the optional package {package!r}, which failed to import "
        f"({err}); install the ILP backends with: {INSTALL_HINT}")


def solve_formulation(problem: Problem, solver: str, backend: Backend, *,
                      time_limit: float | None, warm_start: bool = True,
                      max_variables: int = DEFAULT_MAX_VARIABLES) -> Solution:
    """Build, run ``backend``, check the answer against ``problem``, report honestly.

    ``time_limit`` covers the build and every backend run. The status is OPTIMAL
    only when the backend proved optimality and the evaluated cost is within
    :data:`OPTIMAL_RTOL` of the derived bound, so a time-limited run is OPTIMAL
    only if it was proven anyway. With ``warm_start`` the greedy choice is given
    to the backend; when the backend finds nothing within the limit, the greedy
    choice is returned (status TIME_LIMIT, ``stats["fallback"] == "greedy"``).
    """
    if time_limit is not None and not time_limit >= 0:
        raise OptionError(f"time_limit must be >= 0 seconds or None, got {time_limit!r}")
    check_size(problem, solver, max_variables)
    t0 = time.perf_counter()
    form = build(problem)
    stats: dict = {"variables": form.num_cols, "integer_variables": form.num_x,
                   "constraints": form.num_rows + (form.memory is not None),
                   "nonzeros": int(form.val.size), "build_seconds": time.perf_counter() - t0}
    if form.infeasible:
        stats["infeasible"] = form.infeasible
        return Solution(None, float("inf"), Status.INFEASIBLE, solver, stats=stats)
    if problem.num_vertices == 0:
        return Solution((), 0.0, Status.OPTIMAL, solver, lower_bound=0.0, stats=stats)

    def remaining() -> float | None:
        return None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))

    start = greedy_choice(problem) if warm_start else None
    usable = start is not None and math.isfinite(problem.evaluate(start))
    start_cols = form.columns_for(start) if usable else None  # never hint a forbidden pair
    t1 = time.perf_counter()
    res = backend(form, conservative=False, start=start_cols, time_limit=remaining())
    stats["backend_status"] = res.status
    stats.update(res.extra)
    if res.infeasible:
        stats["solve_seconds"] = time.perf_counter() - t1
        return Solution(None, float("inf"), Status.INFEASIBLE, solver, stats=stats)
    choice, proven, time_limited = res.choice, res.proven, res.time_limited
    if choice is not None and not problem.fits(choice):
        # Memory rounding or a solver tolerance let a marginal overflow through:
        # re-solve with the cap rounded the safe way. The first bound stays valid.
        again = backend(form, conservative=True, start=start_cols, time_limit=remaining())
        stats["backend_status"] += f"; conservative re-solve: {again.status}"
        proven, time_limited = False, time_limited or again.time_limited
        ok = again.choice is not None and problem.fits(again.choice)
        choice = again.choice if ok else None
    stats["solve_seconds"] = time.perf_counter() - t1
    if choice is None:
        choice = start if start is not None else greedy_choice(problem)
        stats["fallback"] = "greedy"
        proven = False
        if choice is None:  # unreachable: build() already proved the cap unreachable
            return Solution(None, float("inf"), Status.INFEASIBLE, solver, stats=stats)
    cost = problem.evaluate(choice)
    lower = None if res.bound is None else min(cost, form.offset + res.bound)
    # Relative to the cost, or to the largest coefficient when the cost is ~0.
    scale = max(abs(cost), abs(lower or 0.0), float(form.cost.max(initial=0.0)))
    if proven and lower is not None and cost - lower <= OPTIMAL_RTOL * scale:
        status = Status.OPTIMAL
    elif time_limited:
        status = Status.TIME_LIMIT
    else:
        status = Status.FEASIBLE
    return Solution(tuple(choice), cost, status, solver, lower_bound=lower, stats=stats)
