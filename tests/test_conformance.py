"""The shipped conformance battery: tag-aware, every failure reported, catches what it claims to.

Expected optima come from exhaustive search or brute force over itertools.product,
never from the code under test.
"""
import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pase.testing
from pase.errors import PaseError, ProblemError
from pase.problem import Problem, Solution, Status
from pase.registry import SOLVERS
from pase.testing import (
    ConformanceError,
    check_solver,
    random_chain,
    random_dag,
    random_problem,
    random_tree,
    reference_chain_dp,
    reference_tree_dp,
    solver_spec,
)
from pase.testing import checks as checks_module

FAST_OPTIONS = {"mcmc": {"iterations": 2000}}


def brute_force(problem):
    """Cheapest choice by trying every one (feasible under the cap), lowest choice on ties."""
    best = (float("inf"), None)
    for choice in itertools.product(*(range(k) for k in problem.sizes)):
        if problem.fits(choice):
            best = min(best, (problem.evaluate(choice), choice), key=lambda b: b[0])
    return best


# -- the battery on every built-in solver, one pytest case per (solver, check) ----------

ILP = [name for name in SOLVERS.names() if name.startswith("ilp-")]


@pase.testing.solver_checks([n for n in SOLVERS.names() if n not in ILP], options=FAST_OPTIONS)
def test_builtin_solver_conforms(solver, check):
    check(solver)


@pytest.mark.slow  # a few seconds per backend: model building and time limits dominate
@pase.testing.solver_checks(ILP)
def test_ilp_backend_conforms(solver, check):
    check(solver)


def chain_dp(problem, *, time_limit=None, seed=None):
    cost, choice = reference_chain_dp(problem)
    return Solution(choice, cost, Status.OPTIMAL, "chain-dp", lower_bound=cost)


def tree_dp(problem, *, time_limit=None, seed=None):
    cost, choice = reference_tree_dp(problem)
    return Solution(choice, cost, Status.OPTIMAL, "tree-dp", lower_bound=cost)


@pase.testing.solver_checks([
    solver_spec(chain_dp, exact=True, scope="chain", memory_cap=False),
    solver_spec(tree_dp, exact=True, scope="tree", memory_cap=False),
])
def test_reference_dps_conform_within_their_scope(solver, check):
    check(solver)


# -- tags -------------------------------------------------------------------------------

def test_a_chain_only_solver_gets_only_chain_problems_and_no_memory_check():
    report = check_solver(chain_dp, exact=True, scope="chain", memory_cap=False)
    assert "memory cap" not in report.passed and "exact optimum" in report.passed
    assert report.tags == {"exact": True, "scope": "chain", "memory_cap": False}


def test_the_same_solver_claiming_general_scope_fails_on_diamonds():
    with pytest.raises(ConformanceError, match="random tree 5 x1e-9: refused: ProblemError") as info:
        check_solver(chain_dp, exact=True, scope="general", memory_cap=False)
    refused = info.value.report.failed["valid choices"]
    assert any(m.startswith("diamond p=4 x1e15: refused") for m in refused)
    assert not any(m.startswith(("chain", "mlp", "random chain")) for m in refused)


def test_registry_tags_choose_the_checks():
    SOLVERS.register("student-chain", "chain DP", exact=True, scope="chain",
                     memory_cap=False)(chain_dp)
    try:
        spec = solver_spec("student-chain")
        assert (spec.exact, spec.scope, spec.memory_cap) == (True, "chain", False)
        assert [c.id for c in pase.testing.checks_for(spec)] == [
            "valid_choices", "honest_cost", "honest_claims", "big_m_claims", "extreme_scales",
            "exact_optimum", "never_beats_optimum", "deterministic", "time_limit"]
        check_solver("student-chain")
    finally:
        SOLVERS.remove("student-chain")


def test_an_unknown_scope_is_refused():
    with pytest.raises(ValueError, match="unknown scope 'forest'; known: chain, tree, general"):
        check_solver(chain_dp, scope="forest")


def test_a_students_solver_registers_and_conforms():
    @SOLVERS.register("student-cheapest", "each vertex's cheapest candidate, edges ignored")
    def solve(problem, *, time_limit=None, seed=None):
        choice = tuple(int(np.argmin(c)) for c in problem.vertex_costs)
        if not problem.fits(choice):
            return Solution(None, float("inf"), Status.INFEASIBLE, "student-cheapest")
        return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, "student-cheapest")

    try:
        assert "student-cheapest" in SOLVERS.names()
        check_solver("student-cheapest")
    finally:
        SOLVERS.remove("student-cheapest")


