"""Repeated blocks under a memory cap: the Lagrangian route through the (min, +) powers
against the plain capped dp and brute force, on random chains of random blocks."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.problem import Problem, Status
from pase.solvers import dp, exhaustive
from pase.solvers.dp import core
from pase.solvers.dp.blocks import fold
from pase.solvers.dp.blocks.capped import shifted
from pase.solvers.dp.core import solve_blocks, solve_blocks_capped
from pase.testing import cap_memory

from .test_fold import chained


def block_memory(problem: Problem, seed: int) -> Problem:
    """Random integer memory per vertex, equal for vertices with equal cost vectors (so
    identical blocks stay identical), uncapped."""
    memory = []
    for c in problem.vertex_costs:
        digest = int.from_bytes(np.ascontiguousarray(c).tobytes()[:64].ljust(8, b"\0")[:8], "little")
        rng = np.random.default_rng([seed, digest, c.size])
        memory.append(rng.integers(1, 30, size=c.size).astype(float))
    return Problem(problem.vertex_costs, problem.edges, problem.edge_costs, problem.names, memory)


def capped_chain(seed, count, period, separators, shared, prefix, suffix, perturb, where):
    problem = chained(seed, count, period, min(separators, period), shared, prefix, suffix,
                      perturb)
    return cap_memory(block_memory(problem, seed), where)


@pytest.fixture(scope="module")
def blocks_always():
    """The dp tries blocks on every Problem, however small (it skips tiny plans)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "BLOCKS_MIN_ENTRIES", 0)
        yield


chains = dict(seed=st.integers(0, 2**32 - 1), count=st.sampled_from([2, 3, 5, 6, 7]),
              period=st.integers(1, 4), separators=st.integers(1, 2), shared=st.booleans(),
              prefix=st.integers(0, 3), suffix=st.integers(0, 3), perturb=st.booleans(),
              where=st.floats(-0.05, 1.0))


@settings(max_examples=50, deadline=None)
@given(**chains)
def test_dual_route_is_exact_or_says_its_gap(seed, count, period, separators, shared, prefix,
                                            suffix, perturb, where):
    problem = capped_chain(seed, count, period, separators, shared, prefix, suffix, perturb, where)
    plain = dp.solve(problem, blocks=False)
    free = solve_blocks(problem.with_memory_cap(None))
    if free is None:
        assert perturb, "an unperturbed chain of identical blocks was not reduced"
        return
    if problem.fits(free.choice):
        assert math.isclose(free.cost, plain.cost, rel_tol=1e-9, abs_tol=1e-9)
        return
    answer, stats = solve_blocks_capped(problem, free, fallback=False)
    if plain.status is Status.INFEASIBLE:
        assert answer is None or answer.status is Status.INFEASIBLE
        return
    assert answer is not None
    assert problem.fits(answer.choice)
    assert math.isclose(problem.evaluate(answer.choice), answer.cost, rel_tol=1e-9, abs_tol=1e-9)
    if answer.status is Status.OPTIMAL:
        assert stats["blocks_capped"] == "certified"
        assert math.isclose(answer.cost, plain.cost, rel_tol=1e-9, abs_tol=1e-9)
    else:
        assert answer.status is Status.FEASIBLE and stats["blocks_capped"] == "gap"
        assert answer.lower_bound <= plain.cost + 1e-9 * max(1.0, abs(plain.cost))
        assert answer.cost >= plain.cost - 1e-9 * max(1.0, abs(plain.cost))


@settings(max_examples=30, deadline=None)
@given(**chains)
def test_dp_under_a_cap_with_blocks_matches_the_plain_capped_dp(
        blocks_always, seed, count, period, separators, shared, prefix, suffix, perturb, where):
    problem = capped_chain(seed, count, period, separators, shared, prefix, suffix, perturb, where)
    plain = dp.solve(problem, blocks=False)
    ours = dp.solve(problem)
    assert ours.status is plain.status
    if plain.status is Status.OPTIMAL:
        assert math.isclose(ours.cost, plain.cost, rel_tol=1e-9, abs_tol=1e-9)
        assert problem.fits(ours.choice)
        assert ours.lower_bound == ours.cost


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.sampled_from([3, 5]), shared=st.booleans(),
       where=st.floats(0.0, 0.6))
def test_matches_exhaustive(blocks_always, seed, count, shared, where):
    problem = capped_chain(seed, count, 2, 1, shared, 1, 1, False, where)
    if problem.num_strategies() > 2 * 10**5:
        return
    brute = exhaustive.solve(problem)
    ours = dp.solve(problem)
    assert ours.status is brute.status
    if brute.choice is not None:
        assert math.isclose(ours.cost, brute.cost, rel_tol=1e-9, abs_tol=1e-9)


