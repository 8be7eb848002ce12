"""The greedy and MCMC heuristics: valid, honest, never below the optimum, deterministic."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pase.errors import OptionError
from pase.problem import Problem, Status
from pase.solvers import exhaustive, greedy, mcmc
from pase.testing import random_problem

SETTINGS = settings(max_examples=60, deadline=None)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def problems(draw, capped: bool | None = None) -> Problem:
    """Small random Problems, some with a memory cap between the extremes."""
    p = random_problem(draw(st.integers(1, 7)), draw(st.integers(1, 5)),
                       draw(st.integers(0, 3)), draw(seeds), with_memory=True)
    if capped is None:
        capped = draw(st.booleans())
    if not capped:
        return Problem(p.vertex_costs, p.edges, p.edge_costs)
    low = sum(float(m.min()) for m in p.memory)
    high = sum(float(m.max()) for m in p.memory)
    cap = low + draw(st.floats(0, 1)) * (high - low)
    return Problem(p.vertex_costs, p.edges, p.edge_costs, memory=p.memory, memory_cap=cap)


def check_heuristic(p: Problem, got) -> None:
    best = exhaustive.solve(p)
    assert best.status is Status.OPTIMAL  # caps here are never below the minimum
    assert got.status is Status.FEASIBLE and got.lower_bound is None
    assert p.fits(got.choice)
    assert got.cost == p.evaluate(got.choice)
    assert got.cost >= best.cost - 1e-9 * abs(best.cost)


@SETTINGS
@given(p=problems(), improve=st.integers(0, 4))
def test_greedy_is_valid(p, improve):
    check_heuristic(p, greedy.solve(p, improve=improve))


@SETTINGS
@given(p=problems(), improve=st.integers(1, 6))
def test_greedy_improvement_never_hurts(p, improve):
    assert greedy.solve(p, improve=improve).cost <= greedy.solve(p).cost


@SETTINGS
@given(p=problems(), seed=seeds)
def test_mcmc_is_valid_and_deterministic(p, seed):
    got = mcmc.solve(p, seed=seed, iterations=2000)
    check_heuristic(p, got)
    assert mcmc.solve(p, seed=seed, iterations=2000).choice == got.choice


@SETTINGS
@given(p=problems(capped=False), data=st.data())
def test_mcmc_never_worse_than_its_start(p, data):
    start = tuple(data.draw(st.integers(0, int(k) - 1)) for k in p.sizes)
    got = mcmc.solve(p, start=start, iterations=500)
    assert got.cost <= p.evaluate(start)


def test_mcmc_default_seed_is_reproducible_and_seeds_differ():
    p = random_problem(30, 8, 5, seed=11)
    assert mcmc.solve(p).choice == mcmc.solve(p, seed=0).choice
    runs = {mcmc.solve(p, seed=s, iterations=3000).choice for s in range(4)}
    assert len(runs) > 1


def test_mcmc_tiny_time_limit_returns_start():
    p = random_problem(10, 4, 2, seed=2)
    start = tuple(int(k) - 1 for k in p.sizes)
    got = mcmc.solve(p, start=start, time_limit=1e-9)
    assert got.choice == start and got.stats["iterations"] == 0


def test_mcmc_start_over_cap_restarts_from_lowest_memory():
    p = random_problem(8, 4, 2, seed=4, with_memory=True)
    lowest = tuple(int(np.argmin(m)) for m in p.memory)
    capped = Problem(p.vertex_costs, p.edges, p.edge_costs, memory=p.memory,
                     memory_cap=p.memory_of(lowest))
    biggest = tuple(int(np.argmax(m)) for m in p.memory)
    got = mcmc.solve(capped, start=biggest, iterations=500)
    assert got.stats["start"] == "lowest memory" and capped.fits(got.choice)


@pytest.mark.parametrize("solve", [greedy.solve, mcmc.solve])
def test_cap_below_smallest_memory_is_infeasible(solve):
    p = random_problem(6, 4, 2, seed=5, with_memory=True)
    low = sum(float(m.min()) for m in p.memory)
    got = solve(Problem(p.vertex_costs, p.edges, p.edge_costs, memory=p.memory,
                        memory_cap=low - 1))
    assert got.status is Status.INFEASIBLE and got.choice is None


def test_greedy_repairs_an_over_cap_choice():
    # Greedy alone takes candidate 0 everywhere (cheap, memory-hungry); the cap
    # forces the vertex whose switch costs least per byte saved to move.
    p = Problem([np.array([0.0, 10.0]), np.array([0.0, 1.0])], [(0, 1)], [np.zeros((2, 2))],
                memory=[np.array([5.0, 1.0]), np.array([5.0, 1.0])], memory_cap=6.0)
    got = greedy.solve(p)
    assert got.choice == (0, 1) and got.cost == 1.0


def test_greedy_order_and_ties():
    # v0 ties between 0 and 1: lowest index wins; v1 then follows v0 through the edge.
    p = Problem([np.array([1.0, 1.0]), np.array([0.0, 0.0])], [(0, 1)],
                [np.array([[5.0, 0.0], [0.0, 5.0]])])
    assert greedy.solve(p).choice == (0, 1)


@pytest.mark.parametrize("solve, options, named", [
    (greedy.solve, {"improve": -1}, "improve"),
    (greedy.solve, {"improve": 1.5}, "improve"),
    (greedy.solve, {"improve": True}, "improve"),
    (greedy.solve, {"seed": -1}, "seed"),
    (greedy.solve, {"time_limit": 0.0}, "time_limit"),
    (mcmc.solve, {"iterations": -5}, "iterations"),
    (mcmc.solve, {"iterations": 0}, "iterations"),
    (mcmc.solve, {"iterations": "many"}, "iterations"),
    (mcmc.solve, {"beta": -1.0}, "beta"),
    (mcmc.solve, {"beta": float("nan")}, "beta"),
    (mcmc.solve, {"beta": float("inf")}, "beta"),
    (mcmc.solve, {"seed": -1}, "seed"),
    (mcmc.solve, {"seed": 2.5}, "seed"),
    (mcmc.solve, {"time_limit": -1.0}, "time_limit"),
    (mcmc.solve, {"time_limit": float("nan")}, "time_limit"),
    (mcmc.solve, {"start": (0,)}, "start"),
])
def test_bad_options_name_the_option(solve, options, named):
    p = random_problem(3, seed=1)
    with pytest.raises(OptionError, match=named) as info:
        solve(p, **options)
    assert "\n" not in str(info.value)


def test_integral_floats_are_accepted():
    # The CLI may hand over 1e3 for an int option (CONTRACT: int accepts integral floats).
    p = random_problem(5, seed=1)
    assert mcmc.solve(p, iterations=1e3, seed=3).choice == mcmc.solve(p, iterations=1000,
                                                                    seed=3).choice
    assert greedy.solve(p, improve=2.0).stats["improve"] == 2
