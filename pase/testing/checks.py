"""The battery's checks, each a function from a SolverSpec to a list of failures.

Every check looks at the solver's answers on every Problem of its scope, at
every cost scale, with and without memory caps (for solvers that honour caps),
and returns one message per broken rule (empty: passed).
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import Callable

from pase.errors import PaseError
from pase.problem import COST_RTOL, Solution, Status
from pase.testing.cases import big_m_cases, big_problems, extreme_cases
from pase.testing.runner import (
    Answer,
    ConformanceError,
    SolverSpec,
    answers,
    ask,
    describe,
    format_failures,
    solver_spec,
)

# Seconds a solver may overrun ``time_limit * TIME_FACTOR`` (interpreter, model set-up).
TIME_SLACK = 2.0
TIME_FACTOR = 1.1
# The determinism check asks again on every DETERMINISM_STRIDE-th answered Problem
# (shapes come in runs of three scales: a stride of 2 still visits every scale and cap).
DETERMINISM_STRIDE = 2


def tolerance(a: float, b: float, scale: float) -> float:
    """How far two costs of one Problem may differ: relative to the costs and to
    ``scale``, the summed magnitudes of the terms the compared choices pay
    (:meth:`Case.scale`), never the Problem's largest entry."""
    return COST_RTOL * max(abs(a), abs(b), scale)


def _examined(spec: SolverSpec) -> tuple[list[str], list[tuple[Answer, Solution]]]:
    """Failures for crashes and forbidden refusals, and the answers with a Solution."""
    failures, solved = [], []
    for a in answers(spec):
        if a.broken:
            failures.append(f"{a.case.label}: {a.error}")
        elif a.solution is not None:
            solved.append((a, a.solution))
    return failures, solved


def _valid(a: Answer, sol: Solution) -> str | None:
    """Why the answer's shape is wrong, or None."""
    if not isinstance(sol, Solution):
        return f"returned {type(sol).__name__}, not a pase.problem.Solution"
    if sol.choice is None:
        if a.case.feasible and sol.status not in (Status.INFEASIBLE, Status.TIME_LIMIT):
            return f"no choice, with status {sol.status}, on a Problem some strategy fits"
        return None
    try:
        a.case.problem.check_choice(sol.choice)
    except (PaseError, TypeError, ValueError) as exc:
        return f"invalid choice {sol.choice}: {describe(exc)}"
    if not all(isinstance(c, int) or hasattr(c, "__index__") for c in sol.choice):
        return f"choice {sol.choice} holds non-integers"
    return None


def _true_cost(a: Answer, sol: Solution) -> float | None:
    """The re-evaluated cost of a valid choice (None when there is no valid choice)."""
    if not isinstance(sol, Solution) or sol.choice is None or _valid(a, sol):
        return None
    return a.case.problem.evaluate(sol.choice)