# -- what the battery catches -----------------------------------------------------------

def test_every_failing_check_is_reported_not_just_the_first():
    rng = np.random.default_rng()

    def liar_and_dice(problem, *, time_limit=None, seed=None):
        choice = tuple(int(rng.integers(0, c.size)) for c in problem.vertex_costs)
        cost = problem.evaluate(choice)
        return Solution(choice, cost * 0.5 - 1, Status.FEASIBLE, "x", lower_bound=cost * 2 + 1)

    with pytest.raises(ConformanceError) as info:
        check_solver(liar_and_dice, memory_cap=False)
    failed = info.value.report.failed
    assert set(failed) == {"honest cost", "determinism", "optimality claims", "time limit",
                           "optimality claims next to a big-M entry", EXTREME}
    assert "valid choices" in info.value.report.passed
    for name in failed:
        assert f"- {name}:" in str(info.value)


EXTREME = "costs and memory from 1e-300 to near float64's max"


def test_the_battery_catches_a_solver_that_overflows_at_extreme_scales():
    """Issue 27: a raw OverflowError (CP-SAT's scaling at 1e-300, fsum near 1e308) fails the
    extreme-scale check; a PaseError refusal there is allowed, even from an exact solver."""
    import math

    def overflows(problem, *, time_limit=None, seed=None):
        top = max(float(np.abs(c).max()) for c in problem.vertex_costs)
        math.ldexp(1.0, int(40 - math.log2(top or 1.0)))  # OverflowError below ~1e-296
        return tree_dp(problem)

    with pytest.raises(ConformanceError, match=r"x1e-300: raised OverflowError") as info:
        check_solver(overflows, exact=True, scope="tree", memory_cap=False)
    assert set(info.value.report.failed) == {EXTREME}

    def refuses(problem, *, time_limit=None, seed=None):
        if max(float(np.abs(c).max()) for c in problem.vertex_costs) < 1e-200:
            raise ProblemError("costs below 1e-200 are out of range")
        return tree_dp(problem)

    assert EXTREME in check_solver(refuses, exact=True, scope="tree", memory_cap=False).passed


def test_the_battery_catches_a_wrong_cost_claim():
    def liar(problem, *, time_limit=None, seed=None):
        choice = (0,) * problem.num_vertices
        return Solution(choice, problem.evaluate(choice) * 0.5, Status.FEASIBLE, "liar")

    with pytest.raises(ConformanceError, match="reported cost .* evaluates to"):
        check_solver(liar, memory_cap=False)


def test_the_battery_catches_a_false_optimality_claim():
    def boaster(problem, *, time_limit=None, seed=None):
        choice = tuple(int(c.size - 1) for c in problem.vertex_costs)
        return Solution(choice, problem.evaluate(choice), Status.OPTIMAL, "boaster")

    with pytest.raises(ConformanceError, match="claims OPTIMAL"):
        check_solver(boaster, memory_cap=False)


def test_the_battery_catches_an_absolute_tolerance_at_seconds_scale():
    """The bug class of ILP backends certifying wrong optima on costs of ~1e-9 s:
    a solver that treats costs within 1e-6 as equal is right at scale 1, wrong at 1e-9."""
    def sloppy(problem, *, time_limit=None, seed=None):
        cost, choice = reference_chain_dp(problem)
        first = tuple(0 for _ in choice)
        if abs(problem.evaluate(first) - cost) < 1e-6:
            choice, cost = first, problem.evaluate(first)
        return Solution(choice, cost, Status.OPTIMAL, "sloppy", lower_bound=cost)

    with pytest.raises(ConformanceError, match=r"x1e-9: claims OPTIMAL") as info:
        check_solver(sloppy, exact=True, scope="chain", memory_cap=False)
    messages = [m for ms in info.value.report.failed.values() for m in ms]
    # the small extreme scales (issue 27) catch it too; scale 1 and 1e15 do not
    assert messages and all(any(f" x{t}: " in m for t in ("1e-9", "1e-150", "1e-300"))
                            for m in messages)


