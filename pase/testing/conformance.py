"""A conformance battery every solver, built-in or your own, can run in a few lines.

    >>> from pase.testing import check_solver
    >>> report = check_solver("greedy")                       # doctest: +SKIP
    >>> check_solver(my_solve, scope="chain", memory_cap=False)  # doctest: +SKIP

The checks that fit the solver's tags run on small Problems whose optimum
exhaustive search knows (chains for ``scope="chain"``, also trees for ``"tree"``,
also diamonds, fork-joins and random DAGs for ``"general"``), each at cost scales
1e-9 (seconds), 1 and 1e15 (FLOP), and, when the solver honours memory caps,
under a cap some strategies fit and one none fits:

- ``valid_choices``: every answer is a Solution naming a candidate per vertex;
- ``honest_cost``: the reported cost is the choice's re-evaluated cost;
- ``honest_claims``: OPTIMAL only at the optimum, lower bounds never above it,
  INFEASIBLE from an exact solver only when nothing fits;
- ``big_m_claims``: the same claims stay honest on random Problems with one
  entry 1e6, 1e9 or 1e13 times the others (a solver that scales by the largest entry
  may return a worse answer there, but must not call it optimal);
- ``extreme_scales``: on random Problems with costs from 1e-300 to near float64's
  max (and memory as small or as large under a cap), an answer is valid, honest and
  never below the optimum, or the solver raises a PaseError; nothing else;
- ``exact_optimum`` (``exact=True``): the optimum, always;
- ``never_beats_optimum``: no cost below the optimum;
- ``deterministic``: the same seed gives the same choice;
- ``time_limit``: a large Problem comes back within ``time_limit * 1.1 + 2`` s;
- ``memory_cap`` (``memory_cap=True``): answers fit the cap, INFEASIBLE when
  nothing does.

A solver may refuse a random Problem with a :class:`~pase.errors.PaseError` (an
option it lacks, a size limit) unless it is exact; graph-derived Problems bind
every solver. Costs compare with the relative tolerance ``COST_RTOL`` (1e-9) of
the answer's own scale: the summed magnitudes of the terms the compared choices
pay (``Problem.term_scale``), never the Problem's largest entry. Every failing
check is reported, not just the first.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from pase.problem import Solution
from pase.testing.checks import checks_for
from pase.testing.runner import (
    ConformanceError,
    Report,
    SolverSpec,
    answers,
    format_failures,
    solver_spec,
)


def check_solver(solver: str | Callable[..., Solution] | SolverSpec, *,
                 exact: bool | None = None, scope: str | None = None,
                 memory_cap: bool | None = None, options: Mapping[str, Any] | None = None,
                 seed: int = 0, time_limit: float = 1.0) -> Report:
    """Run every check that fits ``solver``'s tags; raise ConformanceError listing all failures.

    Args:
        solver: a registered name, a ``solve(problem, *, time_limit, seed, **options)``
            callable, or a :class:`SolverSpec`.
        exact, scope, memory_cap: the solver's tags; default: the registry's word
            (for a bare callable: ``False``, ``"general"``, ``True``).
        options: extra keyword arguments for every call.
        seed: seeds the random Problems and the solver.
        time_limit: seconds for the time-limit check.
    """
    spec = solver_spec(solver, exact=exact, scope=scope, memory_cap=memory_cap,
                       options=options, seed=seed, time_limit=time_limit)
    if not spec.available:
        from pase.errors import SolverUnavailableError

        raise SolverUnavailableError(f"solver {spec.name!r} needs an optional backend")
    report = Report(spec.name, {"exact": spec.exact, "scope": spec.scope,
                                "memory_cap": spec.memory_cap})
    for check in checks_for(spec):
        failures = check.run(spec)
        if failures:
            report.failed[check.name] = failures
        else:
            report.passed.append(check.name)
    report.refused = [a.case.label for a in answers(spec) if a.solution is None and not a.broken]
    if report.failed:
        raise ConformanceError(format_failures(spec, report.failed), report)
    return report


def solver_checks(solvers, *, options: Mapping[str, Mapping[str, Any]] | None = None,
                  seed: int = 0, time_limit: float = 1.0):
    """A ``pytest.mark.parametrize`` over every (solver, check) pair that fits the tags.

        @pase.testing.solver_checks(["dp", pase.testing.solver_spec(my_solve, scope="chain")])
        def test_conformance(solver, check):
            check(solver)

    ``solvers`` holds names, callables or :class:`SolverSpec` s; ``options`` maps a
    solver name to its extra keyword arguments. Case ids read ``solver-check``;
    a registered solver whose backend is missing is skipped.
    """
    import pytest  # only when tests ask for it: pase never needs pytest to import

    params = []
    for solver in solvers:
        spec = solver_spec(solver, seed=seed, time_limit=time_limit)
        if options and spec.name in options:
            spec = solver_spec(spec, options=options[spec.name])
        marks = () if spec.available else (pytest.mark.skip(reason=f"{spec.name}: backend missing"),)
        params += [pytest.param(spec, check, id=f"{spec.name}-{check.id}", marks=marks)
                   for check in checks_for(spec)]
    return pytest.mark.parametrize(("solver", "check"), params)
