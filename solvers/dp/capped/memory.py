"""The PaSE DP under a memory cap, kept exact with Pareto fronts.

A cap couples every vertex, so one minimum per table entry no longer
suffices: a dearer partial strategy may be the one that leaves room for the
rest. Each entry of ``R(i)`` (a configuration of ``D(i)``) therefore holds the
*Pareto front* of ``(cost, memory)`` over the eliminated sub-problem ``X(i)``:
every pair that no other pair beats in both (the nnScaler approach, rather
than a discretised budget axis, which would be exact only for integer memory).

Step ``i`` works over the configurations of ``D(i) + (v(i),)``:

1. one point per configuration: the vertex and edge costs (as in the plain
   DP) and the memory of ``v(i)``'s candidate;
2. for each child ``j``, the Minkowski sum with the child's front at the
   projected configuration, then pruning;
3. the union over ``v(i)``'s axis, then pruning, gives ``R(i)``.

The fronts themselves are in :mod:`pase.solvers.dp.capped.fronts`.

Pruning, all of it safe (it never drops every optimum):

- dominance: a configuration keeps its front only (memory ascending, cost
  strictly descending); within a fixed configuration of ``D(i)`` a dominated
  partial strategy stays dominated whatever the rest is;
- memory: a point whose memory, plus the memory of the configured ``D(i)``,
  plus the least memory of every other vertex, is over the cap;
- cost, by Lagrangian relaxation (:mod:`pase.solvers.dp.capped.lagrange`): plain
  DPs on ``cost + lam * memory`` give strategies that fit (an upper bound
  ``UB``) and lower bounds ``LB``. For the best ``lam``, inside tables (the
  plain DP's ``R``) and outside tables (the best completion of each ``D(i)``
  configuration) bound every completion of a point by
  ``cost + lam * memory + pending children + outside - lam * cap``;
  points whose bound is over a ceiling go. When ``UB`` meets ``LB`` it is
  optimal and no front is built at all. Otherwise the fronts are built in
  rounds with rising ceilings from just above ``LB`` up to ``UB`` (optima sit
  far closer to ``LB`` than ``UB`` does, and a low ceiling prunes far more);
  a round that finds a strategy within its ceiling has the optimum.

Sums are compared with a relative slack (``BOUND_RTOL`` and ``CAP_RTOL``)
that only ever keeps extra points, so the answer is exact up to floating-point
rounding, like the plain DP's. Cost: typically 5-12 plain DPs for the search,
two passes for the inside and outside tables, and per round one pass over the
configurations (cached across rounds) plus work proportional to the front
points. Fronts can still grow with the number of distinct memory totals;
``max_states`` bounds the points one Minkowski sum generates and the points
kept in all, and the time limit is checked after every step and DP run.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pase.errors import PaseError, TimeLimitError, TooLargeError
from pase.problem import Problem
from pase.solvers.dp.capped.fronts import CAP_RTOL, pareto_round
from pase.solvers.dp.capped.lagrange import Bound, Choice, Dual, PlainDP, Tables, lagrange
from pase.solvers.dp.ordering import Elimination

__all__ = ["DEFAULT_MAX_STATES", "forbid_infinite_memory", "pareto_solve", "solve_capped"]

DEFAULT_MAX_STATES = 5 * 10**7
# Cost ceilings of the rounds: the first at 1/FIRST_CEILING of the way from the
# Lagrangian lower bound to the best known cost (or FIRST_CEILING_RTOL of the
# bound above it when no strategy is known to fit), each next CEILING_GROWTH
# times as far: at most three rounds before the last, at the best known cost.
FIRST_CEILING = 64.0
FIRST_CEILING_RTOL = 1e-3
CEILING_GROWTH = 4.0


@dataclass
class Screened:
    """Per step, the configurations whose bound (second array) is within the
    highest ceiling any round will use, so later rounds need not rescan."""

    ceiling: float = math.inf
    budget: int = 0  # configurations it may still hold
    steps: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class Guard:
    """Counts points against ``max_states`` and checks the deadline."""

    def __init__(self, problem: Problem, max_states: int, deadline: float | None):
        self.problem, self.max_states, self.deadline = problem, max_states, deadline
        self.kept = 0
        self.generated_max = 0

    def generating(self, count: int, vertex: int | None) -> None:
        self.generated_max = max(self.generated_max, count)
        if count > self.max_states:
            self._refuse(f"would generate {count} (cost, memory) points at once", vertex)

    def keeping(self, count: int, vertex: int | None) -> None:
        self.kept += count
        if self.kept > self.max_states:
            self._refuse(f"would hold {self.kept} Pareto-front points in all", vertex)

    def tick(self, what: str) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise TimeLimitError(f"dp under a memory cap exceeded its time limit {what}; "
                                f"the DP has no partial answer")

    def _refuse(self, what: str, vertex: int | None) -> None:
        where = "combining the components" if vertex is None else (
            f"at vertex {self.problem.names[vertex]!r} ({int(self.problem.sizes[vertex])} "
            f"candidates)")
        raise TooLargeError(
            f"dp under a memory cap {what} {where}, over max_states={self.max_states}; try a "
            f"coarser configuration space (fewer devices, a cutoff, powers of two), another "
            f"ordering, a different memory cap, or a larger max_states")


def solve_capped(problem: Problem, elim: Elimination, free: tuple[Choice, float] | None,
                 run: PlainDP, *, max_states: int = DEFAULT_MAX_STATES,
                 deadline: float | None = None, dual: Dual | None = None
                 ) -> tuple[tuple[Choice, float] | None, dict[str, Any]]:
    """The cheapest strategy within ``problem.memory_cap`` (None if none), and statistics.

    ``free`` is the unconstrained optimum (choice, cost): a lower bound, and
    the answer when it fits. ``run`` is the plain DP under the same plan. ``dual``
    instead: the unconstrained optimum is known not to fit, and the multiplier search
    starts (and ends) at ``dual``'s (found on the folded blocks).
    """
    cap = problem.memory_cap
    assert cap is not None and (free is not None or dual is not None)
    stats: dict[str, Any] = {"memory_cap": cap,
                             "capped": free is None or not problem.fits(free[0])}
    if not stats["capped"]:
        return free, stats
    stats["min_memory"] = least = _min_memory(problem, run)
    if least > cap:
        return None, stats
    found, more = pareto_solve(problem, elim, cap, run=run, free=free, max_states=max_states,
                               deadline=deadline, dual=dual)
    stats.update(more)
    # Only rounding can leave nothing: the least-memory strategy sums to the cap
    # in the DP's order but not in Problem.memory_of's.
    if found is None and least < cap - CAP_RTOL * max(abs(cap), 1.0):
        raise PaseError(f"dp internal error: the least memory {least!r} fits the cap "
                        f"{cap!r} but the Pareto DP found no strategy; please report this")
    return found, stats


def forbid_infinite_memory(problem: Problem) -> Problem:
    """Under a cap, a candidate needing ``+inf`` memory never fits: give it cost
    ``+inf`` (forbidden, as the ILP formulation drops it) and memory 0, so that
    no ``inf * 0`` or ``inf - inf`` reaches the Lagrangian and the fronts."""
    if problem.memory_cap is None or problem.memory is None or \
            all(np.isfinite(m).all() for m in problem.memory):
        return problem
    costs = [np.where(np.isinf(m), np.inf, c) for c, m in zip(problem.vertex_costs, problem.memory)]
    memory = [np.where(np.isinf(m), 0.0, m) for m in problem.memory]
    return Problem(costs, problem.edges, problem.edge_costs, problem.names, memory,
                   problem.memory_cap, problem.unit, problem.candidates, problem.devices)


def _min_memory(problem: Problem, run: PlainDP) -> float:
    """Least total memory over strategies of finite cost.

    Memory is per vertex, so that is the sum of per-vertex minima unless some
    cost is infinite; then the plain DP runs with memory as the cost.
    """
    assert problem.memory is not None
    finite = all(np.isfinite(c).all() for c in problem.vertex_costs) and \
        all(np.isfinite(m).all() for m in problem.edge_costs)
    if finite:
        return float(sum(float(m.min()) for m in problem.memory))
    as_cost = Problem([m + np.where(np.isinf(c), np.inf, 0.0)
                       for m, c in zip(problem.memory, problem.vertex_costs)],
                      problem.edges, [np.where(np.isinf(m), np.inf, 0.0) for m in problem.edge_costs],
                      names=problem.names)
    return run(as_cost)[0]


def pareto_solve(problem: Problem, elim: Elimination, cap: float, *, run: PlainDP | None = None,
                 free: tuple[Choice, float] | None = None, max_states: int = DEFAULT_MAX_STATES,
                 deadline: float | None = None, dual: Dual | None = None
                 ) -> tuple[tuple[Choice, float] | None, dict[str, Any]]:
    """The cheapest choice fitting ``cap`` and its cost, or None; plus statistics.

    Call it when the unconstrained optimum does not fit (it would be the
    answer). ``run`` is the plain DP for the Lagrangian search, and ``free``
    its unconstrained answer (choice, cost); without them the fronts are
    built alone, with no cost pruning (for tests of the fronts).

    With the Lagrangian bounds, the fronts are built in rounds under a rising
    cost ceiling, from just above the lower bound to the best known cost
    ``UB``: a round keeps every strategy costing at most its ceiling, so when
    it finds one within the ceiling, that one is optimal. Optima are usually
    much closer to the lower bound than ``UB`` is, and a low ceiling prunes
    far more, so the rounds cost less than one round at ``UB`` would.
    """
    guard = Guard(problem, max_states, deadline)
    if run is None or (free is None and dual is None):
        tables = Tables(problem, elim)
        return pareto_round(tables, cap, Bound(0.0, [], [], 0.0), math.inf, guard, Screened())
    tables = Tables(problem, elim, run)
    bound, best, stats = lagrange(tables, cap, free, guard.tick, dual)
    lower = stats["lagrangian_bound"]
    upper = math.inf if best is None else best[1]
    stats["lagrangian_gap_closed"] = upper - lower <= bound.slack
    if stats["lagrangian_gap_closed"]:
        return best, stats
    width = (upper - lower) / FIRST_CEILING if math.isfinite(upper) else \
        max(abs(lower), 1.0) * FIRST_CEILING_RTOL
    screened = Screened(upper + bound.slack + bound.lam * cap, max_states)
    ceilings = []
    while True:
        ceiling = min(lower + width, upper)
        ceilings.append(ceiling)
        found, front_stats = pareto_round(tables, cap, bound, ceiling, guard, screened)
        if found is not None and (best is None or found[1] < best[1]):
            best = found
        if ceiling >= upper or found is not None and found[1] <= ceiling:
            break  # nothing pruned could beat it
        upper = math.inf if best is None else best[1]
        width *= CEILING_GROWTH
    stats.update(front_stats)
    stats["ceilings"] = ceilings
    return best, stats
