"""Helpers for testing solvers: random Problems and a conformance suite."""
from pase.testing.random_problems import random_problem

__all__ = ["random_problem"]
