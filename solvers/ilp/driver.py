"""What every ILP backend shares: run it on a Problem, check the answer, report honestly.

A backend (``cbc.py``, ``highs.py``, ``cpsat.py``) turns a :class:`Formulation`
into its own model, solves it and hands back a :class:`BackendResult` in the
formulation's units. :func:`solve_formulation` does the rest:

* the time limit covers everything: building the formulation, the backend's own
  model, its search, and the conservative re-solve; a deadline that passes while
  a model is being built ends the solve with status TIME_LIMIT;
* the answer is re-evaluated with ``Problem.evaluate`` and must satisfy
  ``Problem.fits`` exactly, else it is not returned as a fitting answer;
* OPTIMAL is claimed only when the backend's bound, mapped back to the Problem's
  own scale less the backend's tolerance, proves it at the answer's own scale:
  ``cost - bound <= OPTIMAL_RTOL * Problem.term_scale(choice)`` (the summed
  magnitudes of the terms the choice pays). Never relative to the largest
  coefficient: one big-M entry of 1e15 would then excuse an error of 1e6.
  Otherwise the answer is FEASIBLE (or TIME_LIMIT) with that bound and its gap:
  a backend whose scaling cannot resolve the answer's terms next to a huge
  entry says so rather than faking precision.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from pase.errors import (
    OptionError,
    PaseError,
    SolverUnavailableError,
    TooLargeError,
    check_common,
    check_int,
)
from pase.problem import COST_RTOL, Problem, Solution, Status
from pase.solvers.greedy import greedy_choice
from pase.solvers.ilp.formulation import Formulation, build
from pase.solvers.ilp.limits import Deadline, OutOfTime

# An answer is OPTIMAL when its cost is within this relative distance of the proven
# bound, relative to the summed magnitudes of the terms it pays (Problem.term_scale).
OPTIMAL_RTOL = COST_RTOL
INSTALL_HINT = 'pip install "pase[ilp]"'
# Variables (candidate one-hots + edge config pairs) an ILP may have by default:
# the Transformer at p = 32 (5.1e6) drove a backend past 20 GiB on a 24 GiB
# machine, while Inception-v3 and ResNet-101 at p = 64 (1.6e6, 1.3e6) fit.
DEFAULT_MAX_VARIABLES = 2_000_000


@dataclass
class BackendResult:
    """What one backend run found, before it is checked against the true Problem."""

    choice: tuple[int, ...] | None  # None when no solution was found
    proven: bool                    # the backend itself claims optimality for its model
    infeasible: bool                # the backend proved that its model has no solution
    time_limited: bool              # the backend stopped (or was stopped) on the time limit
    bound: float | None             # valid lower bound on ``Formulation.cost @ z``, or None
    status: str                     # the backend's own status string
    extra: dict = field(default_factory=dict)


class Backend(Protocol):
    """One backend run. ``conservative=False`` may round the memory row looser
    (bounds and infeasibility stay valid); ``True`` rounds it tighter (every
    solution truly fits). ``start`` is a warm start: a value per column, or None.
    The backend checks ``deadline`` while it builds its model (raising
    :class:`OutOfTime`) and runs its search under the watchdog of ``limits.py``.
    """

    def __call__(self, form: Formulation, *, conservative: bool, start: np.ndarray | None,
                 deadline: Deadline) -> BackendResult: ...


def not_started(extra: dict | None = None) -> BackendResult:
    """The result of a backend that had no time left to start its search."""
    return BackendResult(None, False, False, True, None, "not started: no time left", extra or {})


def abandoned(extra: dict | None = None) -> BackendResult:
    """The result of a backend that did not stop within the watchdog's grace."""
    return BackendResult(None, False, False, True, None,
                         "stopped by the watchdog: no answer by the time limit", extra or {})


def check_size(problem: Problem, solver: str, max_variables: int) -> None:
    """Refuse a model whose variable count would exhaust memory before it starts."""
    count = int(problem.sizes.sum()) + sum(int(m.size) for m in problem.edge_costs)
    if count > max_variables:
        raise TooLargeError(
            f"{solver}: the ILP would have {count:,} variables ({len(problem.edges)} edges' "
            f"config pairs), over max_variables={max_variables:,}; at 5.1 million variables a "
            f"backend was killed for using over 20 GiB. Use 'dp', fewer devices, or raise "
            f"max_variables")


