"""Helpers for testing solvers: random Problems and a conformance suite.

    from pase.testing import check_solver
    check_solver(my_solve)      # raises ConformanceError naming the broken rule
"""
from pase.testing.conformance import ConformanceError, Report, check_solver
from pase.testing.random_problems import random_problem

__all__ = ["ConformanceError", "Report", "check_solver", "random_problem"]
