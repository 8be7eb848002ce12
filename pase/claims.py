"""Check a solver's answer against its Problem before anyone trusts it.

:func:`check_answer` is what :func:`pase.run_solver` runs after every solve.
A Solution claims a choice, a cost, a status and maybe a lower bound; each
claim is checked against the Problem, with costs compared at a relative
tolerance of :data:`pase.problem.COST_RTOL` of the answer's own scale, the
summed magnitudes of the terms its choice pays (``Problem.term_scale``; costs
may be ~1e-9 seconds or ~1e15 FLOP, and one huge entry the choice does not pay
excuses nothing):

- it is a :class:`~pase.problem.Solution` with a :class:`~pase.problem.Status`;
- a missing choice comes with status ``infeasible`` or ``time_limit``;
- a choice names a valid candidate for every vertex, fits the memory cap,
  and its cost is the re-evaluated cost;
- a lower bound is a number not above the cost;
- ``optimal`` comes with a lower bound equal to the cost (a solver that
  gives none gets the cost as its bound: an optimal answer proves it).

    >>> import numpy as np
    >>> from pase.problem import Problem, Solution, Status
    >>> p = Problem([np.array([1.0, 2.0])], [], [])
    >>> check_answer(p, Solution((1,), 2.0, Status.OPTIMAL, "x", lower_bound=1.0), "x")
    Traceback (most recent call last):
    ...
    pase.claims.ClaimError: solver 'x' claims optimal at cost 2.0 but its lower bound is 1.0; a bug in the solver
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from pase.errors import PaseError
from pase.problem import COST_RTOL, Problem, Solution, Status


class ClaimError(PaseError):
    """A solver's answer contradicts its Problem (a bug in the solver)."""


def check_answer(problem: Problem, solution: Any, solver: str) -> None:
    """Raise ClaimError when ``solution`` is not an honest answer to ``problem``."""

    def fail(message: str) -> None:
        raise ClaimError(f"solver {solver!r} {message}; a bug in the solver")

    if not isinstance(solution, Solution):
        fail(f"returned a {type(solution).__name__}, not a pase.problem.Solution")
    if not isinstance(solution.status, Status):
        fail(f"returned status {solution.status!r}, not a pase.problem.Status")
    if solution.choice is None:
        if solution.status not in (Status.INFEASIBLE, Status.TIME_LIMIT):
            fail(f"returned no choice with status {solution.status}")
        return
    _check_choice(problem, solution, fail)
    _check_bound(problem, solution, fail)


def _check_choice(problem: Problem, solution: Solution, fail: Any) -> None:
    try:
        true_cost = problem.evaluate(solution.choice)
    except PaseError as exc:
        fail(f"returned an invalid choice: {exc}")
    if not _close(problem.term_scale(solution.choice), solution.cost, true_cost):
        fail(f"reported cost {solution.cost!r} but its choice evaluates to {true_cost!r}")
    if not problem.fits(solution.choice):
        fail(f"returned a choice needing {problem.memory_of(solution.choice):.6g} bytes, over "
             f"the memory cap of {problem.memory_cap:.6g}")


def _check_bound(problem: Problem, solution: Solution, fail: Any) -> None:
    bound, cost = solution.lower_bound, solution.cost
    scale = problem.term_scale(solution.choice)
    if bound is None:
        if solution.status is Status.OPTIMAL:
            solution.lower_bound = cost  # an optimal answer is its own bound
        return
    if isinstance(bound, bool) or not isinstance(bound, (int, float, np.number)) or math.isnan(bound):
        fail(f"reported lower bound {bound!r}, not a number")
    if bound > cost and not _close(scale, bound, cost):
        fail(f"reported lower bound {bound!r} above its cost {cost!r}")
    if solution.status is Status.OPTIMAL and not _close(scale, bound, cost):
        fail(f"claims optimal at cost {cost!r} but its lower bound is {bound!r}")


def _close(scale: float, a: float, b: float) -> bool:
    """Equal within COST_RTOL, relative to the larger value or to the answer's ``scale``."""
    if a == b:
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= COST_RTOL * max(abs(a), abs(b), scale)