def check_options(time_limit: object, seed: object, warm_start: object,
                  max_variables: object) -> int:
    """Checks shared by the backends; returns ``max_variables`` as an int."""
    check_common(time_limit, seed)
    if not isinstance(warm_start, bool):
        raise OptionError(f"warm_start must be true or false, got {warm_start!r}")
    return check_int("max_variables", max_variables, 1)


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

    With ``warm_start`` the greedy choice is given to the backend. When the backend
    finds nothing that fits (time limit, watchdog), the greedy choice is returned
    (``stats["fallback"] == "greedy"``) with status TIME_LIMIT or FEASIBLE; when
    even greedy finds nothing that fits, the choice is None with status TIME_LIMIT.
    """
    deadline = Deadline(time_limit)
    check_size(problem, solver, max_variables)
    start = greedy_choice(problem)
    if start is not None and not math.isfinite(problem.evaluate(start)):
        start = None  # greedy took a forbidden pair: neither a hint nor a fallback
    stats: dict = {}
    try:
        form = build(problem, deadline)
    except OutOfTime as stop:
        return _fallback(problem, solver, start, True, None, stats | {"stopped": str(stop)})
    stats.update({"variables": form.num_cols, "integer_variables": form.num_x,
                  "constraints": form.num_rows + (form.memory is not None),
                  "nonzeros": int(form.val.size), "build_seconds": deadline.elapsed()})
    if form.infeasible:
        stats["infeasible"] = form.infeasible
        return Solution(None, math.inf, Status.INFEASIBLE, solver, stats=stats)
    if problem.num_vertices == 0:
        return Solution((), 0.0, Status.OPTIMAL, solver, lower_bound=0.0, stats=stats)

    start_cols = form.columns_for(start) if warm_start and start is not None else None
    t1 = time.perf_counter()
    try:
        res = backend(form, conservative=False, start=start_cols, deadline=deadline)
    except OutOfTime as stop:
        stats["stopped"] = str(stop)
        return _fallback(problem, solver, start, True, None, stats)
    stats["backend_status"] = res.status
    stats["backend_claims_optimal"] = res.proven
    stats.update(res.extra)
    if res.infeasible:
        stats["solve_seconds"] = time.perf_counter() - t1
        return Solution(None, math.inf, Status.INFEASIBLE, solver, stats=stats)
    choice, time_limited = res.choice, res.time_limited
    if choice is not None and not problem.fits(choice):
        # A solver tolerance let a marginal overflow through: re-solve with the cap
        # rounded the safe way. The first bound stays valid (its row was a relaxation).
        try:
            again = backend(form, conservative=True, start=start_cols, deadline=deadline)
        except OutOfTime as stop:
            again = BackendResult(None, False, False, True, None, str(stop))
        stats["backend_status"] += f"; conservative re-solve: {again.status}"
        time_limited = time_limited or again.time_limited
        choice = again.choice if again.choice is not None and problem.fits(again.choice) else None
    stats["solve_seconds"] = time.perf_counter() - t1
    if choice is None:
        return _fallback(problem, solver, start, time_limited, _lower(form, res.bound), stats,
                         backend=res.status)
    return _certify(problem, form, solver, choice, res.bound, time_limited, stats)


def _lower(form: Formulation, bound: float | None) -> float | None:
    """The Problem's lower bound: offset plus the bound, which is >= 0 as every
    coefficient is (tolerances subtracted by a backend may take it below)."""
    return None if bound is None or not math.isfinite(bound) else form.offset + max(0.0, bound)


def _certify(problem: Problem, form: Formulation, solver: str, choice: tuple[int, ...],
             bound: float | None, time_limited: bool, stats: dict) -> Solution:
    """The Solution for a fitting choice: OPTIMAL only if the bound proves it."""
    cost = problem.evaluate(choice)
    lower = _lower(form, bound)
    tolerance = OPTIMAL_RTOL * problem.term_scale(choice)
    if lower is not None and lower > cost:
        if lower - cost > tolerance:  # a "bound" above a real solution's cost proves nothing
            stats["rejected_bound"] = lower
            lower = None
        else:
            lower = cost
    if lower is not None and cost - lower <= tolerance:
        status = Status.OPTIMAL
    else:
        status = Status.TIME_LIMIT if time_limited else Status.FEASIBLE
    return Solution(tuple(choice), cost, status, solver, lower_bound=lower, stats=stats)


def _fallback(problem: Problem, solver: str, start: tuple[int, ...] | None, time_limited: bool,
              lower: float | None, stats: dict, backend: str = "") -> Solution:
    """The greedy choice when the backend gave nothing that fits (None if greedy fails too)."""
    if start is None:
        if not time_limited:
            raise PaseError(f"{solver}: no strategy found that fits, and none proven not to "
                            f"exist (backend: {backend or 'no status'}); try 'dp'")
        return Solution(None, math.inf, Status.TIME_LIMIT, solver, lower_bound=lower, stats=stats)
    stats["fallback"] = "greedy"
    cost = problem.evaluate(start)
    if lower is not None:
        lower = min(lower, cost)
    status = Status.TIME_LIMIT if time_limited else Status.FEASIBLE
    return Solution(tuple(start), cost, status, solver, lower_bound=lower, stats=stats)
