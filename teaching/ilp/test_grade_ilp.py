"""Autograder for assignment 3 (the one-hot ILP with PuLP).

    pytest teaching/ilp                                  # grades ilp_pulp.py here
    PASE_SUBMISSION=teaching/ilp/solution/ilp_pulp.py pytest teaching/ilp
"""
from pathlib import Path

import numpy as np
import pytest

pulp = pytest.importorskip("pulp", reason='assignment 3 needs PuLP: pip install -e ".[ilp]"')

import pase.testing  # noqa: E402
from pase.problem import Problem, Status  # noqa: E402
from pase.solvers import exhaustive  # noqa: E402
from pase.testing import cap_memory, random_chain, random_dag, random_tree  # noqa: E402
from pase.testing.grading import load_submission  # noqa: E402

# PuLP 3.3+ announces its 4.0 API (model.add_variable...) on every classic call.
pytestmark = pytest.mark.filterwarnings("ignore:.*PuLP 4:DeprecationWarning")
NAME = "student-ilp"
submission = load_submission(Path(__file__).with_name("ilp_pulp.py"), replaces=[NAME])
SHAPES = {"chain": lambda seed, **kw: random_chain(4, 4, seed, **kw),
          "tree": lambda seed, **kw: random_tree(5, 3, seed, **kw),
          "dag": lambda seed, **kw: random_dag(5, 3, 3, seed, **kw)}


def hand_problem(scale=1.0):
    return Problem([np.array([1.0, 5.0]) * scale, np.array([2.0, 0.0]) * scale], [(0, 1)],
                   [np.array([[0.0, 9.0], [0.0, 0.0]]) * scale])


# -- Part 1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1e-9, 1.0, 1e15])
def test_part1_scale_is_the_largest_entry(scale):
    assert submission.objective_scale(hand_problem(scale)) == pytest.approx(9.0 * scale, rel=1e-12)


def test_part1_scale_ignores_infinity_and_never_returns_zero():
    forbidden = Problem([np.array([3.0, np.inf]), np.array([-7.0])], [(0, 1)],
                        [np.array([[0.0], [2.0]])])
    assert submission.objective_scale(forbidden) == pytest.approx(7.0)
    zeros = Problem([np.zeros(2)], [], [])
    assert submission.objective_scale(zeros) == pytest.approx(1.0)


# -- Part 2 ---------------------------------------------------------------------------------

def assign(problem, x, y, choice):
    """Set x one-hot at ``choice`` and every y to the product of its two ends."""
    for v, xv in enumerate(x):
        for i, var in enumerate(xv):
            var.setInitialValue(1.0 if choice[v] == i else 0.0)
    for (u, v), ye in zip(problem.edges, y):
        for i, row in enumerate(ye):
            for j, var in enumerate(row):
                var.setInitialValue(1.0 if (choice[u], choice[v]) == (i, j) else 0.0)


def broken_constraints(model):
    listed = model.constraints  # PuLP < 3.3: a dict; 3.3+: call it for a list
    listed = listed() if callable(listed) else listed.values()
    return [c for c in listed if not c.valid(eps=1e-9)]


def test_part2_model_shape():
    problem = random_dag(6, 4, 3, seed=2)
    model, x, y = submission.build_model(problem, 1.0)
    assert isinstance(model, pulp.LpProblem) and model.sense == pulp.LpMinimize
    assert [len(xv) for xv in x] == problem.sizes.tolist()
    assert all(var.cat == pulp.LpInteger and var.lowBound == 0 and var.upBound == 1
               for xv in x for var in xv), "x must be binary"
    assert len(y) == len(problem.edges)
    for (u, v), ye in zip(problem.edges, y):
        assert (len(ye), len(ye[0])) == (problem.sizes[u], problem.sizes[v])


@pytest.mark.parametrize("scale", [1e-9, 1e12])
@pytest.mark.parametrize("seed", range(3))
def test_part2_a_choice_satisfies_the_model_and_costs_what_it_should(seed, scale):
    problem = random_dag(6, 4, 3, seed=seed, scale=scale)
    model, x, y = submission.build_model(problem, scale * 7.0)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        choice = tuple(int(rng.integers(k)) for k in problem.sizes)
        assign(problem, x, y, choice)
        assert broken_constraints(model) == [], f"choice {choice} breaks constraints"
        assert pulp.value(model.objective) == pytest.approx(
            problem.evaluate(choice) / (scale * 7.0), rel=1e-9, abs=1e-12)


def test_part2_two_picks_at_one_vertex_break_a_constraint():
    problem = random_chain(3, 3, seed=1)
    model, x, y = submission.build_model(problem, 1.0)
    assign(problem, x, y, (0, 0, 0))
    x[1][1].setInitialValue(1.0)  # vertex 1 now picks candidates 0 and 1
    assert broken_constraints(model)


def test_part2_a_choice_over_the_memory_cap_breaks_a_constraint():
    problem = cap_memory(random_tree(5, 3, seed=4, with_memory=True, memory_scale=2.0**30), 0.3)
    model, x, y = submission.build_model(problem, 1.0)
    heaviest = tuple(int(np.argmax(m)) for m in problem.memory)
    lightest = tuple(int(np.argmin(m)) for m in problem.memory)
    assert not problem.fits(heaviest) and problem.fits(lightest)
    assign(problem, x, y, heaviest)
    assert broken_constraints(model)
    assign(problem, x, y, lightest)
    assert broken_constraints(model) == []


# -- Part 3 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cap", [None, 0.3, -1.0])
@pytest.mark.parametrize("scale", [1e-9, 1.0, 1e12])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_part3_matches_exhaustive_search(shape, scale, cap):
    seed = len(shape) + int(np.log10(scale)) + 11
    problem = SHAPES[shape](seed, scale=scale, with_memory=cap is not None, memory_scale=2.0**30)
    if cap is not None:
        problem = cap_memory(problem, cap)
    truth = exhaustive.solve(problem)
    sol = submission.solve(problem)
    assert sol.status is truth.status
    if truth.status is Status.OPTIMAL:
        assert problem.fits(sol.choice)
        assert problem.evaluate(sol.choice) == pytest.approx(truth.cost, rel=1e-9, abs=0)
        assert sol.cost == pytest.approx(problem.evaluate(sol.choice), rel=1e-9, abs=0)
    else:
        assert sol.choice is None


@pase.testing.solver_checks([NAME])
def test_part3_battery(solver, check):
    check(solver)