def test_the_battery_catches_a_tolerance_relative_to_a_big_m_entry():
    """The bug class of ILP backends that certified 350 for an optimum of 205 next to
    one 1e15 entry: a solver whose tolerance is relative to the largest entry."""
    def coarse(problem, *, time_limit=None, seed=None):
        cost, choice = reference_chain_dp(problem)
        largest = max(float(a.max()) for a in problem.vertex_costs + problem.edge_costs)
        small = problem.num_strategies() <= 10_000  # the time-limit check's Problem is not
        for other in itertools.product(*(range(k) for k in problem.sizes)) if small else ():
            if problem.evaluate(other) <= cost + 1e-9 * largest and other != choice:
                choice = other  # "equal" within 1e-9 of the largest entry
        return Solution(choice, problem.evaluate(choice), Status.OPTIMAL, "coarse",
                        lower_bound=cost)

    with pytest.raises(ConformanceError, match=r"big-M x1e\+13: claims OPTIMAL") as info:
        check_solver(coarse, exact=True, scope="chain", memory_cap=False)
    assert set(info.value.report.failed) == {"optimality claims next to a big-M entry"}


def test_the_battery_catches_nondeterminism():
    rng = np.random.default_rng()

    def dice(problem, *, time_limit=None, seed=None):
        choice = tuple(int(rng.integers(0, c.size)) for c in problem.vertex_costs)
        return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, "dice")

    with pytest.raises(ConformanceError, match="not deterministic"):
        check_solver(dice, memory_cap=False)


def test_the_battery_catches_a_solver_ignoring_the_memory_cap():
    def reckless(problem, *, time_limit=None, seed=None):
        cost, choice = reference_chain_dp(problem.with_memory_cap(None))
        return Solution(choice, cost, Status.FEASIBLE, "reckless")

    with pytest.raises(ConformanceError, match="over the cap") as info:
        check_solver(reckless, scope="chain")
    assert "cap below any strategy: nothing fits the cap" not in str(info.value)
    assert "memory cap" in info.value.report.failed


def test_the_battery_catches_a_late_answer(monkeypatch):
    import time

    monkeypatch.setattr(checks_module, "TIME_SLACK", 0.05)

    def slow(problem, *, time_limit=None, seed=None):
        if time_limit is not None:
            time.sleep(time_limit * 3)
        return chain_dp(problem)

    with pytest.raises(ConformanceError, match=r"time limit:\n.*took 0\.\d+ s with time_limit=0.05"):
        check_solver(slow, exact=True, scope="chain", memory_cap=False, time_limit=0.05)


def test_a_crash_is_reported_in_every_check_with_its_message():
    def todo(problem, *, time_limit=None, seed=None):
        raise NotImplementedError("fill in the chain DP")

    with pytest.raises(ConformanceError, match="raised NotImplementedError: fill in") as info:
        check_solver(todo, scope="chain", memory_cap=False)
    assert set(info.value.report.failed) == {
        "valid choices", "honest cost", "optimality claims", "never beats the optimum",
        "determinism", "time limit", "optimality claims next to a big-M entry", EXTREME}


def test_a_heuristic_may_refuse_random_problems_but_not_graph_derived_ones():
    def picky(problem, *, time_limit=None, seed=None):
        if problem.candidates is None:
            raise ProblemError("needs a Problem made by a cost model")
        return tree_dp(problem)

    report = check_solver(picky, scope="chain", memory_cap=False)
    assert report.refused and all(label.startswith("random") for label in report.refused)
    with pytest.raises(ConformanceError, match="refused: ProblemError"):
        check_solver(picky, exact=True, scope="chain", memory_cap=False)


def test_importing_pase_testing_does_not_import_pytest():
    code = "import sys, pase, pase.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- reference DPs against brute force --------------------------------------------------

scales = st.sampled_from([1e-9, 1.0, 1e12, 1e15])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 6), k=st.integers(1, 4), seed=st.integers(0, 10_000), scale=scales)
def test_reference_chain_dp_is_optimal(n, k, seed, scale):
    problem = random_chain(n, k, seed, scale=scale)
    cost, choice = reference_chain_dp(problem)
    best, _ = brute_force(problem)
    assert problem.evaluate(choice) == pytest.approx(cost, rel=1e-12)
    assert cost == pytest.approx(best, rel=1e-9, abs=0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(1, 7), k=st.integers(1, 4), seed=st.integers(0, 10_000), scale=scales)