def valid_choices(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        why = _valid(a, sol)
        if why:
            failures.append(f"{a.case.label}: {why}")
    return failures


def honest_cost(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        cost = _true_cost(a, sol)
        if cost is None:
            continue
        if not (isinstance(sol.cost, numbers.Real) and math.isfinite(sol.cost)) or \
                abs(sol.cost - cost) > tolerance(sol.cost, cost, a.case.problem.term_scale(sol.choice)):
            failures.append(f"{a.case.label}: reported cost {sol.cost!r} but the choice "
                            f"evaluates to {cost!r}")
    return failures


def honest_claims(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        failures += _claim_failures(spec, a, sol)
    return failures


def _claim_failures(spec: SolverSpec, a: Answer, sol: Solution) -> list[str]:
    """Why an answer's OPTIMAL, lower bound or INFEASIBLE claim is false (empty: honest)."""
    if not isinstance(sol, Solution):
        return []
    failures = []
    best, label = a.case.optimum, a.case.label
    cost = _true_cost(a, sol)
    if sol.status is Status.OPTIMAL:
        if cost is None:
            failures.append(f"{label}: claims OPTIMAL without a valid choice")
        elif not a.case.problem.fits(sol.choice):
            failures.append(f"{label}: claims OPTIMAL with a choice over the memory cap")
        elif not a.case.feasible:
            failures.append(f"{label}: claims OPTIMAL at {cost!r}, but nothing fits")
        elif cost > best.cost + tolerance(cost, best.cost, a.case.scale(sol.choice)):
            failures.append(f"{label}: claims OPTIMAL at {cost!r} but the optimum is "
                            f"{best.cost!r}")
    if sol.lower_bound is not None and a.case.feasible and sol.lower_bound > \
            best.cost + tolerance(sol.lower_bound, best.cost, a.case.scale()):
        failures.append(f"{label}: lower bound {sol.lower_bound!r} is above the optimum "
                        f"{best.cost!r}")
    if spec.exact and sol.status is Status.INFEASIBLE and a.case.feasible:
        failures.append(f"{label}: an exact solver claims INFEASIBLE, but {best.choice} "
                        f"fits the cap")
    return failures


def big_m_claims(spec: SolverSpec) -> list[str]:
    """OPTIMAL, bounds and INFEASIBLE stay honest next to one huge (big-M) entry.

    Only the claims are checked: a solver whose precision the entry spoils may
    return a worse answer, as long as it does not call it optimal.
    """
    failures = []
    for case in big_m_cases(spec.scope, spec.seed):
        a = ask(spec, case)
        if a.broken:
            failures.append(f"{case.label}: {a.error}")
        elif a.solution is not None:
            why = _valid(a, a.solution)
            failures += [f"{case.label}: {why}"] if why else _claim_failures(spec, a, a.solution)
    return failures


def extreme_scales(spec: SolverSpec) -> list[str]:
    """Costs from 1e-300 to near float64's max, memory as small or as large under a cap:
    an answer must be valid, honest in its claims and never below the optimum; a refusal
    must be a PaseError (naming the range the solver supports). Anything else fails."""
    failures = []
    for case in extreme_cases(spec.scope, spec.memory_cap, spec.seed):
        try:
            sol = spec.call(case.problem)
        except PaseError:
            continue
        except Exception as exc:  # OverflowError, a math domain error...
            failures.append(f"{case.label}: raised {describe(exc)}")
            continue
        a = Answer(case, sol)
        why = _valid(a, sol)
        if why:
            failures.append(f"{case.label}: {why}")
            continue
        failures += _claim_failures(spec, a, sol)
        best, cost = case.optimum, _true_cost(a, sol)
        if case.feasible and cost is not None and \
                cost < best.cost - tolerance(cost, best.cost, case.scale(sol.choice)):
            failures.append(f"{case.label}: cost {cost!r} is below the true optimum {best.cost!r}")
    return failures


def reaches_optimum(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        best, cost = a.case.optimum, _true_cost(a, sol)
        if not a.case.feasible or cost is None:
            continue  # shapes and infeasibility are other checks' business
        if cost > best.cost + tolerance(cost, best.cost, a.case.scale(sol.choice)):
            failures.append(f"{a.case.label}: an exact solver returned {cost!r}; the optimum "
                            f"is {best.cost!r} at {best.choice}")
    return failures


def never_beats_optimum(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        best, cost = a.case.optimum, _true_cost(a, sol)
        if not a.case.feasible or cost is None:
            continue
        if cost < best.cost - tolerance(cost, best.cost, a.case.scale(sol.choice)):
            over = "" if a.case.problem.fits(sol.choice) else " (its choice breaks the memory cap)"
            failures.append(f"{a.case.label}: cost {cost!r} is below the true optimum "
                            f"{best.cost!r}{over}")
    return failures


def deterministic(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved[::DETERMINISM_STRIDE]:
        if not isinstance(sol, Solution):
            continue
        again = ask(spec, a.case)
        if again.solution is None:
            failures.append(f"{a.case.label}: answered, then on the same call {again.error}")
        elif (again.solution.choice, again.solution.status) != (sol.choice, sol.status):
            failures.append(f"{a.case.label}: not deterministic for seed={spec.seed}: "
                            f"{sol.choice} ({sol.status}) then {again.solution.choice} "
                            f"({again.solution.status})")
    return failures


def honours_time_limit(spec: SolverSpec) -> list[str]:
    failures = []
    allowed = spec.time_limit * TIME_FACTOR + TIME_SLACK
    for label, problem in big_problems(spec.scope, spec.seed):
        start = time.perf_counter()
        try:
            sol = spec.call(problem, time_limit=spec.time_limit)
        except PaseError:
            sol = None  # refusing (too large, out of time) is allowed here
        except Exception as exc:
            failures.append(f"{label}: raised {describe(exc)}")
            continue
        elapsed = time.perf_counter() - start
        if elapsed > allowed:
            failures.append(f"{label}: took {elapsed:.2f} s with time_limit={spec.time_limit} "
                            f"(allowed {allowed:.2f} s)")
        if isinstance(sol, Solution) and sol.choice is not None:
            try:
                cost = problem.evaluate(sol.choice)
            except PaseError as exc:
                failures.append(f"{label}: invalid choice: {describe(exc)}")
                continue
            if abs(sol.cost - cost) > tolerance(sol.cost, cost, problem.term_scale(sol.choice)):
                failures.append(f"{label}: reported cost {sol.cost!r}, evaluates to {cost!r}")
    return failures


def respects_memory_cap(spec: SolverSpec) -> list[str]:
    failures, solved = _examined(spec)
    for a, sol in solved:
        problem, label = a.case.problem, a.case.label
        if problem.memory_cap is None or not isinstance(sol, Solution):
            continue
        if sol.choice is not None and _valid(a, sol) is None and not problem.fits(sol.choice):
            failures.append(f"{label}: choice uses {problem.memory_of(sol.choice):g} memory, "
                            f"over the cap {problem.memory_cap:g}")
        if not a.case.feasible and sol.choice is None and sol.status is not Status.INFEASIBLE:
            failures.append(f"{label}: nothing fits the cap; say INFEASIBLE, not {sol.status}")
        if a.case.feasible and sol.choice is None and spec.exact:
            failures.append(f"{label}: an exact solver found nothing (status {sol.status}) "
                            f"although {a.case.optimum.choice} fits")
    return failures


@dataclass(frozen=True)
class Check:
    """One named rule of the battery; call it on a solver to run it alone."""

    id: str
    name: str
    run: Callable[[SolverSpec], list[str]]
    applies: Callable[[SolverSpec], bool] = lambda spec: True

    def __call__(self, solver, **tags) -> None:
        """Run on ``solver`` (a name, a callable or a SolverSpec); raise ConformanceError."""
        spec = solver_spec(solver, **tags)
        failures = self.run(spec)
        if failures:
            raise ConformanceError(format_failures(spec, {self.name: failures}))

    def __repr__(self) -> str:
        return self.id


CHECKS = (
    Check("valid_choices", "valid choices", valid_choices),
    Check("honest_cost", "honest cost", honest_cost),
    Check("honest_claims", "optimality claims", honest_claims),
    Check("big_m_claims", "optimality claims next to a big-M entry", big_m_claims),
    Check("extreme_scales", "costs and memory from 1e-300 to near float64's max", extreme_scales),
    Check("exact_optimum", "exact optimum", reaches_optimum, lambda s: s.exact),
    Check("never_beats_optimum", "never beats the optimum", never_beats_optimum),
    Check("deterministic", "determinism", deterministic),
    Check("time_limit", "time limit", honours_time_limit),
    Check("memory_cap", "memory cap", respects_memory_cap, lambda s: s.memory_cap),
)


def checks_for(spec: SolverSpec) -> list[Check]:
    """The checks that fit a solver's tags (exactness and memory caps; scope picks Problems)."""
    return [c for c in CHECKS if c.applies(spec)]
