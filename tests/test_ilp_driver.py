"""The ILP driver's honesty (stand-in backends), the float scaling, and option checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pase.errors import OptionError
from pase.problem import Problem, Solution, Status
from pase.solvers import exhaustive
from pase.solvers.greedy import greedy_choice
from pase.solvers.ilp import cbc, cpsat, driver, formulation, highs, scaling
from pase.solvers.ilp.limits import OutOfTime
from pase.testing import random_problem

BACKENDS = [pytest.param(m, id=m.NAME, marks=pytest.mark.skipif(
    not m.available(), reason=f"{m.NAME} backend not installed")) for m in (cpsat, highs, cbc)]


def _random_cap(problem: Problem, share: float) -> float:
    low = sum(float(m.min()) for m in problem.memory)
    return low + share * (sum(float(m.max()) for m in problem.memory) - low)


def _stub(*results):
    """A backend that returns ``results`` in turn (a BackendResult or an exception)."""
    pending = list(results)

    def backend(form, *, conservative, start, deadline):
        result = pending.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    return backend


def _drive(p: Problem, *results) -> Solution:
    return driver.solve_formulation(p, "stub", _stub(*results), time_limit=None)


def _big_m_problem(big: float) -> Problem:
    """The reviewer's case: a random DAG with one edge entry set to ``big``."""
    from pase.testing import random_dag

    base = random_dag(7, max_candidates=4, extra_edges=3, seed=1)
    mats = [m.copy() for m in base.edge_costs]
    mats[0][0, -1] = big
    return Problem(base.vertex_costs, base.edges, mats)


def test_a_big_m_entry_does_not_loosen_the_optimality_test():
    # A stand-in backend returns a non-optimal choice with a weak bound. The tolerance
    # is 1e-9 of the terms the choice pays (a few hundred), not of the 1e15 entry.
    p = _big_m_problem(1e15)
    best = exhaustive.solve(p)
    offset = formulation.build(p).offset
    worse = min((c for c in _neighbours(best.choice, p.sizes)
                 if p.evaluate(c) > best.cost), key=p.evaluate)
    claim = driver.BackendResult(worse, True, False, False, best.cost - offset - 1e-3, "ok")
    got = _drive(p, claim)
    assert got.status is Status.FEASIBLE and got.cost == p.evaluate(worse)
    # The same within 1e-9 of the answer's own terms is certified.
    scale = p.term_scale(best.choice)
    close = driver.BackendResult(best.choice, True, False, False,
                                 best.cost - offset - 0.5e-9 * scale, "ok")
    assert _drive(p, close).status is Status.OPTIMAL


def _neighbours(choice, sizes):
    for v, k in enumerate(sizes):
        for c in range(int(k)):
            if c != choice[v]:
                yield choice[:v] + (c,) + choice[v + 1:]


@pytest.mark.parametrize("big", [1e9, 1e15, 1e18])
@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_never_call_a_wrong_answer_optimal_next_to_a_big_m_entry(backend, big):
    p = _big_m_problem(big)
    best = exhaustive.solve(p)
    got = backend.solve(p)
    tol = 1e-9 * p.term_scale(best.choice)
    assert got.lower_bound is None or got.lower_bound <= best.cost + tol
    if got.status is Status.OPTIMAL:
        assert abs(got.cost - best.cost) <= tol, (got.cost, best.cost)
    else:  # honest: FEASIBLE with the bound and gap it has
        assert got.status is Status.FEASIBLE and got.gap is not None


def test_optimal_only_when_the_bound_proves_it():
    p = random_problem(5, 4, 2, seed=8)
    best = exhaustive.solve(p)
    offset = formulation.build(p).offset
    exact = driver.BackendResult(best.choice, True, False, False, best.cost - offset, "ok")
    assert _drive(p, exact).status is Status.OPTIMAL
    # Proven by the backend, but with no bound or one below the cost: not OPTIMAL.
    no_bound = driver.BackendResult(best.choice, True, False, False, None, "ok")
    assert _drive(p, no_bound).status is Status.FEASIBLE
    loose = driver.BackendResult(best.choice, True, False, False, best.cost - offset - 1, "ok")
    got = _drive(p, loose)
    assert got.status is Status.FEASIBLE and got.lower_bound == best.cost - 1 and got.gap > 0
    # A "bound" above the cost of a real solution proves nothing and is dropped.
    above = driver.BackendResult(best.choice, True, False, False, best.cost - offset + 5, "ok")
    got = _drive(p, above)
    assert got.status is Status.FEASIBLE and got.lower_bound is None
    assert got.stats["rejected_bound"] == best.cost + 5


def test_an_answer_over_the_cap_is_never_returned():
    p = random_problem(5, 4, 2, seed=9, with_memory=True)
    p = p.with_memory_cap(_random_cap(p, 0.3))
    over = next(c for c in np.ndindex(*p.sizes) if not p.fits(c))
    first = driver.BackendResult(tuple(over), True, False, False, 0.0, "tolerance")
    # The conservative re-solve finds nothing either: greedy is returned, not OPTIMAL.
    got = _drive(p, first, driver.BackendResult(None, False, False, False, None, "none"))
    assert p.fits(got.choice) and got.stats["fallback"] == "greedy"
    assert got.status is Status.FEASIBLE and "conservative re-solve" in got.stats["backend_status"]
    # ... or a fitting choice, which the first (relaxed) bound can certify.
    best = exhaustive.solve(p)
    bound = best.cost - formulation.build(p).offset
    first = driver.BackendResult(tuple(over), True, False, False, bound, "tolerance")
    got = _drive(p, first, driver.BackendResult(best.choice, True, False, False, None, "ok"))
    assert got.status is Status.OPTIMAL and got.cost == best.cost