def test_reference_tree_dp_is_optimal(n, k, seed, scale):
    from pase.solvers import exhaustive

    problem = random_tree(n, k, seed, scale=scale)
    cost, choice = reference_tree_dp(problem)
    assert problem.evaluate(choice) == pytest.approx(cost, rel=1e-12)
    assert cost == pytest.approx(exhaustive.solve(problem).cost, rel=1e-9, abs=0)


def test_reference_dps_solve_a_hand_worked_chain(tiny_problem):
    # tiny_problem (tests/conftest.py), all eight choices by hand: the optimum is
    # 1 + 0 + 0 (vertices) + 0 + 3 (edges) = 4 at (0, 0, 1); the runner-up costs 5.
    assert reference_chain_dp(tiny_problem) == (4.0, (0, 0, 1))
    assert reference_tree_dp(tiny_problem) == (4.0, (0, 0, 1))


def test_reference_dps_refuse_what_they_cannot_solve():
    star = Problem([np.zeros(2)] * 4, [(0, 1), (0, 2), (0, 3)], [np.zeros((2, 2))] * 3)
    with pytest.raises(ProblemError, match="chain"):
        reference_chain_dp(star)
    assert reference_tree_dp(star) == (0.0, (0, 0, 0, 0))
    with pytest.raises(ProblemError, match="tree"):
        reference_tree_dp(random_dag(5, extra_edges=2, seed=3))
    with pytest.raises(ProblemError, match="uncapped"):
        reference_chain_dp(pase.testing.cap_memory(random_chain(3, with_memory=True), 0.5))


# -- generators -------------------------------------------------------------------------

def test_generators_are_seeded_and_shaped():
    a, b = random_tree(9, 4, seed=5), random_tree(9, 4, seed=5)
    assert a.edges == b.edges and all(np.array_equal(x, y) for x, y in zip(a.vertex_costs, b.vertex_costs))
    assert random_chain(5, seed=1).edges == [(0, 1), (1, 2), (2, 3), (3, 4)]
    tree = random_tree(12, seed=3)
    assert len(tree.edges) == 11 and _connected(tree)
    dag = random_dag(8, extra_edges=3, seed=2)
    assert len(dag.edges) == 7 + 3 and _connected(dag)
    assert len(random_dag(3, extra_edges=10, seed=0).edges) == 3  # as many as fit


@pytest.mark.parametrize("make", [random_chain, random_tree, random_dag])
def test_scale_multiplies_every_cost_and_memory_caps_bind(make):
    one, tiny = make(6, 4, seed=7), make(6, 4, seed=7, scale=1e-9)
    for x, y in zip(one.vertex_costs + one.edge_costs, tiny.vertex_costs + tiny.edge_costs):
        np.testing.assert_allclose(y, x * 1e-9, rtol=1e-15)
    capped = pase.testing.cap_memory(make(6, 4, seed=7, with_memory=True, memory_scale=2.0**30), 0.3)
    cheapest = brute_force(capped.with_memory_cap(None))
    best = brute_force(capped)
    assert best[1] is not None and capped.fits(best[1])
    assert best[0] >= cheapest[0]
    nothing = pase.testing.cap_memory(capped, -1.0)
    assert brute_force(nothing)[1] is None
    direct = make(6, 4, seed=7, memory_scale=2.0**30, cap=0.3)  # the same in one call
    assert direct.memory_cap == capped.memory_cap
    assert make(6, 4, seed=7, cap=None).memory is None


def test_random_problem_keeps_its_seeded_values():
    # Other tests pin seeds of random_problem: its stream must not move.
    # Values printed by the generator before it gained scale and siblings.
    p = random_problem(4, 3, 1, seed=0)
    assert p.sizes.tolist() == [3, 2, 2, 1] and p.edges == [(0, 1), (0, 2), (0, 3)]
    assert [c.tolist() for c in p.vertex_costs] == [[81, 50, 60], [67, 0], [84, 17], [0]]


def _connected(problem):
    seen, todo, nbrs = {0}, [0], problem.neighbors()
    while todo:
        for w in nbrs[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return len(seen) == problem.num_vertices


def test_check_solver_refuses_an_unavailable_backend():
    unavailable = pase.testing.SolverSpec("ghost", chain_dp, available=False)
    with pytest.raises(PaseError, match="ghost"):
        check_solver(unavailable)
