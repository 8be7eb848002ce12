"""Every built-in solver, and a student's, passes the shipped conformance battery."""
import numpy as np
import pytest

from pase.problem import Solution, Status
from pase.registry import SOLVERS
from pase.testing import ConformanceError, check_solver

FAST_OPTIONS = {"mcmc": {"iterations": 2000}}


def available_solvers():
    names = []
    for entry in SOLVERS.entries():
        available = entry.info.get("available")
        if available is None or available():
            names.append(entry.name)
    return names


@pytest.mark.parametrize("name", available_solvers())
def test_builtin_solver_conforms(name):
    report = check_solver(name, options=FAST_OPTIONS.get(name))
    assert "memory cap" in report.passed


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


def test_the_battery_catches_a_wrong_cost_claim():
    def liar(problem, *, time_limit=None, seed=None):
        choice = (0,) * problem.num_vertices
        return Solution(choice, problem.evaluate(choice) * 0.5, Status.FEASIBLE, "liar")

    with pytest.raises(ConformanceError, match="reported cost .* evaluates to"):
        check_solver(liar)


def test_the_battery_catches_a_false_optimality_claim():
    def boaster(problem, *, time_limit=None, seed=None):
        choice = tuple(int(c.size - 1) for c in problem.vertex_costs)
        return Solution(choice, problem.evaluate(choice), Status.OPTIMAL, "boaster")

    with pytest.raises(ConformanceError, match="claims OPTIMAL|optimum"):
        check_solver(boaster)


def test_the_battery_catches_nondeterminism():
    rng = np.random.default_rng()

    def dice(problem, *, time_limit=None, seed=None):
        choice = tuple(int(rng.integers(0, c.size)) for c in problem.vertex_costs)
        return Solution(choice, problem.evaluate(choice), Status.FEASIBLE, "dice")

    with pytest.raises(ConformanceError, match="not deterministic|memory"):
        check_solver(dice)
