"""Helpers for testing solvers: random Problems, reference DPs and a conformance battery.

    from pase.testing import check_solver
    check_solver(my_solve, scope="chain", memory_cap=False)  # ConformanceError lists failures

or, one pytest case per (solver, check):

    @pase.testing.solver_checks(["dp", my_solve])
    def test_conformance(solver, check):
        check(solver)
"""
from pase.testing.checks import CHECKS, Check, checks_for
from pase.testing.conformance import check_solver, solver_checks
from pase.testing.random_problems import (
    add_memory,
    cap_memory,
    random_chain,
    random_dag,
    random_dense,
    random_problem,
    random_tree,
    scale_costs,
)
from pase.testing.reference import reference_chain_dp, reference_tree_dp
from pase.testing.runner import ConformanceError, Report, SolverSpec, solver_spec

__all__ = [
    "CHECKS", "Check", "ConformanceError", "Report", "SolverSpec", "add_memory", "cap_memory",
    "check_solver", "checks_for", "random_chain", "random_dag", "random_dense",
    "random_problem", "random_tree",
    "reference_chain_dp", "reference_tree_dp", "scale_costs", "solver_checks", "solver_spec",
]