def test_a_binding_cap_at_a_hull_point_is_certified_through_the_powers(blocks_always):
    """A cap equal to the memory of some ``cost + lam * memory`` minimiser puts the capped
    optimum on the dual's hull: the dual bound certifies it with no plain dp."""
    certified = 0
    for seed in range(12):
        base = block_memory(chained(seed, 6, 3, 1, seed % 2 == 0, 2, 2), seed)
        lam = [0.5, 2.0, 8.0][seed % 3]
        x = solve_blocks(shifted(base, lam)).choice
        problem = base.with_memory_cap(base.memory_of(x))  # integers: exact sums
        plain = dp.solve(problem, blocks=False)
        ours = dp.solve(problem)
        assert ours.status is Status.OPTIMAL is plain.status
        assert math.isclose(ours.cost, plain.cost, rel_tol=1e-9, abs_tol=1e-9)
        if ours.stats.get("capped") is False:
            continue  # the uncapped optimum fits: no search at all
        assert ours.stats["blocks_capped"] == "certified", ours.stats["blocks_capped"]
        assert ours.stats["folded_solves"] >= 1
        certified += 1
    assert certified >= 4


def test_gap_without_fallback_is_reported_not_hidden():
    """With the plain plan over the dp's memory budget, an uncertified answer is
    'feasible' with the dual bound as its lower bound."""
    seen = 0
    for seed in range(15):
        problem = capped_chain(seed, 5, 3, 1, False, 2, 2, False, 0.4)
        free = solve_blocks(problem.with_memory_cap(None))
        if free is None or problem.fits(free.choice):
            continue
        answer, stats = solve_blocks_capped(problem, free, fallback=False)
        if stats["blocks_capped"] != "gap":
            continue
        plain = dp.solve(problem, blocks=False)
        assert answer.status is Status.FEASIBLE
        assert answer.lower_bound <= plain.cost <= answer.cost
        seen += 1
    assert seen >= 1


def test_infeasible_cap():
    problem = capped_chain(4, 5, 3, 1, False, 2, 2, False, -1.0)
    free = solve_blocks(problem.with_memory_cap(None))
    answer, stats = solve_blocks_capped(problem, free)
    assert answer.status is Status.INFEASIBLE and stats["blocks_capped"] == "infeasible"
    assert dp.solve(problem, blocks=False).status is Status.INFEASIBLE


def test_shift_keeps_shared_vectors_shared():
    problem = block_memory(chained(1, 4, 3, 1, False, 2, 2), 1)
    moved = shifted(problem, 2.5)
    ids = {}
    for c, m, n in zip(problem.vertex_costs, problem.memory, moved.vertex_costs):
        ids.setdefault((id(c), id(m)), set()).add(id(n))
        assert np.array_equal(n, c + 2.5 * m)
    assert all(len(s) == 1 for s in ids.values())


def test_over_budget_plain_plan_gives_feasible_with_its_gap(blocks_always):
    """With a memory budget the reduced plan fits and the plain one does not, a duality
    gap is answered 'feasible' with the dual bound, and the claim checks pass."""
    from pase.api import run_solver

    seen = 0
    for seed in range(16):
        problem = capped_chain(seed, 7, 3, 2, False, 3, 3, False, 0.4)
        plain_plan = dp.plan(problem, memory_budget=1e12)
        reduced_plan = dp.plan(fold.apply(problem.with_memory_cap(None))[0])
        if reduced_plan.peak_bytes >= plain_plan.peak_bytes:
            continue
        budget = (reduced_plan.peak_bytes + plain_plan.peak_bytes) / 2
        answer = run_solver("dp", problem, memory_budget=budget)  # checks the claim
        best = dp.solve(problem, blocks=False).cost
        if answer.status is Status.FEASIBLE:
            seen += 1
            assert answer.lower_bound <= best <= answer.cost
            assert answer.stats["blocks_capped"] == "gap"
        else:
            assert answer.status is Status.OPTIMAL
            assert math.isclose(answer.cost, best, rel_tol=1e-9, abs_tol=1e-9)
    assert seen >= 2


@pytest.mark.parametrize("seed, where", [(0, 0.2), (1, 0.4), (2, 0.2), (3, 0.4), (6, 0.2)])
def test_after_a_gap_the_plain_capped_dp_starts_from_the_folded_multiplier(blocks_always, seed,
                                                                          where):
    # These chains leave a duality gap through the powers: the plain capped dp takes over
    # at the route's multiplier and best fitting strategy, running no multiplier search of
    # its own, and still finds the exhaustive optimum.
    problem = capped_chain(seed, 3, 2, 1, False, 1, 1, False, where)
    brute = exhaustive.solve(problem)
    ours = dp.solve(problem)
    assert ours.stats["blocks_capped"] == "gap: plain capped dp"
    assert ours.stats["lagrangian_runs"] == 0
    assert ours.status is Status.OPTIMAL and problem.fits(ours.choice)
    assert math.isclose(ours.cost, brute.cost, rel_tol=1e-9, abs_tol=1e-9)
    assert ours.stats["lagrangian_bound"] <= brute.cost + 1e-9
