"""Autograder for assignment 1 (chain and tree dynamic programs).

    pytest teaching/dp                                   # grades chain_tree_dp.py here
    PASE_SUBMISSION=teaching/dp/solution/chain_tree_dp.py pytest teaching/dp

Tests whose names contain ``chain`` are Part 1, ``tree`` Part 2.
"""
from pathlib import Path

import numpy as np
import pytest

import pase.testing
from pase.errors import PaseError
from pase.problem import Problem
from pase.registry import SOLVERS
from pase.testing import (
    cap_memory,
    random_chain,
    random_dag,
    random_tree,
    reference_chain_dp,
    reference_tree_dp,
)
from pase.testing.grading import load_submission

CHAIN, TREE = "student-chain-dp", "student-tree-dp"
submission = load_submission(Path(__file__).with_name("chain_tree_dp.py"), replaces=[CHAIN, TREE])
SCALES = [1e-9, 1.0, 1e15]


def assert_optimal(sol, problem, reference):
    best, _ = reference(problem)
    assert sol.choice is not None and len(sol.choice) == problem.num_vertices
    cost = problem.evaluate(sol.choice)
    assert cost == pytest.approx(best, rel=1e-9, abs=0), "not the cheapest choice"
    assert sol.cost == pytest.approx(cost, rel=1e-9, abs=0), "reported cost differs from the choice's"
    assert sol.status is pase.Status.OPTIMAL


# -- Part 1: chains -----------------------------------------------------------------------

def test_chain_solver_is_registered_with_its_tags():
    info = SOLVERS.entry(CHAIN).info
    assert (info.get("exact"), info.get("scope"), info.get("memory_cap")) == (True, "chain", False)


@pase.testing.solver_checks([CHAIN])
def test_chain_battery(solver, check):
    check(solver)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(8))
def test_chain_matches_the_reference(seed, scale):
    problem = random_chain(1 + seed % 7, 1 + seed % 5, seed=seed, scale=scale)
    assert_optimal(submission.solve_chain(problem), problem, reference_chain_dp)


def test_chain_of_fifty_wide_vertices():
    problem = random_chain(50, 40, seed=3, scale=1e-9)
    assert_optimal(submission.solve_chain(problem), problem, reference_chain_dp)


def test_chain_solver_refuses_a_star_and_a_cap():
    star = Problem([np.zeros(2)] * 4, [(0, 1), (0, 2), (0, 3)], [np.zeros((2, 2))] * 3)
    with pytest.raises(PaseError):
        submission.solve_chain(star)
    with pytest.raises(PaseError):
        submission.solve_chain(cap_memory(random_chain(4, seed=1, with_memory=True), 0.5))


# -- Part 2: trees ------------------------------------------------------------------------

def test_tree_solver_is_registered_with_its_tags():
    info = SOLVERS.entry(TREE).info
    assert (info.get("exact"), info.get("scope"), info.get("memory_cap")) == (True, "tree", False)


@pase.testing.solver_checks([TREE])
def test_tree_battery(solver, check):
    check(solver)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(8))
def test_tree_matches_the_reference(seed, scale):
    problem = random_tree(1 + seed % 9, 1 + seed % 4, seed=seed, scale=scale)
    assert_optimal(submission.solve_tree(problem), problem, reference_tree_dp)


def test_tree_solves_a_star_whose_hub_is_not_vertex_zero():
    n = 7  # vertex 3 is linked to every other vertex
    rng = np.random.default_rng(5)
    edges = [tuple(sorted((3, v))) for v in range(n) if v != 3]
    problem = Problem([rng.integers(0, 9, 3).astype(float) for _ in range(n)], edges,
                      [rng.integers(0, 9, (3, 3)).astype(float) for _ in edges])
    assert_optimal(submission.solve_tree(problem), problem, reference_tree_dp)


def test_tree_of_three_thousand_vertices_in_a_path_needs_no_recursion():
    problem = random_chain(3000, 3, seed=2)
    assert_optimal(submission.solve_tree(problem), problem, reference_chain_dp)


def test_tree_solver_refuses_a_cycle_and_a_cap():
    with pytest.raises(PaseError):
        submission.solve_tree(random_dag(5, 3, extra_edges=2, seed=4))
    with pytest.raises(PaseError):
        submission.solve_tree(cap_memory(random_tree(4, seed=1, with_memory=True), 0.5))