def test_running_out_of_time_while_building_gives_the_greedy_choice():
    p = random_problem(5, 4, 2, seed=10)
    got = _drive(p, OutOfTime("the time limit of 1 s passed while building the model"))
    assert got.status is Status.TIME_LIMIT and got.choice == greedy_choice(p)
    assert got.cost == p.evaluate(got.choice) and "passed while building" in got.stats["stopped"]


def test_out_of_time_without_any_fitting_choice_has_no_choice():
    # Greedy's repair fits whenever anything fits, so this is a last resort; but a
    # TIME_LIMIT answer without a choice must be representable.
    p = random_problem(3, 2, 0, seed=1)
    got = driver._fallback(p, "stub", None, True, None, {})
    assert got.status is Status.TIME_LIMIT and got.choice is None and got.cost == math.inf
    assert got.gap is None


# -- options ------------------------------------------------------------------------

@pytest.mark.parametrize("module, options, message", [
    (cbc, {"threads": "abc"}, "threads must be an integer >= 1"),
    (cbc, {"threads": 0}, "threads must be an integer >= 1"),
    (highs, {"threads": 1.5}, "threads must be an integer >= 1"),
    (highs, {"mip_rel_gap": -0.1}, "mip_rel_gap must be a finite number >= 0"),
    (highs, {"mip_rel_gap": 1.0}, r"mip_rel_gap must be in \[0, 1\)"),
    (cpsat, {"num_workers": 0}, "num_workers must be an integer >= 1"),
    (cpsat, {"num_workers": True}, "num_workers must be an integer >= 1"),
    (cpsat, {"num_workers": 100_000}, r"num_workers must be in 1\.\.10000 \(CP-SAT's limit\), "
                                      r"got 100000$"),
    (cbc, {"warm_start": "yes"}, "warm_start must be true or false"),
    (highs, {"max_variables": 0}, "max_variables must be an integer >= 1"),
    (cpsat, {"time_limit": -1}, "time_limit must be a number > 0"),
    (cbc, {"seed": -1}, "seed must be an integer >= 0"),
])
def test_bad_options_name_the_option_and_what_is_allowed(module, options, message):
    with pytest.raises(OptionError, match=message):
        module.solve(random_problem(3, seed=1), **options)


@pytest.mark.skipif(not cpsat.available(), reason="CP-SAT not installed")
def test_cpsat_passes_on_its_own_reason_for_refusing_a_parameter(monkeypatch):
    # Past our own range check, CP-SAT's refusal must say why (it was an empty reason).
    monkeypatch.setattr(cpsat, "MAX_WORKERS", 10**9)
    with pytest.raises(OptionError, match=r"^CP-SAT rejected its parameters: parameter "
                                          r"'num_workers' should be in \[0,10000\]"):
        cpsat.solve(random_problem(3, seed=1), num_workers=100_000, warm_start=False)


@pytest.mark.parametrize("module", [cbc, cpsat, highs])
def test_every_option_is_annotated(module):
    import inspect

    allowed = {"int", "float", "bool", "str", "int | None", "float | None", "bool | None",
               "str | None"}
    for name, param in inspect.signature(module.solve).parameters.items():
        if param.kind is param.KEYWORD_ONLY:
            assert param.annotation in allowed, (name, param.annotation)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integral_floats_are_accepted_as_counts(backend):
    p = random_problem(4, 3, 1, seed=2)
    option = {cpsat: "num_workers"}.get(backend, "threads")
    assert backend.solve(p, **{option: 2.0}, max_variables=1e6).status is Status.OPTIMAL


def test_float_scaling_is_a_power_of_two():
    p = random_problem(6, 5, 2, seed=3)
    form = formulation.build(Problem([c * 3.1e-7 for c in p.vertex_costs], p.edges,
                                     [m * 3.1e-7 for m in p.edge_costs]))
    model = scaling.float_model(form, conservative=False)
    assert 2**19 <= model.cost.max() < 2**20
    assert np.array_equal(np.ldexp(model.cost, -model.exponent), form.cost)  # exact
    assert model.rounding == 0.0
    # A scaled bound maps back exactly, less the tolerance it is given.
    assert scaling.true_bound(model, float(model.cost.sum()), 0.0) == pytest.approx(
        float(form.cost.sum()), rel=1e-15)


@pytest.mark.parametrize("integral", [True, False])
def test_memory_row_separates_fitting_from_overflowing(integral):
    """Every choice that fits passes the loose row with room to spare; every one that
    overflows fails it; the conservative row admits only fitting choices."""
    rng = np.random.default_rng(11)
    base = random_problem(4, 4, 1, seed=11, with_memory=True)
    memory = [np.floor(m * 2.9e8) + (0 if integral else rng.random(m.size)) for m in base.memory]
    cap = float(np.floor(_random_cap(Problem(base.vertex_costs, base.edges, base.edge_costs,
                                             memory=memory), 0.5)))
    p = Problem(base.vertex_costs, base.edges, base.edge_costs, memory=memory, memory_cap=cap)
    form = formulation.build(p)
    loose, loose_rhs = scaling.memory_row(form, conservative=False)
    safe, safe_rhs = scaling.memory_row(form, conservative=True)
    tolerance = 1e-6  # HiGHS's default MIP feasibility tolerance, far above the ones set
    for choice in np.ndindex(*p.sizes):
        x = form.columns_for(choice)[:form.num_x]
        if p.fits(choice):
            assert loose @ x <= loose_rhs - tolerance or not integral
            assert loose @ x <= loose_rhs
        else:
            assert loose @ x > loose_rhs + tolerance or not integral
            assert safe @ x > safe_rhs + tolerance
