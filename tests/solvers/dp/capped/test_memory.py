"""The PaSE DP under a memory cap against brute force: fronts, bounds, guards."""
from __future__ import annotations

import itertools
import math
import time
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.errors import OptionError, TimeLimitError, TooLargeError
from pase.problem import Problem, Status
from pase.solvers import dp, exhaustive
from pase.solvers.dp.capped import fronts as dp_fronts
from pase.solvers.dp.capped import memory as dp_memory
from pase.testing import check_solver, random_problem

ORDERINGS = ("generateseq", "min-fill", "bfs")


def with_cap(problem: Problem, cap: float) -> Problem:
    return Problem(problem.vertex_costs, problem.edges, problem.edge_costs, problem.names,
                   memory=problem.memory, memory_cap=cap)


def brute_force(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Cost and memory of every strategy."""
    choices = np.array(list(itertools.product(*(range(k) for k in problem.sizes))))
    memory = sum(m[choices[:, v]] for v, m in enumerate(problem.memory))
    return problem.evaluate_many(choices), memory


def binding_cap(problem: Problem, where: float = 0.5) -> Problem:
    """``problem`` capped ``where`` of the way from its least memory to its optimum's."""
    least = sum(float(m.min()) for m in problem.memory)
    free = problem.memory_of(dp.solve(problem).choice)
    assert free > least, "pick a problem whose optimum is not already the leanest"
    return with_cap(problem, least + where * (free - least))


def assert_capped_optimum(problem: Problem, ordering: str, **options) -> dp.Solution:
    best = exhaustive.solve(problem)
    sol = dp.solve(problem, ordering=ordering, **options)
    if best.status is Status.INFEASIBLE:
        assert sol.status is Status.INFEASIBLE and sol.choice is None and sol.cost == math.inf
        return sol
    assert sol.status is Status.OPTIMAL, ordering
    assert math.isclose(sol.cost, best.cost, rel_tol=1e-9), ordering
    assert sol.lower_bound == sol.cost
    assert problem.fits(sol.choice), ordering
    assert math.isclose(problem.evaluate(sol.choice), best.cost, rel_tol=1e-9), ordering
    return sol


capped = st.builds(
    random_problem,
    num_vertices=st.integers(1, 8),
    max_candidates=st.integers(1, 5),
    extra_edges=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
    with_memory=st.just(True),
)


@settings(max_examples=120, deadline=None)
@given(capped, st.floats(0, 1))
def test_matches_exhaustive_under_a_random_cap(problem, where):
    _, memory = brute_force(problem)
    cap = float(memory.min() + where * (memory.max() - memory.min()))
    problem = with_cap(problem, cap)
    for ordering in ORDERINGS:
        sol = assert_capped_optimum(problem, ordering)
        assert sol.stats["memory_cap"] == cap
        assert sol.stats["memory"] == problem.memory_of(sol.choice)


@settings(max_examples=60, deadline=None)
@given(capped, st.floats(0, 1), st.sampled_from(ORDERINGS))
def test_fronts_alone_match_brute_force(problem, where, ordering):
    # The Pareto DP without the Lagrangian bounds, on the same caps: the
    # fronts must be exact by themselves, whatever the bounds prune.
    cost, memory = brute_force(problem)
    cap = float(memory.min() + where * (memory.max() - memory.min()))
    problem = with_cap(problem, cap)
    chosen = dp.plan(problem, ordering)
    found, stats = dp_memory.pareto_solve(problem, chosen.elimination, cap)
    assert found is not None
    assert math.isclose(found[1], cost[memory <= cap].min(), rel_tol=1e-9)
    assert problem.fits(found[0]) and math.isclose(problem.evaluate(found[0]), found[1])
    # The root front is the Pareto front of the strategies that fit.
    assert stats["front_points"]["final"] == _front_size(cost[memory <= cap], memory[memory <= cap])


def _front_size(cost: np.ndarray, memory: np.ndarray) -> int:
    order = np.lexsort((cost, memory))
    best, size = math.inf, 0
    for c in cost[order]:
        if c < best:
            best, size = c, size + 1
    return size


@settings(max_examples=40, deadline=None)
@given(capped)
def test_cap_below_the_least_memory_is_infeasible(problem):
    _, memory = brute_force(problem)
    problem = with_cap(problem, float(memory.min()) - 1.0)
    for ordering in ORDERINGS:
        sol = dp.solve(problem, ordering=ordering)
        assert sol.status is Status.INFEASIBLE and sol.choice is None and sol.cost == math.inf
        assert sol.stats["min_memory"] == memory.min()
        assert sol.stats["capped"]


@settings(max_examples=40, deadline=None)
@given(capped, st.floats(0, 10))
def test_cap_the_optimum_fits_gives_the_unconstrained_optimum(problem, slack):
    free = dp.solve(problem)
    problem = with_cap(problem, problem.memory_of(free.choice) + slack)
    sol = dp.solve(problem)
    assert sol.choice == free.choice and sol.cost == free.cost
    assert sol.status is Status.OPTIMAL and not sol.stats["capped"]
    assert "min_memory" not in sol.stats and "front_points" not in sol.stats


@settings(max_examples=60, deadline=None)
@given(capped, st.floats(0, 1), st.floats(0, 0.3), st.integers(0, 2**32 - 1))
def test_infinite_costs(problem, where, share, seed):
    # Forbidden pairs and candidates: exhaustive counts those strategies as absent.
    rng = np.random.default_rng(seed)
    problem = Problem([np.where(rng.random(c.size) < share / 2, np.inf, c)
                       for c in problem.vertex_costs], problem.edges,
                      [np.where(rng.random(m.shape) < share, np.inf, m) for m in problem.edge_costs],
                      memory=problem.memory)
    _, memory = brute_force(problem)
    cap = float(memory.min() + where * (memory.max() - memory.min()))
    for ordering in ORDERINGS:
        assert_capped_optimum(with_cap(problem, cap), ordering)


def test_infinite_memory_under_a_cap_is_forbidden():
    # Vertex 0's free candidate needs +inf memory: under any finite cap the optimum
    # takes candidate 0 at cost 1 (by hand). This raised ProblemError (NaN from 0 * inf).
    problem = Problem([np.array([1.0, 0.0]), np.array([0.0])], [(0, 1)], [np.zeros((2, 1))],
                      memory=[np.array([1.0, math.inf]), np.array([1.0])], memory_cap=5.0)
    for ordering in ORDERINGS:
        sol = dp.solve(problem, ordering=ordering)
        assert (sol.status, sol.choice, sol.cost) == (Status.OPTIMAL, (0, 0), 1.0)
    # Every candidate of a vertex needs +inf memory: nothing fits.
    nothing = Problem([np.array([1.0])], [], [], memory=[np.array([math.inf])], memory_cap=5.0)
    assert dp.solve(nothing).status is Status.INFEASIBLE


@settings(max_examples=60, deadline=None)
@given(capped, st.floats(0, 1), st.integers(0, 2**32 - 1))
def test_infinite_and_negative_memory_match_brute_force(problem, where, seed):
    rng = np.random.default_rng(seed)
    memory = []
    for k in problem.sizes:
        m = rng.integers(-20, 50, size=k).astype(float)
        m[rng.random(k) < 0.3] = math.inf
        memory.append(m)
    problem = Problem(problem.vertex_costs, problem.edges, problem.edge_costs, memory=memory)
    finite = [m[np.isfinite(m)] for m in memory]
    low = sum(float(f.min(initial=0.0)) for f in finite)
    high = sum(float(f.max(initial=0.0)) for f in finite)
    cap = low - 5 + where * (high - low + 10)
    problem = with_cap(problem, cap)
    fitting = [problem.evaluate(c) for c in itertools.product(*(range(k) for k in problem.sizes))
               if problem.fits(c)]
    for ordering in ORDERINGS:
        sol = dp.solve(problem, ordering=ordering)
        if not fitting:
            assert sol.status is Status.INFEASIBLE, ordering
        else:
            assert sol.status is Status.OPTIMAL and problem.fits(sol.choice), ordering
            assert math.isclose(sol.cost, min(fitting), rel_tol=1e-9), (ordering, sol.cost)


def test_min_memory_skips_strategies_of_infinite_cost():
    # The least-memory candidates of both vertices cannot go together.
    inf = math.inf
    problem = Problem([np.array([5.0, 0.0]), np.array([5.0, 0.0])], [(0, 1)],
                      [np.array([[inf, 0.0], [0.0, 0.0]])],
                      memory=[np.array([1.0, 10.0]), np.array([1.0, 10.0])], memory_cap=10.5)
    sol = dp.solve(problem)
    assert sol.status is Status.INFEASIBLE and sol.stats["min_memory"] == 11.0
    sol = dp.solve(with_cap(problem, 11.0))
    assert sol.status is Status.OPTIMAL and sol.cost == 5.0 and sol.choice in {(0, 1), (1, 0)}


def test_negative_memory():
    # The memory bound sums per-vertex minima, so it holds for any sign.
    rng = np.random.default_rng(3)
    base = random_problem(7, 4, 3, seed=11)
    memory = [rng.integers(-20, 20, size=k).astype(float) for k in base.sizes]
    problem = Problem(base.vertex_costs, base.edges, base.edge_costs, memory=memory)
    _, mems = brute_force(problem)
    for cap in np.linspace(mems.min(), mems.max(), 7):
        for ordering in ORDERINGS:
            assert_capped_optimum(with_cap(problem, float(cap)), ordering)


def test_disconnected_components():
    a = random_problem(4, 4, 1, seed=5, with_memory=True)
    b = random_problem(3, 4, 1, seed=6, with_memory=True)
    n = a.num_vertices
    joined = Problem(a.vertex_costs + b.vertex_costs,
                     list(a.edges) + [(u + n, v + n) for u, v in b.edges],
                     a.edge_costs + b.edge_costs, memory=a.memory + b.memory)
    _, mems = brute_force(joined)
    for cap in np.linspace(mems.min(), mems.max(), 9):
        for ordering in ORDERINGS:
            assert_capped_optimum(with_cap(joined, float(cap)), ordering)


def test_small_pair_chunks_match(monkeypatch):
    problem = binding_cap(random_problem(8, 5, 3, seed=21, with_memory=True), 0.3)
    elim = dp.plan(problem, "generateseq").elimination

    def fronts() -> tuple:
        return dp_memory.pareto_solve(problem, elim, problem.memory_cap)

    whole, stats = fronts()
    assert stats["front_points"]["max_generated"] > 3
    monkeypatch.setattr(dp_fronts, "PAIR_CHUNK", 3)
    assert fronts() == (whole, stats)
    assert whole[0] == assert_capped_optimum(problem, "generateseq").choice


def test_ties_are_deterministic():
    # Every cost zero and every memory equal: many optima, one answer.
    base = random_problem(30, 4, 10, seed=7, zero_prob=1.0)
    rng = np.random.default_rng(0)
    memory = [rng.integers(1, 4, size=k).astype(float) for k in base.sizes]
    costs = [c + rng.integers(0, 2, size=c.size) for c in base.vertex_costs]
    problem = Problem(costs, base.edges, base.edge_costs, memory=memory)
    capped_problem = binding_cap(problem)
    first = dp.solve(capped_problem)
    assert first.stats["capped"] and first.status is Status.OPTIMAL
    for _ in range(2):
        again = dp.solve(capped_problem)
        assert again.choice == first.choice and again.cost == first.cost


def test_stats_of_a_binding_cap():
    problem = binding_cap(random_problem(8, 5, 3, seed=4, with_memory=True), 0.2)
    sol = assert_capped_optimum(problem, "generateseq")
    stats = sol.stats
    assert stats["capped"] and stats["min_memory"] == brute_force(problem)[1].min()
    assert stats["lagrangian_bound"] <= sol.cost + 1e-9
    if not stats["lagrangian_gap_closed"]:
        points = stats["front_points"]
        assert points["total"] >= points["max_per_entry"] >= 1 and points["final"] >= 1


def test_max_states_guard_names_the_vertex():
    problem = binding_cap(random_problem(8, 5, 3, seed=21, with_memory=True))
    chosen = dp.plan(problem, "generateseq")
    with pytest.raises(TooLargeError) as info:
        dp_memory.pareto_solve(problem, chosen.elimination, problem.memory_cap, max_states=5)
    msg = str(info.value)
    assert "max_states=5" in msg and "at vertex 'v" in msg
    assert "coarser configuration space" in msg and "memory cap" in msg


def test_options_and_time_limit():
    problem = random_problem(6, 4, 2, seed=0, with_memory=True)
    with pytest.raises(OptionError, match="max_states"):
        dp.solve(problem, max_states=0)
    with pytest.raises(OptionError, match="max_states"):
        dp.solve(problem, max_states=2.5)
    with pytest.raises(TimeLimitError, match="time limit"):
        dp.solve(binding_cap(problem), time_limit=1e-9)


def test_time_limit_inside_the_capped_search():
    # The plain DP finished in time; the Lagrangian search and the fronts check
    # the deadline too (here one already past), and have no partial answer.
    problem = binding_cap(random_problem(8, 5, 3, seed=21, with_memory=True))
    chosen = dp.plan(problem, "generateseq")
    total, choice, _ = dp.min_sum(problem, chosen)
    run = partial(dp.min_sum, chosen=chosen)
    with pytest.raises(TimeLimitError, match="time limit"):
        dp_memory.solve_capped(problem, chosen.elimination, (choice, total), run,
                               deadline=time.perf_counter() - 1.0)


def test_conformance_suite():
    report = check_solver("dp")
    assert "memory cap" in report.passed and not report.refused


def test_a_fitting_tie_of_the_free_cost_ends_the_multiplier_search():
    # Candidates (cost, memory) (1, 10), (1, 4), (5, 1) under a cap of 5: the free optimum
    # (1, 10) does not fit, but (1, 4) costs the same and fits, so the bound at lam = 0
    # already meets it (by hand). The search used to halve lam down to its run limit
    # (40 plain DPs) looking for a crossing of two lines of equal cost.
    problem = Problem([np.array([1.0, 1.0, 5.0]), np.array([0.0])], [(0, 1)],
                      [np.zeros((3, 1))], memory=[np.array([10.0, 4.0, 1.0]), np.array([0.0])],
                      memory_cap=5.0)
    sol = dp.solve(problem)
    assert (sol.status, sol.choice, sol.cost) == (Status.OPTIMAL, (1, 0), 1.0)
    assert sol.stats["lagrangian_runs"] <= 3
