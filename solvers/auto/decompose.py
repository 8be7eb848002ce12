"""The decomposition as a solver: rounds of dual ascent, each round keeping the edges
the last one found in conflict (:mod:`~pase.solvers.auto.dual`).

Every round's bound is valid, so the best of them is the answer's lower bound; a
round that starts from a relaxation keeping more of the conflicting edges is tighter
where the last one was loose. Status ``optimal`` only with a proof: a relaxed optimum
that pays its own true cost, or a bound equal to the best cost up to rounding.
"""
from __future__ import annotations

import math
import time
from typing import Any

from pase.deadline import Deadline
from pase.errors import TooLargeError
from pase.problem import Problem, Solution, Status
from pase.solvers.auto.dual import Progress, Relaxation
from pase.solvers.auto.split import edge_weights, keep_only, kept_edges
from pase.solvers.dp.plan import Plan

# A bound within this share of the cost's own scale is equal to it: the bound and the
# cost add the same terms in different orders, nothing more.
ROUNDING_RTOL = 1e-12


def decompose(problem: Problem, *, entries: float, budget: float, steps: int, rounds: int,
              gap: float, deadline: Deadline, split: tuple[list[int], Plan] | None = None
              ) -> Solution:
    """The best strategy the rounds find, with its proven lower bound; the rounds stop once
    the relative gap is at most ``gap``. ``split`` is the first round's kept edges and
    plan when the caller has already chosen them (:func:`kept_edges` with no conflicts)."""
    start = time.perf_counter()
    progress = Progress()
    multipliers: dict = {}
    first: list[int] = []
    history = []
    weights = edge_weights(problem)
    for r in range(rounds):
        kept, plan = split if r == 0 and split is not None else \
            kept_edges(problem, weights, entries, budget, first)
        if not (plan.complete and plan.fits(budget)):  # even a spanning forest is too large
            raise TooLargeError(f"the decomposition's smallest relaxation (a spanning forest "
                                f"of {len(kept)} edges) needs {plan.peak_bytes / 2**20:.4g} MiB "
                                f"of dp tables, over memory_budget={budget / 2**20:.4g} MiB")
        relaxation = Relaxation(problem, kept, keep_only(problem, kept), plan, multipliers)
        before = progress.steps
        relaxation.ascend(progress, steps, deadline, gap)
        history.append({"kept_edges": len(kept), "dropped_edges": len(relaxation.dropped),
                        "plan_entries": plan.table_entries, "steps": progress.steps - before,
                        "lower_bound": progress.lower})
        if progress.proven or progress.lower == math.inf or deadline.expired() \
                or _closed(problem, progress, gap):
            break
        multipliers = relaxation.lam
        first = sorted(progress.conflicts, key=lambda e: (-progress.conflicts[e], e))
        progress.conflicts = {}
    stats: dict[str, Any] = {"rounds": history, "steps": progress.steps}
    seconds = time.perf_counter() - start
    if progress.lower == math.inf or progress.choice is None:
        status = Status.TIME_LIMIT if deadline.expired() else Status.INFEASIBLE
        return Solution(None, math.inf, status, "auto", wall_time=seconds, stats=stats)
    cost = progress.upper
    if progress.proven or _closed(problem, progress):
        stats["certificate"] = "relaxed optimum pays its true cost" if progress.proven \
            else "lower bound equals the cost"
        return Solution(progress.choice, cost, Status.OPTIMAL, "auto", lower_bound=cost,
                        wall_time=seconds, stats=stats)
    # Rounding must never lift a bound above the optimum it bounds.
    lower = min(cost, progress.lower - ROUNDING_RTOL * problem.term_scale(progress.choice))
    stats["certificate"] = "lower bound (Lagrangian dual)"
    status = Status.TIME_LIMIT if deadline.expired() else Status.FEASIBLE
    return Solution(progress.choice, cost, status, "auto", lower_bound=lower,
                    wall_time=seconds, stats=stats)


def _closed(problem: Problem, progress: Progress, gap: float = 0.0) -> bool:
    """The bound within rounding of the cost, or (``gap``) within that share of it."""
    if progress.choice is None:
        return False
    slack = max(ROUNDING_RTOL * problem.term_scale(progress.choice), gap * abs(progress.upper))
    return progress.upper - progress.lower <= slack
